"""Test helpers of the Cambricon plugin: the fake CNDev's builds and its card table."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAKE_SOURCE = (Path(__file__).parent / "fake_cndev" / "fake_cndev.c").read_text(encoding="utf-8")


# Not named libcndev.so: a library already loaded under that soname would answer the plugin's
# bare-name candidate, and the "library not found" test needs none.
FAKE_NAME = "libcndev-fake.so"


def card_line(slot: int, **fields: Any) -> str:
    """One MLU370-X8 card in *slot* unless *fields* say otherwise."""
    values: dict[str, Any] = {
        "uuid": f"{slot:02d}001012-1916-0000-0000-000000000000",
        "name": "MLU370-X8",
        "mem": 49152,
        "mem_used": 1000 + slot,
        "cores": 8,
        "health": 1,
        "domain": 0,
        "bus": 0x3B + slot,
        "dev": 0,
        "fn": 0,
        "util": 10 * (slot + 1),
        "temp": 40 + slot,
        "power": 70 + slot,
        "smlu": 1,
    }
    values.update(fields)
    return "card " + " ".join(f"{k}={v}" for k, v in values.items())


class FakeTable:
    """The fake's card table file; FAKE_CNDEV_CONFIG points at it for the test."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.write()

    def write(self, *lines: str) -> None:
        self.path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def cards(self, *cards: str, extra: tuple[str, ...] = ()) -> None:
        self.write(*extra, *cards)

    def lines(self, prefix: str) -> list[str]:
        """The table's lines of one kind, e.g. the sMLU instances the plugin created."""
        text = self.path.read_text(encoding="utf-8")
        return [line for line in text.splitlines() if line.startswith(prefix)]


def native(path: Path, symbol: str, restype: Any = ctypes.c_int) -> Callable[..., Any]:
    """A function of the fake library, for a test to ask the fake what happened."""
    fn = ctypes.CDLL(str(path))[symbol]
    fn.restype = restype
    return fn  # type: ignore[no-any-return]
