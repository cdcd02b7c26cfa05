"""Test helpers of the Ascend plugin: the fake DCMI's builds and its device table."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAKE_SOURCE = (Path(__file__).parent / "fake_dcmi" / "fake_dcmi.c").read_text(encoding="utf-8")


# Not named libdcmi.so: a library already loaded under that soname would answer the plugin's
# bare-name candidate, and the "library not found" test needs none.
FAKE_NAME = "libdcmi-fake.so"


def chip_line(i: int, **fields: Any) -> str:
    """One 910B3 chip on card *i* unless *fields* say otherwise."""
    values: dict[str, Any] = {
        "card": i,
        "device": 0,
        "logic": i,
        "phy": i,
        "type": 0,
        "name": "910B3",
        "ver": "V1",
        "aicore": 20,
        "hbm": 65536,
        "hbm_used": 1000 + i,
        "health": 0,
        "die": f"0x1000{i},0x2,0x3,0x4,0x5",
        "domain": 0,
        "bus": 0x41 + i,
        "slot": 0,
        "fn": 0,
        "temp": 40 + i,
        "power": 950 + i,
        "util": 10 * (i + 1),
        "ecc": 1,
        "sbe": 0,
        "dbe": 0,
    }
    values.update(fields)
    return "chip " + " ".join(f"{k}={v}" for k, v in values.items())


class FakeTable:
    """The fake's device table file; FAKE_DCMI_CONFIG points at it for the test."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.write()

    def write(self, *lines: str) -> None:
        self.path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def chips(self, *chips: str, extra: tuple[str, ...] = ()) -> None:
        self.write(*extra, *chips)


def native(path: Path, symbol: str, restype: Any = ctypes.c_int) -> Callable[..., Any]:
    """A function of the fake library, for a test to ask the fake what happened."""
    fn = ctypes.CDLL(str(path))[symbol]
    fn.restype = restype
    return fn  # type: ignore[no-any-return]
