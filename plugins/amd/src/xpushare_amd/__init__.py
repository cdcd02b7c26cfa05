"""xpushare-amd: the AMD vendor plugin for xpushare (entry point ``amd`` → ``xpushare_amd.plugin``).

The package imports only xpushare's public API and never ``amdsmi`` at import time: ``amdsmi``
fails to import on a machine without ROCm's ``libamd_smi.so``, so it is imported lazily on
the vendor's library thread (see :mod:`xpushare_amd.library`).
"""
