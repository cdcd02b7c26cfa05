"""Compile small C shared libraries in tests: fake vendor libraries.

Why: vendor plugins are tested without accelerators by loading a *fake vendor library*, a
few dozen lines of C that export the symbols the plugin calls with a device table the test
chooses, through the plugin's real loading path (``dlopen``, ``dlsym``, ctypes, the library
thread). gcc is on every development and CI machine, and compiling such a file takes a
fraction of a second, so tests build their fakes into ``tmp_path`` rather than shipping
binaries. Example::

    from xpushare.testing.clib import compile_shared_library

    def test_detect(tmp_path):
        lib = compile_shared_library(FAKE_ACME_C, tmp_path, "libacme.so.1")
        ...  # point the plugin's library path option at lib
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["CompileError", "LibraryVariants", "compile_shared_library"]

#: Compiling a small file takes well under a second; this only stops a hung compiler.
COMPILE_TIMEOUT_S: Final = 120.0

#: -shared -fPIC: a loadable library; -O1: close to how vendor libraries are built while
#: staying quick to compile; -Wall: show a fake's mistakes in the error when it fails.
COMPILE_FLAGS: Final[tuple[str, ...]] = ("-shared", "-fPIC", "-O1", "-Wall")


class CompileError(RuntimeError):
    """The C compiler is missing, or it rejected the source (its output is included)."""


def compile_shared_library(
    source: str,
    out_dir: Path,
    name: str,
    *,
    extra_args: Sequence[str] = (),
    compiler: str = "gcc",
) -> Path:
    """Compile C *source* into the shared library ``out_dir / name`` and return its path.

    :param source: the C source text.
    :param out_dir: where to write the library and its source (``name + ".c"``); created if
        missing.
    :param name: the library's file name, used as is and as its soname, e.g.
        ``"libnvidia-ml.so.1"``, so that a loader searching by soname finds it.
    :param extra_args: more compiler arguments, placed after the source (``-D...``,
        ``-lpthread``).
    :param compiler: the compiler command (``gcc`` or a path to one).
    :raises CompileError: the compiler is not installed, or the compilation failed.

    The library is written under a temporary name and renamed into place, so recompiling a
    path that the process has already loaded never rewrites the mapped file under it.
    """
    if not name or "/" in name:
        raise ValueError(f"name must be a file name such as 'libfoo.so.1', got {name!r}")
    executable = shutil.which(compiler)
    if executable is None:
        raise CompileError(
            f"C compiler {compiler!r} not found on PATH; fake vendor libraries are compiled "
            "from C by the tests. Install gcc (Debian/Ubuntu: apt-get install gcc; "
            "Fedora/RHEL: dnf install gcc)."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / f"{name}.c"
    src.write_text(source, encoding="utf-8")
    target = out_dir / name
    partial = out_dir / f".{name}.{os.getpid()}.partial"
    command = [
        executable,
        *COMPILE_FLAGS,
        f"-Wl,-soname,{name}",
        "-o",
        str(partial),
        str(src),
        *extra_args,
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise CompileError(
            f"{compiler} did not finish within {COMPILE_TIMEOUT_S:g} s compiling {src}"
        ) from exc
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise CompileError(
            f"{compiler} failed (exit status {done.returncode}) compiling {src}:\n"
            f"$ {' '.join(command)}\n{done.stderr.strip()}"
        )
    partial.replace(target)
    return target


class LibraryVariants:
    """Variants of one fake library, each compiled once: per set of ``-D`` defines and name.

    Why: a plugin's tests need the full fake most of the time and, now and then, one built
    without a symbol or with an old API generation (``-DNO_<SYMBOL>``); compiling each
    variant once per session (keep the object in a session-scoped fixture) keeps the suite
    fast. Each variant goes to a folder of its own under *out_dir*, so variants of one name
    never overwrite a library a test has already loaded.

    :param source: the C source text.
    :param out_dir: the folder the variants' folders are made in.
    :param name: the default file name. Tip: not the real library's soname, so that the
        plugin's bare-soname candidate finds nothing and "library not found" tests work.
    """

    def __init__(self, source: str, out_dir: Path, name: str) -> None:
        self.source = source
        self.out_dir = out_dir
        self.name = name
        self._built: dict[tuple[str, ...], Path] = {}

    def get(self, *defines: str, name: str | None = None) -> Path:
        """The library compiled with ``-D<define>`` for each of *defines*, named *name*."""
        file_name = name or self.name
        key = (file_name, *defines)
        if key not in self._built:
            self._built[key] = compile_shared_library(
                self.source,
                self.out_dir / f"v{len(self._built)}",
                file_name,
                extra_args=[f"-D{d}" for d in defines],
            )
        return self._built[key]
