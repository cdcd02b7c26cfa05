"""Enflame test helpers: rows of the fake EFML's device table, and a host tree for them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import others_hosts as hosts
from others_hosts import node_settings as node_settings

FAKE_EFSMI = Path(__file__).parent / "fake_efsmi" / "efsmi.py"

#: An S60's memory in MiB (48 GB), as EFML reports it.
S60_MIB = 49152


def gcu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": "S60",
        "uuid": f"T6R{index:09d}",
        "bus": 0x50 + index,
        "mem_total": S60_MIB,
        "mem_used": 1024,
        "healthy": 1,
        "usage": 40,
        "temp": 52,
        "power": 120,
    }
    row.update(overrides)
    return row


def host_tree(root: Path, count: int) -> Path:
    """/dev/gcuctl, /dev/gcu<i>, and each GCU's sysfs entry (NUMA: the second half on 1)."""
    return hosts.host_tree(root, count, control="/dev/gcuctl", node="gcu", first_bus=0x50)


class FakeEfsmi:
    """The fake efsmi: an executable (``path``) and the state file it keeps."""

    def __init__(self, directory: Path, *, new: bool = True) -> None:
        self.state_path = directory / "efsmi-state.json"
        self.path = directory / "efsmi"
        if not new:
            return
        directory.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{FAKE_EFSMI}" "$@"\n')
        self.path.chmod(0o755)
        # HAMi's test vectors' S60 profiles (ids 0-2) on GCUs of 6 slices.
        self.save(
            {
                "profiles": {"0": ["1g.6gb", 1], "1": ["3g.20gb", 3], "2": ["6g.40gb", 6]},
                "capacity": 6,
                "gcus": {},
            }
        )

    @classmethod
    def at(cls, directory: Path) -> FakeEfsmi:
        """The fake made earlier in *directory*."""
        return cls(directory, new=False)

    def save(self, state: dict[str, Any]) -> None:
        self.state_path.write_text(json.dumps(state))

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.state_path.read_text())
        return data

    def instances(self, gcu: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.state()["gcus"].get(str(gcu), {}).get("instances", [])
        return found

    def drs_on(self, gcu: int) -> bool:
        return bool(self.state()["gcus"].get(str(gcu), {}).get("drs", False))

    def calls(self) -> list[list[str]]:
        calls: list[list[str]] = self.state().get("calls", [])
        return calls

    def forget_calls(self) -> None:
        """Start the call log afresh (e.g. after detection has read the profiles)."""
        self.save({**self.state(), "calls": []})

    def update(self, **changes: Any) -> None:
        self.save({**self.state(), **changes})
