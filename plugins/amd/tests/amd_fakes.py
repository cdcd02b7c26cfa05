"""Build fake ``libamd_smi.so`` libraries for the AMD plugin's tests, and hosts that use them.

The C source (fake_amdsmi/fake_amd_smi.c) implements the calls the plugin makes; this module
writes the per-test part it includes: the device table, the failures to return, and a stub
for every other function the installed ``amdsmi`` wrapper binds at import (the wrapper binds
them all, so each must exist unless a test removes it on purpose).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import xpushare_amd.plugin
from xpushare.plugins import PluginHost
from xpushare.testing.clib import compile_shared_library
from xpushare.testing.hosts import vendor_host

SOURCE = Path(__file__).parent / "fake_amdsmi" / "fake_amd_smi.c"
GIB = 1024**3
NA32 = 0xFFFFFFFF

# Status codes (amdsmi.h).
NOT_SUPPORTED = 2
NO_PERM = 10
DRIVER_NOT_LOADED = 34


@dataclass
class FakeProcess:
    pid: int
    name: str
    vram_bytes: int


@dataclass
class FakeGpu:
    """One processor the fake library reports; defaults describe an MI300X in SPX mode."""

    serial: int = 0x4D3A0F9E12AB5500
    uuid: str = "e0ff74a1-0000-1000-8000-4d3a0f9e12ab"
    market_name: str = "AMD Instinct MI300X"
    device_id: int = 0x74A1
    compute_units: int = 304
    gfx_target: int = 0x942
    domain: int = 0
    bus: int = 0x0C
    device: int = 0
    function: int = 0
    vram_total: int = 192 * GIB
    vram_used: int = 0
    numa_node: int = 0
    drm_render: int = 128
    drm_card: int = 0
    hsa_id: int = 0
    hip_id: int = 0
    kfd_node: int = 2
    partition_id: int = 0
    compute_partition: str | None = "SPX"
    memory_partition: str | None = "NPS1"
    xgmi_hive: int = 0
    gfx_activity: int = 0
    umc_activity: int = 0
    mm_activity: int = 0
    temp_edge: int = -1
    temp_hotspot: int = 45
    power_current: int = 150
    power_average: int = 0xFFFF
    ecc_correctable: int = 0
    ecc_uncorrectable: int = 0
    procs: list[FakeProcess] = field(default_factory=list)


def mi300x(index: int, **changes: object) -> FakeGpu:
    """GPU *index* of an 8-GPU MI300X node in one XGMI hive, SPX/NPS1."""
    base = {
        "serial": 0x4D3A0F9E12AB5500 + index,
        "uuid": f"e0ff74a1-0000-1000-8000-4d3a0f9e12{index:02x}",
        "bus": 0x0C + 0x10 * index,
        "drm_render": 128 + index,
        "drm_card": index,
        "kfd_node": 2 + index,
        "hsa_id": index,
        "hip_id": index,
        "numa_node": index // 4,
        "xgmi_hive": 0xA1B2C3D4,
    }
    base.update(changes)
    return FakeGpu(**base)  # type: ignore[arg-type]


def cpx_partitions(index: int, count: int = 8, **changes: object) -> list[FakeGpu]:
    """The *count* CPX partitions of MI300X number *index* (NPS4: VRAM split in four)."""
    parts = []
    for p in range(count):
        parts.append(
            mi300x(
                index,
                uuid=f"e0ff74a1-0000-1000-80{p:02x}-4d3a0f9e12{index:02x}",
                function=p,
                compute_units=38,
                vram_total=192 * GIB // count,
                drm_render=128 + index * count + p,
                drm_card=index * count + p,
                kfd_node=2 + index * count + p,
                partition_id=p,
                compute_partition="CPX",
                memory_partition="NPS4",
                **changes,
            )
        )
    return parts


def _c_value(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return f"{value}LL" if value < 0 else f"{value}ULL"
    raise TypeError(f"cannot write {value!r} as C")


def _gpu_initializer(gpu: FakeGpu) -> str:
    parts = []
    for f in fields(gpu):
        if f.name == "procs":
            continue
        parts.append(f".{f.name} = {_c_value(getattr(gpu, f.name))}")
    parts.append(f".n_procs = {len(gpu.procs)}")
    if gpu.procs:
        procs = ", ".join(
            f"{{ .pid = {p.pid}, .name = {_c_value(p.name)}, .vram_bytes = {p.vram_bytes}ULL }}"
            for p in gpu.procs
        )
        parts.append(f".procs = {{ {procs} }}")
    return "    { " + ", ".join(parts) + " }"


def wrapper_symbols() -> list[str]:
    """Every C function the installed amdsmi wrapper binds when it is imported."""
    spec = importlib.util.find_spec("amdsmi")
    assert spec is not None and spec.submodule_search_locations
    text = (Path(spec.submodule_search_locations[0]) / "amdsmi_wrapper.py").read_text()
    return sorted(set(re.findall(r"_libraries\['libamd_smi\.so'\]\.(\w+)", text)))


def implemented_symbols() -> set[str]:
    return set(re.findall(r"^API amdsmi_status_t (amdsmi_\w+)\(", SOURCE.read_text(), re.M))


def generated_include(
    gpus: list[FakeGpu],
    *,
    init_status: int = 0,
    failures: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
    omit: set[str] = frozenset(),  # type: ignore[assignment]
) -> str:
    lines = [f"#define FAKE_GPU_COUNT {len(gpus)}", f"#define FAKE_INIT_STATUS {init_status}u"]
    table = ",\n".join(_gpu_initializer(g) for g in gpus) or "    { 0 }"
    lines.append(f"static fake_gpu_t fake_gpus[{max(1, len(gpus))}] = {{\n{table}\n}};")
    rows = [f'    {{ "{fn}", {device}, {status}u }}' for fn, device, status in failures]
    rows.append("    { NULL, -1, 0u }")
    lines.append("static const fake_failure_t fake_failures[] = {\n" + ",\n".join(rows) + "\n};")
    implemented = implemented_symbols()
    for symbol in wrapper_symbols():
        if symbol in implemented or symbol in omit:
            continue
        lines.append(
            f"API amdsmi_status_t {symbol}(void) {{ return AMDSMI_STATUS_NOT_SUPPORTED; }}"
        )
    return "\n".join(lines) + "\n"


def build_library(
    out_dir: Path,
    gpus: list[FakeGpu],
    *,
    init_status: int = 0,
    failures: list[tuple[str, int, int]] | None = None,
    omit: set[str] | None = None,
    name: str = "libamd_smi.so",
) -> Path:
    """Compile a fake ``libamd_smi.so`` into *out_dir* and return its path.

    *failures* are ``(function, device index or -1, amdsmi status)``; *omit* names functions
    the library must not export.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    omitted = set(omit or ())
    (out_dir / "fake_generated.inc").write_text(
        generated_include(gpus, init_status=init_status, failures=failures or [], omit=omitted)
    )
    return compile_shared_library(
        SOURCE.read_text(),
        out_dir,
        name,
        extra_args=[f"-DOMIT_{s}" for s in sorted(omitted)],
    )


def amd_host(library: Path | str | None, node: str = "node-a", **config: object) -> PluginHost:
    """A plugin host with the core's defaults and the AMD plugin, using *library*."""
    vendor_config: dict[str, object] = dict(config)
    if library is not None:
        vendor_config["library_path"] = str(library)
    return vendor_host(
        "amd", xpushare_amd.plugin, vendor_config, node_name=node, distribution="xpushare-amd"
    )
