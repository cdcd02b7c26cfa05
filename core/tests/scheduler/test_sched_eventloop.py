"""server.event_loop: uvloop where installed, asyncio's own on request, a clear error when
uvloop is required and missing."""

from __future__ import annotations

import asyncio
import builtins
from typing import Any

import pytest

from xpushare.errors import XpushareError
from xpushare.scheduler.eventloop import loop_factory, run


async def _loop_type() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_runs_on_uvloop_when_it_is_installed() -> None:
    pytest.importorskip("uvloop")
    assert run(_loop_type(), "auto").startswith("uvloop")
    assert run(_loop_type(), "uvloop").startswith("uvloop")


def test_asyncio_is_asyncios_own_loop() -> None:
    assert run(_loop_type(), "asyncio").startswith("asyncio")


def test_missing_uvloop_falls_back_or_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_uvloop(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "uvloop":
            raise ImportError("No module named 'uvloop'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    assert loop_factory("auto") is asyncio.new_event_loop
    with pytest.raises(XpushareError, match=r"server\.event_loop is 'uvloop'"):
        loop_factory("uvloop")
