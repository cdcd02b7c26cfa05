"""The mock vendor: devices described in a file or a one-line spec, no hardware needed.

It implements the whole vendor contract so the simulator, the tests and a cluster without
accelerators can run every path end to end. It shows devices **only** when told to, through
``XPUSHARE_MOCK_DEVICES`` or the vendor config key ``devices``, so it can never advertise fake
devices on a real node by accident.

Spec forms:

* ``8x A100-80GB`` or ``4x A100-80GB,2x T4-16GB`` (memory from the ``-<N>GB`` suffix);
* a path to a YAML or JSON file: ``{"devices": [{"model": ..., "memory_mib": ...,
  "count": 2, "numa_node": 0, "healthy": true, "share_slots": 10}, ...]}``. The file is
  re-read on every health check, so a test (or a person) can flip ``healthy`` live.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from xpushare.errors import VendorUnavailable
from xpushare.hookspecs import hookimpl
from xpushare.models import (
    API_VERSION,
    AdmissionGuard,
    AllocateRequest,
    ContainerAllocation,
    Device,
    DeviceSample,
    HealthEvent,
    MonitorSnapshot,
    ResourceNames,
    VendorSpec,
)
from xpushare.native import NodeContext

VENDOR = "mock"
SPEC_ENV = "XPUSHARE_MOCK_DEVICES"
_GROUP = re.compile(
    r"^\s*(?:(\d+)\s*[xX]\s*)?([A-Za-z0-9][A-Za-z0-9._]*(?:-[A-Za-z0-9._]+)*?)-(\d+)GB\s*$"
)
_FIELDS = {"model", "memory_mib", "count", "numa_node", "healthy", "share_slots", "compute_units"}


@hookimpl
def xpushare_vendor() -> VendorSpec:
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name="Mock accelerator (devices from a file or spec)",
        resource_names=ResourceNames(
            count="xpushare.io/mock-gpu",
            memory="xpushare.io/mock-gpumem",
            memory_percent="xpushare.io/mock-gpumem-percentage",
            compute="xpushare.io/mock-gpucores",
        ),
    )


@hookimpl
def xpushare_admission_guard() -> AdmissionGuard:
    # The mock stands for a GPU vendor isolated by HAMi-core: it declares the NVIDIA plugin's
    # default layout (and device nodes) besides its own limit variables, so the webhook's
    # path rules are exercised end to end without the NVIDIA plugin or a GPU.
    return AdmissionGuard(
        env=("XPUSHARE_MOCK_MEMORY_LIMIT_*", "XPUSHARE_MOCK_CORE_LIMIT_*"),
        container_paths=("/etc/ld.so.preload", "/usr/local/vgpu"),
        host_paths=("/usr/local/vgpu",),
        device_paths=("/dev/nvidia*",),
    )


def _spec(ctx: NodeContext) -> str:
    spec = ctx.config.get("devices") or os.environ.get(SPEC_ENV, "")
    if not str(spec).strip():
        raise VendorUnavailable(
            VENDOR, f"no mock devices configured; set {SPEC_ENV}='8x A100-80GB' or a file path"
        )
    return str(spec).strip()


def parse_spec(spec: str, node_name: str = "node") -> list[Device]:
    """Devices for a spec string or file; ``ValueError`` says what is wrong with it."""
    entries: list[dict[str, Any]]
    if "GB" in spec and not Path(spec).is_file():
        entries = []
        for group in spec.split(","):
            match = _GROUP.match(group)
            if not match:
                raise ValueError(f"mock device group {group!r} is not like '8x A100-80GB'")
            count, model, gib = match.groups()
            entries.append(
                {
                    "model": f"{model}-{gib}GB",
                    "memory_mib": int(gib) * 1024,
                    "count": int(count or 1),
                }
            )
    else:
        path = Path(spec)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"cannot read mock device file {path}: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
            raise ValueError(f"mock device file {path} must hold a 'devices' list")
        entries = data["devices"]
    devices: list[Device] = []
    for entry in entries:
        if not isinstance(entry, dict) or not set(entry) <= _FIELDS:
            raise ValueError(f"mock device entry {entry!r}: allowed keys are {sorted(_FIELDS)}")
        for _ in range(int(entry.get("count", 1))):
            index = len(devices)
            devices.append(
                Device(
                    vendor=VENDOR,
                    id=f"MOCK-{node_name}-{index}",
                    index=index,
                    model=str(entry["model"]),
                    memory_mib=int(entry["memory_mib"]),
                    compute_units=int(entry.get("compute_units", 100)),
                    share_slots=int(entry.get("share_slots", 10)),
                    numa_node=entry.get("numa_node"),
                    healthy=bool(entry.get("healthy", True)),
                    pci_bus_id=f"0000:{index + 1:02x}:00.0",
                )
            )
    return devices


def _load(ctx: NodeContext) -> list[Device]:
    try:
        return parse_spec(_spec(ctx), ctx.node_name)
    except ValueError as exc:
        raise VendorUnavailable(VENDOR, str(exc)) from exc


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    ctx.state["devices"] = _load(ctx)
    ctx.state["allocations"] = 0


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    ctx.state.clear()


@hookimpl
def xpushare_detect(ctx: NodeContext) -> list[Device]:
    ctx.state["devices"] = _load(ctx)
    return list(ctx.state["devices"])


@hookimpl
def xpushare_monitor(ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
    # Deterministic readings derived from the device index, so tests can assert exact values.
    return MonitorSnapshot(
        devices=tuple(
            DeviceSample(
                device_id=d.id,
                utilization_percent=float(10 * (d.index % 10)),
                memory_used_mib=d.memory_mib // 4,
                memory_total_mib=d.memory_mib,
                temperature_c=40.0 + d.index,
                power_w=100.0 + d.index,
                healthy=d.healthy,
                process_count=0,
            )
            for d in devices
        )
    )


@hookimpl
def xpushare_check_health(ctx: NodeContext, devices: Sequence[Device]) -> list[HealthEvent]:
    current: Mapping[str, bool] = {d.id: d.healthy for d in _load(ctx)}
    return [
        HealthEvent(device_id=d.id, healthy=current[d.id], reason="mock file says so")
        for d in devices
        if d.id in current and current[d.id] != d.healthy
    ]


@hookimpl
def xpushare_allocate(ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation:
    ctx.state["allocations"] = ctx.state.get("allocations", 0) + 1
    envs = {"XPUSHARE_MOCK_VISIBLE_DEVICES": ",".join(s.device_id for s in request.slices)}
    for i, piece in enumerate(request.slices):
        envs[f"XPUSHARE_MOCK_MEMORY_LIMIT_{i}"] = f"{piece.memory_mib}m"
        envs[f"XPUSHARE_MOCK_CORE_LIMIT_{i}"] = str(piece.compute_percent)
    return ContainerAllocation(envs=envs)
