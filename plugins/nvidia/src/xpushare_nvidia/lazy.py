"""NVIDIA's Python bindings (``pynvml``), imported on their first use only.

Why: ``pynvml`` declares NVML's whole API as ctypes structures and functions when it is
imported, some 16 MiB of a process's memory. Every ``xpushare`` process may load this plugin
(the scheduler for its fit, a node agent for whichever vendors its image carries, the mock
agent included), yet only a node with NVIDIA GPUs ever calls NVML. The plugin's modules
take ``pynvml`` from here: a stand-in that imports the real module when an attribute is
first read (on the NVIDIA library thread, as NVML is loaded: library.py) and reads every
attribute from it afterwards, so a test that patches ``pynvml`` is seen. Nothing in the
plugin reads ``pynvml`` at import time. (The standard library's LazyLoader would not do:
before Python 3.12 the import statement itself reads the module's ``__spec__`` and runs it.)
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any


class _Deferred:
    """A module imported on the first attribute read."""

    __slots__ = ("_lock", "_module", "_name")
    _name: str
    _module: ModuleType | None
    _lock: threading.Lock

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_module", None)
        object.__setattr__(self, "_lock", threading.Lock())

    def _load(self) -> ModuleType:
        module = self._module
        if module is None:
            with self._lock:
                module = self._module
                if module is None:
                    module = importlib.import_module(self._name)
                    object.__setattr__(self, "_module", module)
        return module

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._load(), attribute)

    def __setattr__(self, attribute: str, value: Any) -> None:
        # Written to the module itself (library.py binds NVML's handle there).
        setattr(self._load(), attribute, value)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<deferred module {self._name!r}, {state}>"


#: ``pynvml``, imported when first used.
pynvml: Any = _Deferred("pynvml")
