"""The core's vendor conformance suite, run against each vendor of xpushare-others.

Each vendor is loaded from its entry point, as on a node, with its fake library compiled from
C (or, for AWS Neuron, a sysfs tree) and a device table of two devices; Allocate goes through
the real node agent serving a fake kubelet over unix sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from enflame.enflame_fakes import FakeEfsmi

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

    #: Files the vendor looks for under the host's root (device nodes, HAMi's libraries),
    #: made empty under ``tmp_path / "host"``; none: no ``host_root`` setting.
    host_files: tuple[str, ...] = ()

    def _table(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        path = tmp_path / "table.txt"
        path.write_text(self.table)
        monkeypatch.setenv(self.table_env, str(path))

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        self._table(tmp_path, monkeypatch)
        settings: dict[str, Any] = {"library_path": str(self.lib)}
        if self.host_files:
            settings["host_root"] = str(_host(tmp_path, self.host_files))
        return {**settings, **self.settings(tmp_path)}

    def settings(self, tmp_path: Path) -> Mapping[str, Any]:
        """The vendor's other settings, and what it reads beyond empty host files."""
        return {}

    def unavailable(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        return {
            "library_path": str(tmp_path / "missing" / self.soname),
            "search_loader_path": False,
        }


def _host(tmp_path: Path, files: Sequence[str]) -> Path:
    root = tmp_path / "host"
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    return root


class TestAwsNeuronConformance(VendorConformance):
    """No library: the vendor reads the Neuron driver's sysfs, here a tree the test builds."""

    vendor = "awsneuron"

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        root = _host(tmp_path, ["dev/neuron0", "dev/neuron1"])
        for i in range(2):
            device = root / f"sys/devices/virtual/neuron_device/neuron{i}"
            (device / "info/architecture").mkdir(parents=True)
            (device / "core_count").write_text("2\n")
            (device / "info/architecture/instance_type").write_text("trn1.2xlarge\n")
        return {"host_root": str(root), "sysfs_root": str(root / "sys")}

    def unavailable(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        return {"sysfs_root": str(tmp_path / "no-sysfs")}


class TestEnflameConformance(_Fake, VendorConformance):
    vendor = "enflame"
    source = TESTS / "enflame/fake_efml/fake_efml.c"
    soname = "libefml.so"
    table_env = "FAKE_EFML_TABLE"
    table = (
        "device name=S60 uuid=T6R0 bus=0x50 mem_total=49152\n"
        "device name=S60 uuid=T6R1 bus=0x51 mem_total=49152\n"
    )
    host_files = ("dev/gcuctl", "dev/gcu0", "dev/gcu1")
    mode = "gcu"

    def settings(self, tmp_path: Path) -> Mapping[str, Any]:
        return {"mode": self.mode}


class TestEnflameDrsConformance(TestEnflameConformance):
    """DRS partitions are cut by efsmi at Allocate: the fake efsmi (a real process) does it."""

    vendor = "enflame-drs"
    mode = "drs"
    #: Each Allocate and release runs efsmi a few times (a Python process here): fewer pods.
    churn_pods = 24

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        efsmi = FakeEfsmi(tmp_path / "efsmi")
        monkeypatch.setenv("FAKE_EFSMI_STATE", str(efsmi.state_path))
        return {
            **super().available(tmp_path, monkeypatch),
            "efsmi_path": str(efsmi.path),
            "drs_state_dir": str(tmp_path / "drs-state"),
        }

    def created(self, config: Mapping[str, Any]) -> list[str] | None:
        efsmi = FakeEfsmi.at(Path(config["efsmi_path"]).parent)
        return [f"GCU {g} instance {i['id']}" for g in (0, 1) for i in efsmi.instances(g)]


class TestHygonConformance(_Fake, VendorConformance):
    vendor = "hygon"
    source = TESTS / "hygon/fake_rsmi/fake_rocm_smi.c"
    soname = "librocm_smi64.so"
    table_env = "FAKE_RSMI_TABLE"
    table = (
        f"device name=K100 uid=0x1 bus=0x10 mem_total={64 * GIB} render=128\n"
        f"device name=K100 uid=0x2 bus=0x11 mem_total={64 * GIB} render=129\n"
    )
    host_files = ("dev/kfd", "dev/dri/card0", "dev/dri/renderD128", "dev/dri/card1",
                  "dev/dri/renderD129")  # fmt: skip

    def settings(self, tmp_path: Path) -> Mapping[str, Any]:
        root = tmp_path / "host"
        for i in range(2):
            props = root / f"sys/class/kfd/kfd/topology/nodes/{i}/properties"
            props.parent.mkdir(parents=True)
            props.write_text(f"simd_count 240\nsimd_per_cu 4\nlocation_id {(0x10 + i) << 8}\n")
        return {"sysfs_root": str(root / "sys"), "vdev_agent_dir": str(tmp_path / "vdev")}

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
    host_files = ("usr/local/vgpu/libvgpu.so",)


class TestKunlunConformance(_Fake, VendorConformance):
    vendor = "kunlun"
    source = TESTS / "kunlun/fake_xpuml/fake_xpuml.c"
    soname = "libxpuml.so"
    table_env = "FAKE_XPUML_TABLE"
    table = (
        f"device name=P800 serial=SN0 minor=0 bus_id=00000000:40:00.0 mem_total={96 * GIB}\n"
        f"device name=P800 serial=SN1 minor=1 bus_id=00000000:41:00.0 mem_total={96 * GIB}\n"
    )
    host_files = ("dev/xpuctrl", "dev/xpu0", "dev/xpu1")
    mode = "xpu"

    def settings(self, tmp_path: Path) -> Mapping[str, Any]:
        return {"mode": self.mode}


class TestKunlunVxpuConformance(TestKunlunConformance):
    vendor = "kunlun-vxpu"
    mode = "vxpu"


class TestMetaxConformance(_Fake, VendorConformance):
    vendor = "metax"
    source = TESTS / "metax/fake_mxsml/fake_mxsml.c"
    soname = "libmxsml.so"
    table_env = "FAKE_MXSML_TABLE"
    table = (
        f"device uuid=GPU-m0 name=MXC500 bdf=0000:30:00.0 vram_kib={64 * 1024**2}\n"
        f"device uuid=GPU-m1 name=MXC500 bdf=0000:31:00.0 vram_kib={64 * 1024**2}\n"
    )
    host_files = ("dev/mxcd", "dev/dri/card1", "dev/dri/renderD129", "dev/dri/card2",
                  "dev/dri/renderD130")  # fmt: skip

    def settings(self, tmp_path: Path) -> Mapping[str, Any]:
        root = tmp_path / "host"
        for i in range(2):
            drm = root / f"sys/bus/pci/devices/0000:{0x30 + i:02x}:00.0/drm"
            (drm / f"card{i + 1}").mkdir(parents=True)
            (drm / f"renderD{129 + i}").mkdir()
        return {"sysfs_root": str(root / "sys")}


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


class TestVastaiConformance(_Fake, VendorConformance):
    vendor = "vastai"
    source = TESTS / "vastai/fake_vaml/fake_vaml.c"
    soname = "libvaml.so"
    table_env = "FAKE_VAML_TABLE"
    table = f"device dies=1 mem_total={16 * GIB}\ndevice dies=1 mem_total={16 * GIB}\n"
    host_files = ("dev/vacc0", "dev/vacc1", "dev/va0_ctl", "dev/va1_ctl")


class TestBirenConformance(_Fake, VendorConformance):
    vendor = "biren"
    source = TESTS / "biren/fake_brml/fake_brml.c"
    soname = "libbiren-ml.so"
    table_env = "FAKE_BRML_TABLE"
    table = (
        f"device uuid=BR-a node_id=0 mem_total={32 * GIB} bus_id=0000:50:00.0\n"
        f"device uuid=BR-b node_id=1 mem_total={32 * GIB} bus_id=0000:51:00.0\n"
    )
    host_files = ("dev/biren/card_0", "dev/biren/card_1")

    def settings(self, tmp_path: Path) -> Mapping[str, Any]:
        return {"sysfs_root": str(tmp_path / "sys")}


class TestTheadConformance(_Fake, VendorConformance):
    vendor = "thead"
    source = TESTS / "thead/fake_hgml/fake_hgml.c"
    soname = "libhgml.so"
    table_env = "FAKE_HGML_TABLE"
    table = (
        f"device uuid=PPU-a mem_total={96 * GIB} bus_id=0000:60:00.0\n"
        f"device uuid=PPU-b mem_total={96 * GIB} bus_id=0000:61:00.0\n"
    )
    host_files = ("dev/alixpu", "dev/alixpu_ctl", "dev/alixpu_ppu0", "dev/alixpu_ppu1",
                  "usr/local/vppu/hggc_quota.so", "usr/local/vppu/hgml_dlsym_hook.so")  # fmt: skip

    def settings(self, tmp_path: Path) -> Mapping[str, Any]:
        return {"sysfs_root": str(tmp_path / "sys")}
