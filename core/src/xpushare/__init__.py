"""xpushare: share GPUs and other accelerators between Kubernetes pods.

This module is what a vendor plugin imports (with :mod:`xpushare.models` for the data types,
:mod:`xpushare.native` for the library thread and :mod:`xpushare.testing` for its tests);
everything else under ``xpushare`` is internal and may change without notice.
``core/tests/test_public_api.py`` pins the names exported here.
"""

import importlib.metadata

from xpushare.errors import AdmissionDenied, PluginError, VendorUnavailable, XpushareError
from xpushare.hookspecs import hookimpl
from xpushare.models import API_VERSION

__version__ = importlib.metadata.version("xpushare")

__all__ = [
    "API_VERSION",
    "AdmissionDenied",
    "PluginError",
    "VendorUnavailable",
    "XpushareError",
    "__version__",
    "hookimpl",
]
