"""The public surface of xpushare.native, and its place at the bottom of the layers."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import xpushare.native

EXPECTED = {
    "DEFAULT_DLOPEN_MODE",
    "STANDARD_LIBRARY_DIRS",
    "LibraryNotFound",
    "LibraryThread",
    "LibraryThreadClosed",
    "LibraryThreadStuck",
    "LoadAttempt",
    "MissingSymbol",
    "NativeCallTimeout",
    "NativeError",
    "NativeLibrary",
    "NodeContext",
    "NotOnLibraryThread",
    "candidate_paths",
}


def test_exported_names_are_pinned():
    assert set(xpushare.native.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(xpushare.native, name) is not None


def test_errors_derive_from_the_xpushare_base():
    from xpushare.errors import XpushareError

    for name in EXPECTED:
        value = getattr(xpushare.native, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, xpushare.native.NativeError), name
    assert issubclass(xpushare.native.NativeError, XpushareError)


def test_imports_only_the_standard_library_and_xpushare_errors():
    package = Path(xpushare.native.__file__).parent
    for module in package.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                allowed = (
                    top in sys.stdlib_module_names
                    or top == "__future__"
                    or name == "xpushare.errors"
                    or name.startswith("xpushare.native")
                )
                assert allowed, f"{module.name} imports {name}"
