"""kubelet device plugins (API v1beta1): one gRPC server per vendor resource, in generations.

``service`` answers kubelet's calls; ``generation`` keeps the server registered across
kubelet restarts. The stubs are generated from ``xpushare/node/_proto`` (scripts/gen-proto).
"""

from xpushare.node.deviceplugin.generation import API_VERSION, PluginServer, PluginStatus
from xpushare.node.deviceplugin.service import HEALTHY, UNHEALTHY, DevicePluginService

__all__ = [
    "API_VERSION",
    "HEALTHY",
    "UNHEALTHY",
    "DevicePluginService",
    "PluginServer",
    "PluginStatus",
]
