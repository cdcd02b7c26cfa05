"""The plugin host: loading vendor plugins and calling each one on its own.

``PluginHost`` discovers plugins through entry points and records what happened to each;
``VendorHandle`` is how the scheduler, the node agent and the CLI call one vendor.
"""

from xpushare.plugins.host import EXTENSION_GROUP, VENDOR_GROUP, PluginHost
from xpushare.plugins.records import PluginKind, PluginRecord, PluginState
from xpushare.plugins.settings import HostSettings
from xpushare.plugins.vendor import VendorHandle

__all__ = [
    "EXTENSION_GROUP",
    "VENDOR_GROUP",
    "HostSettings",
    "PluginHost",
    "PluginKind",
    "PluginRecord",
    "PluginState",
    "VendorHandle",
]
