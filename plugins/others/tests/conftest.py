"""Fixtures shared by the tests of every vendor in xpushare-others.

Each vendor's tests compile a fake of its management library from C (sources under
``tests/<vendor>/fake_*``, sharing ``tests/fakes/fake_table.h``) once per session, write the
fake's device table into a file the fake reads at every call, and drive the real plugin
through :class:`xpushare.plugins.PluginHost`, whose handles run node-side hooks on the
vendor's own library thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from xpushare.plugins import PluginHost, VendorHandle
from xpushare.testing.clib import compile_shared_library
from xpushare.testing.hosts import vendor_host

TESTS = Path(__file__).parent
FAKES = TESTS / "fakes"


def _compile_fake(source: Path, out_dir: Path, name: str, defines: Sequence[str] = ()) -> Path:
    return compile_shared_library(
        source.read_text(),
        out_dir,
        name,
        extra_args=[f"-I{FAKES}", *(f"-D{d}" for d in defines)],
    )


@pytest.fixture(scope="session")
def compile_fake() -> Callable[..., Path]:
    """``compile_fake(source, out_dir, name, defines=())``: a fake C library, compiled."""
    return _compile_fake


class Table:
    """The device table file of a fake library; ``write`` replaces its content."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, *devices: Mapping[str, Any], **global_keys: Any) -> None:
        lines = []
        if global_keys:
            lines.append("global " + " ".join(f"{k}={v}" for k, v in global_keys.items()))
        for d in devices:
            lines.append("device " + " ".join(f"{k}={v}" for k, v in d.items()))
        self.path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def table_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Table]:
    """``table_for("FAKE_RSMI_TABLE")``: a table file the fake named by that variable reads."""

    def make(env: str) -> Table:
        path = tmp_path / f"{env.lower()}.txt"
        path.write_text("")
        monkeypatch.setenv(env, str(path))
        return Table(path)

    return make


@pytest.fixture
def handle_for() -> Iterator[Callable[[str, ModuleType, Mapping[str, Any]], VendorHandle]]:
    """``handle_for(vendor, plugin_module, node_config)``: the vendor on a fresh plugin host.

    Every handle made is shut down at the end of the test (library released, thread ended).
    """
    hosts: list[PluginHost] = []

    def make(vendor: str, module: ModuleType, config: Mapping[str, Any]) -> VendorHandle:
        hosts.append(vendor_host(vendor, module, config))
        return hosts[-1].vendor(vendor)

    yield make
    for host in hosts:
        host.close()


@pytest.fixture(autouse=True)
def _no_vendor_config_files(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's own XPUSHARE_<VENDOR>_CONFIG must not leak into the tests.
    for vendor in ("AWSNEURON", "ENFLAME", "HYGON", "ILUVATAR", "KUNLUN", "METAX", "MTHREADS"):
        monkeypatch.delenv(f"XPUSHARE_{vendor}_CONFIG", raising=False)
        monkeypatch.delenv(f"XPUSHARE_{vendor}_LIBRARY", raising=False)
