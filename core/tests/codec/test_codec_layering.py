"""The codec sits low in the import layers: models, errors, pydantic and the stdlib only."""

import ast
import sys
from pathlib import Path

import xpushare.codec

ALLOWED = {"xpushare.models", "xpushare.errors", "xpushare.codec", "pydantic"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_codec_imports_only_its_allowed_layers():
    package = Path(xpushare.codec.__file__).parent
    sources = sorted(package.glob("*.py"))
    assert len(sources) >= 5
    for source in sources:
        for name in _imports(source):
            top = name.split(".")[0]
            allowed = top in sys.stdlib_module_names or any(
                name == layer or name.startswith(layer + ".") for layer in ALLOWED
            )
            assert allowed, f"{source.name} imports {name}"
