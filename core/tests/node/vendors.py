"""Small vendor plugins written for the node agent's tests (the mock covers the rest)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from xpushare import API_VERSION, hookimpl
from xpushare.models import ContainerAllocation, Device, ResourceNames, VendorSpec


class Acme:
    """A second vendor with two devices; ``hang`` blocks allocate, ``fail`` makes hooks raise."""

    def __init__(self, name: str = "acme", devices: int = 2, node: str = "node-a") -> None:
        self.name = name
        self.resource = f"{name}.example.com/gpu"
        self.devices = [
            Device(
                vendor=name, id=f"{name.upper()}-{i}", index=i, model="Acme X1", memory_mib=16384
            )
            for i in range(devices)
        ]
        self.hang = threading.Event()  # set: allocate blocks until released
        self.release = threading.Event()
        self.fail_detect = False
        self.fail_allocate = False
        self.calls: list[tuple[str, int]] = []  # (hook, thread ident)

    def _record(self, hook: str) -> None:
        self.calls.append((hook, threading.get_ident()))

    @hookimpl
    def xpushare_vendor(self) -> VendorSpec:
        return VendorSpec(
            name=self.name,
            api_version=API_VERSION,
            resource_names=ResourceNames(count=self.resource),
        )

    @hookimpl
    def xpushare_startup(self, ctx: Any) -> None:
        self._record("startup")

    @hookimpl
    def xpushare_detect(self, ctx: Any) -> list[Device]:
        self._record("detect")
        if self.fail_detect:
            raise RuntimeError("acme: device enumeration failed (ACME_ERROR_UNKNOWN)")
        return list(self.devices)

    @hookimpl
    def xpushare_monitor(self, ctx: Any, devices: Any) -> None:
        self._record("monitor")

    @hookimpl
    def xpushare_check_health(self, ctx: Any, devices: Any, wait_s: float) -> list[Any]:
        self._record("check_health")
        return []

    @hookimpl
    def xpushare_allocate(self, ctx: Any, request: Any) -> ContainerAllocation:
        self._record("allocate")
        if self.hang.is_set():
            self.release.wait(30)
        if self.fail_allocate:
            raise RuntimeError("acme: cannot open /dev/acme0")
        ids = ",".join(s.device_id for s in request.slices)
        return ContainerAllocation(envs={"ACME_VISIBLE_DEVICES": ids})


class Keeper:
    """A vendor that creates a directory per container at Allocate and removes it at release.

    It stands for Cambricon's sMLU instances and HAMi-core's cache directories: something on
    the node, named after the pod's uid and the container, that only release frees.
    ``fail_release`` makes release raise (the agent must retry); ``releases`` counts calls.
    """

    name = "keeper"
    resource = "keeper.example.com/gpu"

    def __init__(self, root: Any, devices: int = 8) -> None:
        self.root = Path(root)
        self.devices = [
            Device(vendor=self.name, id=f"KEEP-{i}", index=i, model="Keep K1", memory_mib=16384)
            for i in range(devices)
        ]
        self.fail_release = False
        self.releases: list[tuple[str, int]] = []  # (pod uid, thread ident)
        self.allocations: list[Any] = []  # the AllocateRequests seen

    def path(self, uid: str, container: str) -> Any:
        return self.root / uid / container

    def left(self) -> list[str]:
        """The (pod uid, container) folders still there. Read while the vendor's thread may
        be removing them: a pod's folder removed between the listing of the root and its
        own (FileNotFoundError in glob, seen once in CI) is read again."""
        while True:
            try:
                return sorted(str(p.relative_to(self.root)) for p in self.root.glob("*/*"))
            except FileNotFoundError:
                continue

    @hookimpl
    def xpushare_vendor(self) -> VendorSpec:
        return VendorSpec(
            name=self.name,
            api_version=API_VERSION,
            resource_names=ResourceNames(count=self.resource),
        )

    @hookimpl
    def xpushare_detect(self, ctx: Any) -> list[Device]:
        return list(self.devices)

    @hookimpl
    def xpushare_allocate(self, ctx: Any, request: Any) -> ContainerAllocation:
        self.allocations.append(request)
        path = self.path(request.pod.uid, request.container)
        path.mkdir(parents=True, exist_ok=True)
        return ContainerAllocation(envs={"KEEP_DIR": str(path)}, record={"path": str(path)})

    @hookimpl
    def xpushare_release(self, ctx: Any, request: Any) -> None:
        self.releases.append((request.pod.uid, threading.get_ident()))
        if self.fail_release:
            raise RuntimeError(f"keeper: cannot remove the directories of pod {request.pod}")
        for container in request.containers:
            record = container.record
            path = record["path"] if record else self.path(request.pod.uid, container.container)
            target = Path(path)
            if target.exists():
                target.rmdir()
            if target.parent.exists() and not any(target.parent.iterdir()):
                target.parent.rmdir()
