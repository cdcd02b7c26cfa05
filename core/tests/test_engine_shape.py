"""The placement engine stays readable in parts (issue 34): no module of ``placement/`` or
``scheduling/`` much over 500 lines, no class much over 300, no ``# type: ignore``.

Why a test: these measures slipped once (placer.py reached 1,373 lines, one class of 1,100,
16 ignores) because nothing noticed them grow; now the change that grows one says so. The
margins (520, 320) leave room for a docstring, not for a second class's worth of code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import xpushare

ENGINE = [
    Path(xpushare.__file__).parent / "placement",
    Path(xpushare.__file__).parent / "scheduling",
]
MAX_MODULE_LINES = 520
MAX_CLASS_LINES = 320

MODULES = sorted(p for d in ENGINE for p in d.glob("*.py"))


def test_the_engine_is_found() -> None:
    assert len(MODULES) > 20


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_module_or_class_is_too_long_to_hold_in_mind(path: Path) -> None:
    source = path.read_text()
    assert source.count("\n") <= MAX_MODULE_LINES, f"{path.name}: split it by what it holds"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            assert lines <= MAX_CLASS_LINES, f"{path.name}: class {node.name} is {lines} lines"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_type_check_is_switched_off(path: Path) -> None:
    lines = [i for i, line in enumerate(path.read_text().splitlines(), 1) if "type: ignore" in line]
    assert not lines, f"{path.name}: '# type: ignore' on lines {lines}: type it instead"
