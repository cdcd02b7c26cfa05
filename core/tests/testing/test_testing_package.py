"""``xpushare.testing`` exports its harnesses without importing them until they are used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import xpushare.testing


def test_every_exported_name_resolves() -> None:
    for name in xpushare.testing.__all__:
        assert getattr(xpushare.testing, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = xpushare.testing.Nope  # type: ignore[attr-defined]


def test_a_small_helper_does_not_import_the_scheduler() -> None:
    # A fresh interpreter: this one has imported everything already.
    code = (
        "import sys, xpushare.testing.clib; "
        "print('xpushare.scheduler' in sys.modules, 'xpushare.node' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["False", "False"]
