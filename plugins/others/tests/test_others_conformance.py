"""The core's vendor conformance suite, run against each vendor of xpushare-others.

Each vendor is loaded from its entry point, as on a node, with its fake library compiled from
C and a device table of two devices; Allocate goes through the real node agent serving a fake
kubelet over unix sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from xpushare.testing.conformance import VendorConformance

TESTS = Path(__file__).parent
GIB = 1024**3


class _Fake:
    """A conformance class whose vendor runs on a fake library compiled once per session."""

    source: Path
    soname: str
    table_env: str
    table: str

    @pytest.fixture(autouse=True)
    def _library(
        self, tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]
    ) -> None:
        out = tmp_path_factory.getbasetemp() / f"conformance-{self.soname}"
        self.lib = out / self.soname
        if not self.lib.exists():
            compile_fake(self.source, out, self.soname)

    def _table(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        path = tmp_path / "table.txt"
        path.write_text(self.table)
        monkeypatch.setenv(self.table_env, str(path))

    def unavailable(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        return {
            "library_path": str(tmp_path / "missing" / self.soname),
            "search_loader_path": False,
        }


def _host(tmp_path: Path, files: list[str]) -> Path:
    root = tmp_path / "host"
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    return root


class TestHygonConformance(_Fake, VendorConformance):
    vendor = "hygon"
    source = TESTS / "hygon/fake_rsmi/fake_rocm_smi.c"
    soname = "librocm_smi64.so"
    table_env = "FAKE_RSMI_TABLE"
    table = (
        f"device name=K100 uid=0x1 bus=0x10 mem_total={64 * GIB} render=128\n"
        f"device name=K100 uid=0x2 bus=0x11 mem_total={64 * GIB} render=129\n"
    )

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        self._table(tmp_path, monkeypatch)
        root = _host(tmp_path, ["dev/kfd", "dev/dri/card0", "dev/dri/renderD128",
                                "dev/dri/card1", "dev/dri/renderD129"])  # fmt: skip
        for i in range(2):
            props = root / f"sys/class/kfd/kfd/topology/nodes/{i}/properties"
            props.parent.mkdir(parents=True)
            props.write_text(f"simd_count 240\nsimd_per_cu 4\nlocation_id {(0x10 + i) << 8}\n")
        return {
            "library_path": str(self.lib),
            "host_root": str(root),
            "sysfs_root": str(root / "sys"),
            "vdev_agent_dir": str(tmp_path / "vdev"),
        }

    def created(self, config: Mapping[str, Any]) -> list[str]:
        # One vDCU config directory per sharing container.
        root = Path(config["vdev_agent_dir"])
        return sorted(p.name for p in root.glob("*")) if root.is_dir() else []


class TestIluvatarConformance(_Fake, VendorConformance):
    vendor = "iluvatar"
    source = TESTS / "iluvatar/fake_ixml/fake_ixml.c"
    soname = "libixml.so"
    table_env = "FAKE_IXML_TABLE"
    table = (
        f"device uuid=GPU-a name=BI-V150 mem_total={32 * GIB} bus_id=0000:20:00.0\n"
        f"device uuid=GPU-b name=BI-V150 mem_total={32 * GIB} bus_id=0000:21:00.0\n"
    )

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        self._table(tmp_path, monkeypatch)
        root = _host(tmp_path, ["usr/local/vgpu/libvgpu.so"])
        return {"library_path": str(self.lib), "host_root": str(root)}


class TestMetaxConformance(_Fake, VendorConformance):
    vendor = "metax"
    source = TESTS / "metax/fake_mxsml/fake_mxsml.c"
    soname = "libmxsml.so"
    table_env = "FAKE_MXSML_TABLE"
    table = (
        f"device uuid=GPU-m0 name=MXC500 bdf=0000:30:00.0 vram_kib={64 * 1024**2}\n"
        f"device uuid=GPU-m1 name=MXC500 bdf=0000:31:00.0 vram_kib={64 * 1024**2}\n"
    )

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        self._table(tmp_path, monkeypatch)
        root = _host(tmp_path, ["dev/mxcd", "dev/dri/card1", "dev/dri/renderD129",
                                "dev/dri/card2", "dev/dri/renderD130"])  # fmt: skip
        for i in range(2):
            drm = root / f"sys/bus/pci/devices/0000:{0x30 + i:02x}:00.0/drm"
            (drm / f"card{i + 1}").mkdir(parents=True)
            (drm / f"renderD{129 + i}").mkdir()
        return {
            "library_path": str(self.lib),
            "host_root": str(root),
            "sysfs_root": str(root / "sys"),
        }


class TestMthreadsConformance(_Fake, VendorConformance):
    vendor = "mthreads"
    source = TESTS / "mthreads/fake_mtml/fake_mtml.c"
    soname = "libmtml.so.2"
    table_env = "FAKE_MTML_TABLE"
    table = (
        f"device uuid=GPU-t0 name=MTT_S4000 sbdf=0000:40:00.0 mem_total={48 * GIB}\n"
        f"device uuid=GPU-t1 name=MTT_S4000 sbdf=0000:41:00.0 mem_total={48 * GIB}\n"
    )

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        self._table(tmp_path, monkeypatch)
        return {"library_path": str(self.lib)}
