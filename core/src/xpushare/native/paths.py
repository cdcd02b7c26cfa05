"""Where to look for a vendor library inside a container that mounts the host's driver.

Why: the node agent runs in a container; the vendor's library usually lives on the host (or
in a driver container) and is mounted under some root such as ``/host`` or
``/run/nvidia/driver``, in whichever library directory that distribution uses. Listing the
candidates explicitly, instead of ``ctypes.util.find_library`` (which runs ``ldconfig`` and
compilers in subprocesses, and looks only at the container's own files), keeps loading fast
and lets the "library not found" error say exactly where it looked.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Library directories, relative to a root, in the order distributions prefer them: Red Hat
#: style ``lib64``, then Debian multiarch for the two architectures accelerator nodes use,
#: then the plain ``lib`` fallbacks (also where usrmerge-less systems keep them).
STANDARD_LIBRARY_DIRS: Final[tuple[str, ...]] = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib",
    "lib64",
    "lib",
)


def candidate_paths(
    sonames: Sequence[str],
    *,
    roots: Sequence[str | os.PathLike[str]] = (),
    extra_dirs: Sequence[str] = (),
) -> list[str]:
    """List the paths to try for a library, best first, for :meth:`LibraryThread.load`.

    For each root, each of :data:`STANDARD_LIBRARY_DIRS` and then each of *extra_dirs*
    under it, each soname; then the bare sonames, which the dynamic loader resolves through
    its own search (``LD_LIBRARY_PATH``, the ``ldconfig`` cache, ...). Duplicates are dropped,
    order is kept. Pure string work: nothing is looked up on disk.

    :param sonames: file names of the library, preferred first (``libnvidia-ml.so.1``).
    :param roots: where the host's (or driver container's) filesystem is mounted.
    :param extra_dirs: more library directories, relative to each root (a leading ``/`` is
        ignored); with no *roots* they are taken from ``/``.

    >>> candidate_paths(["libfoo.so.1"], roots=["/host"])[:2]
    ['/host/usr/lib64/libfoo.so.1', '/host/usr/lib/x86_64-linux-gnu/libfoo.so.1']
    >>> candidate_paths(["libfoo.so.1"])
    ['libfoo.so.1']
    """
    for soname in sonames:
        if not soname or "/" in soname:
            raise ValueError(
                f"candidate_paths takes library file names such as 'libfoo.so.1', got "
                f"{soname!r}; put a full path in front of the list it returns instead"
            )
    dirs = [*STANDARD_LIBRARY_DIRS, *(d.lstrip("/") for d in extra_dirs)]
    if roots:
        under_roots = [
            str(PurePosixPath(os.fspath(root), d, soname))
            for root in roots
            for d in dirs
            for soname in sonames
        ]
    else:
        under_roots = [
            str(PurePosixPath("/", d.lstrip("/"), soname)) for d in extra_dirs for soname in sonames
        ]
    return list(dict.fromkeys([*under_roots, *sonames]))
