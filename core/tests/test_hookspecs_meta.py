"""Every hook is documented the way the contract promises, and exercised by some test."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from xpushare import hookspecs

HOOKS = sorted(
    name for name, fn in vars(hookspecs).items() if name.startswith("xpushare_") and callable(fn)
)
REPO = Path(__file__).resolve().parents[2]


def _opts(name: str) -> dict[str, object]:
    opts: dict[str, object] = getattr(hookspecs, name).xpushare_spec
    return opts


def test_there_are_hooks_for_the_whole_contract() -> None:
    required = {
        "xpushare_vendor",
        "xpushare_detect",
        "xpushare_allocate",
        "xpushare_fit",
        "xpushare_patch_annotations",
        "xpushare_monitor",
        "xpushare_resource_request",
        "xpushare_score",
        "xpushare_mutate_admission",
        "xpushare_preferred_allocation",
        "xpushare_startup",
        "xpushare_shutdown",
    }
    assert required <= set(HOOKS)


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_typed_and_documented(name: str) -> None:
    fn = getattr(hookspecs, name)
    doc = " ".join((inspect.getdoc(fn) or "").split())
    assert len(doc) > 150, f"{name}: document when it is called, on which thread, what None means"
    assert "Called" in doc, f"{name}: say when and by whom it is called"
    assert "thread" in doc, f"{name}: say on which thread it runs"
    sig = inspect.signature(fn)
    assert sig.return_annotation is not inspect.Signature.empty, f"{name}: type the result"
    for param in sig.parameters.values():
        assert param.annotation is not inspect.Parameter.empty, f"{name}({param.name}) untyped"
    if _opts(name).get("firstresult"):
        assert "None" in doc and "first non-``None``" in doc, f"{name}: say what None means"


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_exercised_by_a_test(name: str) -> None:
    test_files = [
        p
        for p in REPO.rglob("test_*.py")
        if ".venv" not in p.parts and p.resolve() != Path(__file__).resolve()
    ]
    short = name.removeprefix("xpushare_")
    callers = {
        "xpushare_vendor": ("xpushare_vendor",),
        "xpushare_register_policies": ("call_register_policies", "xpushare_register_policies"),
    }.get(name, (name, f".{short}(", f".a{short}("))
    assert any(any(c in p.read_text() for c in callers) for p in test_files), (
        f"no test calls {name}"
    )
