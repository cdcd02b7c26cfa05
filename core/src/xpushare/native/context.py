"""What a vendor's node-side hooks receive as ``ctx``.

Why one object: node-side hooks (startup, detect, monitor, allocate, ...) are called many
times and must share what ``xpushare_startup`` set up (the loaded library, handles), know
their vendor's configuration, and reach the vendor's library thread, without module-level
globals that would leak between tests and between processes' plugin instances.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xpushare.native.errors import NotOnLibraryThread
from xpushare.native.library import DEFAULT_DLOPEN_MODE

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence

    from xpushare.native.library import NativeLibrary
    from xpushare.native.thread import LibraryThread


@dataclass
class NodeContext:
    """The node-side state of one vendor, passed to its hooks as ``ctx``."""

    #: The vendor name (the plugin's entry-point name).
    vendor: str
    #: The Kubernetes node this process runs on.
    node_name: str
    #: The vendor's library thread; node-side hooks already run on it.
    library: LibraryThread
    #: The vendor's section of the xpushare configuration (e.g. its library path option).
    config: Mapping[str, Any] = field(default_factory=dict)
    #: The plugin's own state across hook calls, e.g. ``state["lib"] = ctx.load_library(...)``.
    state: dict[str, Any] = field(default_factory=dict)

    def load_library(
        self,
        candidates: Sequence[str | os.PathLike[str]],
        *,
        mode: int = DEFAULT_DLOPEN_MODE,
    ) -> NativeLibrary:
        """Load the vendor's library (see :meth:`LibraryThread.load`).

        Must be called on the vendor's library thread, i.e. from a node-side hook: a library
        loaded from elsewhere would invite calls from elsewhere.

        :raises NotOnLibraryThread: called on another thread.
        :raises LibraryNotFound: no candidate loaded; the message lists every attempt.
        """
        if not self.library.owns_current_thread():
            raise NotOnLibraryThread(
                self.vendor, "NodeContext.load_library()", threading.current_thread().name
            )
        return self.library.load(candidates, mode=mode)
