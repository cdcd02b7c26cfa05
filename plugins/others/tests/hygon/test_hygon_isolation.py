"""Hygon's library keeps AMD's rsmi_* names: it must neither use nor leak another's symbols.

Each case runs in a fresh interpreter, because a library loaded with RTLD_GLOBAL cannot be
taken out of a process again and would leak into every later test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from xpushare.testing.clib import compile_shared_library

# Another vendor's library with the same name, loaded first and globally: it reports no GPUs.
DECOY = """
#include <stdint.h>
int rsmi_num_monitor_devices(uint32_t *n) { *n = 0; return 0; }
int rsmi_init(uint64_t flags) { (void)flags; return 0; }
"""

SCRIPT = """
import ctypes, json, os, sys
from xpushare.plugins import PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare_others.hygon import plugin

decoy, lib, deepbind = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if decoy:
    ctypes.CDLL(decoy, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
config = {"library_path": lib, "search_loader_path": False, "deepbind": deepbind}
host = PluginHost(core_plugins=CORE_PLUGINS, node_name="n", vendor_config={"hygon": config})
host.register("hygon", plugin.hygon)
handle = host.vendor("hygon")
handle.startup()
out = {}
try:
    out["devices"] = [d.id for d in handle.detect()]
except Exception as exc:
    out["error"] = str(exc)
try:
    ctypes.CDLL(None).rsmi_dev_name_get
    out["leaked"] = True
except AttributeError:
    out["leaked"] = False
print(json.dumps(out))
"""


def _run(tmp_path: Path, decoy: str, lib: Path, deepbind: bool, table: Path) -> dict[str, object]:
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script), decoy, str(lib), "1" if deepbind else "0"],
        capture_output=True,
        text=True,
        env={"FAKE_RSMI_TABLE": str(table), "PATH": "/usr/bin:/bin"},
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture
def two_dcus(tmp_path: Path) -> Path:
    table = tmp_path / "table.txt"
    table.write_text("device name=K100 uid=0x1 bus=0x10\ndevice name=K100 uid=0x2 bus=0x11\n")
    return table


def test_the_library_binds_its_own_calls_despite_a_global_namesake(
    tmp_path: Path, rsmi_lib: Path, two_dcus: Path
) -> None:
    decoy = compile_shared_library(DECOY, tmp_path / "decoy", "librocm_smi64_amd.so")
    isolated = _run(tmp_path, str(decoy), rsmi_lib, True, two_dcus)
    assert isolated["devices"] == ["DCU-0000000000000001", "DCU-0000000000000002"]
    # Without RTLD_DEEPBIND the library's internal call lands in the other vendor's function,
    # which is the failure the isolation exists to prevent.
    plain = _run(tmp_path, str(decoy), rsmi_lib, False, two_dcus)
    assert "RSMI_STATUS_INVALID_ARGS" in str(plain.get("error"))


def test_the_library_adds_nothing_to_the_global_symbol_scope(
    tmp_path: Path, rsmi_lib: Path, two_dcus: Path, compile_fake: Callable[..., Path]
) -> None:
    result = _run(tmp_path, "", rsmi_lib, True, two_dcus)
    assert result["leaked"] is False
    assert len(result["devices"]) == 2  # type: ignore[arg-type]
