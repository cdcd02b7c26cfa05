"""xpushare vendor plugin for Cambricon MLUs.

Cambricon ships no Python binding for its management library (CNDev), so this package binds
``libcndev.so`` with ctypes (:mod:`xpushare_cambricon.library`) and drives it on the vendor's
library thread that xpushare's core owns. The hooks live in :mod:`xpushare_cambricon.plugin`,
which the ``xpushare.vendors`` entry point names.
"""

__all__: list[str] = []
