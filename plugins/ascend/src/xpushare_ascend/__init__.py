"""xpushare vendor plugin for Huawei Ascend NPUs.

Huawei ships no Python binding for its management library (DCMI), so this package binds
``libdcmi.so`` with ctypes (:mod:`xpushare_ascend.library`) and drives it on the vendor's
library thread that xpushare's core owns. The hooks live in :mod:`xpushare_ascend.plugin`,
which the ``xpushare.vendors`` entry point names.
"""

__all__: list[str] = []
