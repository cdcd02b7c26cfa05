"""Allocate: HAMi-core's environment contract and mounts, exclusive GPUs, CDI, MIG."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, mig_uuid, uuid

from xpushare import PluginError
from xpushare.models import AllocateRequest, Device, DeviceSlice, Mount, PodRef
from xpushare.plugins import VendorHandle

POD = PodRef(namespace="ml", name="trainer-0", uid="5d8c2f7e-0a1b-4c3d-9e8f-001122334455")


def request(
    devices: Sequence[Device], *slices: DeviceSlice, container: str = "main"
) -> AllocateRequest:
    used = {s.device_id for s in slices}
    return AllocateRequest(
        pod=POD,
        container=container,
        node="gpu-node-1",
        resource_name="nvidia.com/gpu",
        slices=slices,
        devices=tuple(d for d in devices if d.id in used),
    )


def share(i: int, memory: int, compute: int, **kw: object) -> DeviceSlice:
    return DeviceSlice(device_id=uuid(i), index=i, memory_mib=memory, compute_percent=compute, **kw)  # type: ignore[arg-type]


def test_shared_gpus_get_hami_cores_environment_and_mounts(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    fake.add_gpus(4)
    handle = nvidia(hami_core={"agent_dir": str(hami_dir), "log_level": 1, "core_policy": "force"})
    devices = handle.detect()
    # Slices in assignment order 3, 1: numbered in PCI (NVML) order in the container.
    allocation = handle.allocate(request(devices, share(3, 10000, 50), share(1, 4000, 25)))
    container_dir = f"{POD.uid}_main"
    assert allocation.envs == {
        "NVIDIA_VISIBLE_DEVICES": f"{uuid(1)},{uuid(3)}",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "4000m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "10000m",
        "CUDA_DEVICE_SM_LIMIT_0": "25",
        "CUDA_DEVICE_SM_LIMIT_1": "50",
        "CUDA_DEVICE_SM_LIMIT": "25",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/vgpu.cache",
        "LIBCUDA_LOG_LEVEL": "1",
        "GPU_CORE_UTILIZATION_POLICY": "force",
    }
    assert set(allocation.mounts) == {
        Mount(
            host_path=f"/usr/local/vgpu/containers/{container_dir}",
            container_path="/usr/local/vgpu",
            read_only=False,
        ),
        Mount(
            host_path="/usr/local/vgpu/libvgpu.so",
            container_path="/usr/local/vgpu/libvgpu.so",
            read_only=True,
        ),
        Mount(host_path="/tmp/vgpulock", container_path="/tmp/vgpulock", read_only=False),
        Mount(
            host_path="/usr/local/vgpu/ld.so.preload",
            container_path="/etc/ld.so.preload",
            read_only=True,
        ),
    }
    assert allocation.cdi_devices == ()
    # Node side: the preload file names the library as containers see it; the cache dir is
    # there, empty and writable by any user; who owns it is noted out of the container's reach.
    assert (hami_dir / "ld.so.preload").read_text() == "/usr/local/vgpu/libvgpu.so\n"
    cache = hami_dir / "containers" / container_dir
    assert cache.is_dir() and not any(cache.iterdir())
    assert cache.stat().st_mode & 0o777 == 0o777
    meta = json.loads((hami_dir / "xpushare-meta" / f"{container_dir}.json").read_text())
    assert meta == {
        "namespace": "ml",
        "pod": "trainer-0",
        "uid": POD.uid,
        "container": "main",
        "devices": [uuid(1), uuid(3)],
    }


def test_a_retried_allocate_starts_from_an_empty_cache_dir(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    fake.add_gpus(1)
    handle = nvidia()
    devices = handle.detect()
    handle.allocate(request(devices, share(0, 1000, 10)))
    stale = hami_dir / "containers" / f"{POD.uid}_main" / "vgpu.cache"
    stale.write_bytes(b"from an earlier attempt")
    handle.allocate(request(devices, share(0, 1000, 10)))
    assert not stale.exists()


def test_exclusive_whole_gpus_skip_hami_core(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    fake.add_gpus(2)
    handle = nvidia()
    devices = handle.detect()
    allocation = handle.allocate(
        request(devices, share(0, 81920, 100, exclusive=True), share(1, 81920, 100, exclusive=True))
    )
    assert allocation.envs == {
        "NVIDIA_VISIBLE_DEVICES": f"{uuid(0)},{uuid(1)}",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert allocation.mounts == ()
    assert not (hami_dir / "containers").exists()


def test_cdi_names_instead_of_the_visible_devices_variable(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    handle = nvidia(device_list_strategy="cdi")
    devices = handle.detect()
    shared = handle.allocate(request(devices, share(1, 2000, 20)))
    assert shared.cdi_devices == (f"nvidia.com/gpu={uuid(1)}",)
    assert "NVIDIA_VISIBLE_DEVICES" not in shared.envs
    assert shared.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    whole = handle.allocate(request(devices, share(0, 81920, 100, exclusive=True)))
    assert whole.cdi_devices == (f"nvidia.com/gpu={uuid(0)}",)


def test_missing_hami_core_library_refuses_rather_than_running_unlimited(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    fake.add_gpus(1)
    (hami_dir / "libvgpu.so").unlink()
    handle = nvidia()
    devices = handle.detect()
    with pytest.raises(
        PluginError, match=r"HAMi-core library .*libvgpu\.so is missing.*ml/trainer-0"
    ):
        handle.allocate(request(devices, share(0, 1000, 10)))
    handle.shutdown()  # one NVML user per process, as on a node
    lenient = nvidia(hami_core={"agent_dir": str(hami_dir), "require_library": False})
    assert lenient.allocate(request(devices, share(0, 1000, 10))).envs


def test_the_preload_mount_can_be_left_out(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    fake.add_gpus(1)
    handle = nvidia(hami_core={"agent_dir": str(hami_dir), "preload": False})
    allocation = handle.allocate(request(handle.detect(), share(0, 1000, 10)))
    assert "/etc/ld.so.preload" not in {m.container_path for m in allocation.mounts}


def test_a_container_name_that_is_no_dns_label_is_refused(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(1)
    handle = nvidia()
    with pytest.raises(PluginError, match="not a DNS label"):
        handle.allocate(request(handle.detect(), share(0, 1000, 10), container="../../etc"))


def mig_node(fake: FakeNvml) -> None:
    fake.add_gpus(2, numa=[0, 0])
    fake.enable_mig(0)
    fake.add_mig(0, "3g.40gb", 40192, 42, 3, gi=1)
    fake.add_mig(0, "1g.10gb", 9856, 14, 1, gi=9)
    fake.add_mig(0, "1g.10gb", 9856, 14, 1, gi=10)


def mig_slice(profile: str = "1g.10gb") -> DeviceSlice:
    return DeviceSlice(
        device_id=uuid(0), index=0, memory_mib=9856, compute_percent=15, partition=profile
    )


def test_mig_slices_get_free_instances_and_no_hami_core(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_node(fake)
    handle = nvidia()
    devices = handle.detect()
    first = handle.allocate(request(devices, mig_slice(), container="a"))
    assert first.envs == {"NVIDIA_VISIBLE_DEVICES": mig_uuid(0, 9)}
    assert first.mounts == ()
    second = handle.allocate(request(devices, mig_slice(), container="b"))
    assert second.envs == {"NVIDIA_VISIBLE_DEVICES": mig_uuid(0, 10)}
    # kubelet retrying container a gets the same instance again.
    again = handle.allocate(request(devices, mig_slice(), container="a"))
    assert again.envs == first.envs
    # Both instances held and busy: a third container is refused with the reason.
    fake.add_process(0, 100, 500, mig=1)
    fake.add_process(0, 101, 500, mig=2)
    with pytest.raises(PluginError, match=r"no free MIG instance of profile 1g\.10gb"):
        handle.allocate(request(devices, mig_slice(), container="c"))


def test_an_instance_of_a_finished_container_is_reused_only_when_idle(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_node(fake)
    handle = nvidia()
    devices = handle.detect()
    handle.allocate(request(devices, mig_slice(), container="a"))  # instance gi 9
    handle.allocate(request(devices, mig_slice(), container="b"))  # instance gi 10
    fake.add_process(0, 4242, 500, mig=1)  # a process on gi 9 (still running)
    c = handle.allocate(request(devices, mig_slice(), container="c"))
    assert c.envs == {"NVIDIA_VISIBLE_DEVICES": mig_uuid(0, 10)}


def test_an_instance_with_a_process_is_not_handed_out_after_a_restart(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_node(fake)
    fake.add_process(0, 4242, 500, mig=1)  # gi 9 is busy; the agent just started
    handle = nvidia()
    allocation = handle.allocate(request(handle.detect(), mig_slice(), container="a"))
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": mig_uuid(0, 10)}


def test_a_mig_gpu_is_never_allocated_whole_or_shared(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_node(fake)
    handle = nvidia()
    devices = handle.detect()
    with pytest.raises(PluginError, match="is in MIG mode and cannot be given whole or shared"):
        handle.allocate(request(devices, share(0, 81920, 100, exclusive=True)))
    with pytest.raises(PluginError, match="is in MIG mode"):
        handle.allocate(request(devices, share(0, 1000, 10)))


def test_mig_and_shared_slices_do_not_mix(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_node(fake)
    handle = nvidia()
    with pytest.raises(PluginError, match="not supported"):
        handle.allocate(request(handle.detect(), mig_slice(), share(1, 1000, 10)))
