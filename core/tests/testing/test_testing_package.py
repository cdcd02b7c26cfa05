"""``xpushare.testing`` exports its harnesses without importing them until they are used."""

from __future__ import annotations

import pytest

import xpushare.testing
from xpushare.testing.imports import loaded_by, run_fresh


def test_every_exported_name_resolves() -> None:
    for name in xpushare.testing.__all__:
        assert getattr(xpushare.testing, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = xpushare.testing.Nope  # type: ignore[attr-defined]


def test_a_small_helper_does_not_import_the_scheduler() -> None:
    # A fresh interpreter: this one has imported everything already.
    watched = ["xpushare.scheduler", "xpushare.node"]
    assert loaded_by("import xpushare.testing.clib", watched) == []


def test_loaded_by_names_the_watched_modules_the_code_loaded_and_only_those() -> None:
    code = "import json, xpushare.models\nprint('noise on the last line but one')"
    assert loaded_by(code, ["xpushare.models", "json", "numpy"]) == ["xpushare.models", "json"]


def test_a_failing_fresh_interpreter_is_an_assertion_with_its_stderr() -> None:
    with pytest.raises(AssertionError, match="No module named 'no_such_module'"):
        run_fresh("import no_such_module")
