"""Dynamic MIG on the fake NVML: geometry at detection, the fit over it, instances created at
Allocate and destroyed at release, restart safety, and a GPU's mode switch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, uuid

from xpushare import PluginError
from xpushare.models import (
    AllocatedContainer,
    AllocateRequest,
    ContainerRequest,
    ContainerView,
    Device,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    NodeView,
    PodRef,
    PodView,
    ReleaseRequest,
)
from xpushare.plugins import VendorHandle
from xpushare.testing.partitions import A100_40GB, A100_80GB, profiles

NODE = "gpu-node-1"
POD_A = PodRef(namespace="ml", name="a", uid="aaaaaaaa-0000-4000-8000-000000000001")
POD_B = PodRef(namespace="ml", name="b", uid="bbbbbbbb-0000-4000-8000-000000000002")


def mig_gpu(fake: FakeNvml, table: object = A100_80GB, *, enabled: bool = True) -> str:
    (gpu,) = fake.add_gpus(1)
    fake.set(0, "mig_supported", 1)
    if enabled:
        fake.enable_mig(0)
    fake.mig_profiles(0, table)  # type: ignore[arg-type]
    return gpu


def dynamic(nvidia: Callable[..., VendorHandle], **config: object) -> VendorHandle:
    return nvidia(mode="mig", **config)


def ask(memory: int | None = None, count: int = 1, **kw: object) -> ContainerRequest:
    return ContainerRequest(vendor="nvidia", count=count, memory_mib=memory, **kw)  # type: ignore[arg-type]


def fit_on(handle: VendorHandle, device: Device, request: ContainerRequest, booked: Sequence[str]):  # type: ignore[no-untyped-def]
    usage = {
        device.id: DeviceUsage(
            device_id=device.id, used_slots=len(booked), partitions_in_use=tuple(booked)
        )
    }
    return handle.fit(
        request=request, node=NodeView(name=NODE, devices=(device,)), usage=usage, device_order=[]
    )


def alloc(
    devices: Sequence[Device], pod: PodRef, *places: str, container: str = "main"
) -> AllocateRequest:
    return AllocateRequest(
        pod=pod,
        container=container,
        node=NODE,
        resource_name="nvidia.com/gpu",
        slices=tuple(
            DeviceSlice(device_id=devices[0].id, memory_mib=1, compute_percent=1, partition=p)
            for p in places
        ),
        devices=tuple(devices),
    )


def release(pod: PodRef, container: str = "main") -> ReleaseRequest:
    return ReleaseRequest(
        pod=pod, node=NODE, containers=(AllocatedContainer(container=container, slices=()),)
    )


# -- detection ------------------------------------------------------------------------------


def test_detection_publishes_the_profiles_and_placements_nvml_gives(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    gpu = mig_gpu(fake)
    (device,) = dynamic(nvidia).detect()
    assert device.id == gpu and device.mode == "mig"
    assert device.extra["mig_dynamic"] == "true"
    assert device.share_slots == 7  # the most instances of one profile (1g.10gb)
    # In NVML's profile index order, each as the table (NVIDIA's) gives it.
    by_index = tuple(s.profile() for s in sorted(A100_80GB, key=lambda s: s.index))
    assert device.partitions == by_index


def test_an_allowlist_keeps_only_the_profiles_named(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake, A100_40GB)
    (device,) = dynamic(nvidia, mig_profiles=["1g.5gb", "7g.40gb"]).detect()
    assert [p.name for p in device.partitions] == ["1g.5gb", "7g.40gb"]
    assert profiles(A100_40GB)[-1] == device.partitions[-1]


def test_without_a_mode_a_mig_gpu_serves_its_existing_instances(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    fake.add_mig(0, "3g.40gb", 40192, 42, 3, gi=1)
    (device,) = nvidia().detect()
    assert "mig_dynamic" not in device.extra
    assert [(p.name, p.placements) for p in device.partitions] == [("3g.40gb", ())]


# -- the fit over the published geometry (hand-worked: A100-80GB, slices 0-7) ------------


def test_fit_seven_1g_by_memory_then_no_eighth(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    (device,) = handle.detect()
    booked: list[str] = []
    for _ in range(7):
        result = fit_on(handle, device, ask(8000), booked)
        assert result.fits, result.explain()
        (piece,) = result.devices
        assert piece.partition is not None and piece.partition.startswith("1g.10gb@")
        assert piece.memory_mib == 9728 and piece.compute_percent == 13
        booked.append(piece.partition)
    assert sorted(booked) == [f"1g.10gb@{i}" for i in range(7)]
    eighth = fit_on(handle, device, ask(8000), booked)
    assert not eighth.fits
    assert eighth.reasons == {FitReason.PARTITION_UNAVAILABLE: 1}


def test_fit_3g_2g_1g_by_memory_and_compute(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    (device,) = handle.detect()
    booked: list[str] = []
    for request, expected in (
        (ask(30000), "3g.40gb@4"),  # over 1g.20gb/2g.20gb's 19968 MiB
        (ask(12000, compute_percent=20), "2g.20gb@0"),
        (ask(4000), "1g.10gb@2"),
        (ask(4000), "1g.10gb@3"),
    ):
        result = fit_on(handle, device, request, booked)
        assert [s.partition for s in result.devices] == [expected], result.explain()
        booked.append(expected)
    assert not fit_on(handle, device, ask(1), booked).fits


def test_a_booked_1g_at_slice_0_blocks_4g_but_leaves_3g(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    (device,) = handle.detect()
    blocked = fit_on(handle, device, ask(partition="4g.40gb"), ["1g.10gb@0"])
    assert not blocked.fits
    assert "MIG" in blocked.explain()
    # By memory, 40 GiB: 3g.40gb is the smallest that holds it, and it fits at slice 4.
    (piece,) = fit_on(handle, device, ask(40000), ["1g.10gb@0"]).devices
    assert piece.partition == "3g.40gb@4"
    # On the empty GPU the fit itself never puts a 1g where it would block 4g.
    (first,) = fit_on(handle, device, ask(1000), []).devices
    assert first.partition == "1g.10gb@6"
    assert fit_on(handle, device, ask(partition="4g.40gb"), [first.partition]).fits


def test_two_instances_for_one_container_do_not_overlap(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    (device,) = handle.detect()
    result = fit_on(handle, device, ask(partition="3g.40gb", count=2), [])
    assert sorted(s.partition or "" for s in result.devices) == ["3g.40gb@0", "3g.40gb@4"]
    assert not fit_on(handle, device, ask(partition="3g.40gb", count=3), []).fits


def test_the_pods_mode_and_profile_annotations(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia, gpu_modes={})
    (device,) = handle.detect()
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    container = ContainerView(name="main", limits=limits)

    def parsed(annotations: dict[str, str]) -> ContainerRequest:
        view = PodView(ref=PodRef(namespace="ml", name="p", uid="u1"), annotations=annotations)
        found = handle.resource_request(pod=view, container=container)
        assert found is not None
        return found

    shared_only = parsed({"nvidia.com/vgpu-mode": "hami-core"})
    assert shared_only.mode == "hami-core"
    refused = fit_on(handle, device, shared_only, [])
    assert not refused.fits and refused.reasons[FitReason.MODE_MISMATCH] == 1
    assert fit_on(handle, device, parsed({"nvidia.com/vgpu-mode": "mig"}), []).fits
    named = parsed({"xpushare.io/mig-profile": "3g.40gb"})
    assert [s.partition for s in fit_on(handle, device, named, []).devices] == ["3g.40gb@4"]
    for bad in ({"nvidia.com/vgpu-mode": "x" * 65}, {"nvidia.com/vgpu-mode": "turbo"}):
        with pytest.raises(ValueError, match="vgpu-mode"):
            parsed(bad)
    with pytest.raises(ValueError, match="mig-profile"):
        parsed({"xpushare.io/mig-profile": "../../etc"})


# -- Allocate and release -------------------------------------------------------------------


def test_allocate_creates_the_booked_instance_and_release_destroys_it(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    devices = handle.detect()
    assert fake.gi_count(0) == 0
    first = handle.allocate(alloc(devices, POD_A, "3g.40gb@4"))
    (mig,) = first.envs["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert mig.startswith("MIG-") and fake.gi_count(0) == 1
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" not in first.envs  # MIG isolates: no HAMi-core
    assert first.record == {"mig_instances": mig}
    # The MIG device is there for NVML (and the next detection) to enumerate.
    (again,) = handle.detect()
    assert mig in again.extra["mig_instances"]
    # kubelet retries the Allocate: the same instance, none more.
    assert handle.allocate(alloc(devices, POD_A, "3g.40gb@4")).envs == first.envs
    assert fake.gi_count(0) == 1
    # Another pod at slices the first one holds while it runs: refused, nothing destroyed.
    fake.add_process(0, 4242, 1000, mig=fake.mig_slot(0, mig))
    with pytest.raises(PluginError, match="still runs a process"):
        handle.allocate(alloc(devices, POD_B, "2g.20gb@4", container="side"))
    with pytest.raises(PluginError, match="still runs a process"):
        handle.allocate(alloc(devices, POD_B, "7g.80gb@0", container="side"))
    assert fake.gi_count(0) == 1
    # The pod ends but its process lingers: release fails (retried later), instance kept.
    with pytest.raises(PluginError, match="still running processes"):
        handle.release(release(POD_A))
    assert fake.gi_count(0) == 1
    fake.clear_processes(0, mig=fake.mig_slot(0, mig))
    handle.release(release(POD_A))
    assert fake.gi_count(0) == 0
    handle.release(release(POD_A))  # at least once: a second release is fine
    assert not list((hami_dir / "xpushare-meta" / "mig").glob("*.json"))


def test_an_idle_leftover_in_the_way_is_destroyed_first(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    devices = handle.detect()
    # Pod A ended; its release has not run yet when pod B is given the same slices.
    old = handle.allocate(alloc(devices, POD_A, "1g.10gb@0")).envs["NVIDIA_VISIBLE_DEVICES"]
    new = handle.allocate(alloc(devices, POD_B, "4g.40gb@0")).envs["NVIDIA_VISIBLE_DEVICES"]
    assert fake.gi_count(0) == 1 and old != new
    # A's late release must not touch B's instance, though it sits where A's was.
    handle.release(release(POD_A))
    assert fake.gi_count(0) == 1
    assert fake.alive(0, new) and not fake.alive(0, old)


def test_a_stale_placement_is_refused_with_a_reason(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    devices = handle.detect()
    with pytest.raises(PluginError, match=r"offers no MIG instance 3g\.40gb@1"):
        handle.allocate(alloc(devices, POD_A, "3g.40gb@1"))
    assert fake.gi_count(0) == 0


def test_a_failed_creation_leaves_no_instance(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    devices = handle.detect()
    fake.fail("nvmlComputeInstanceGetInfo_v2", 999)
    with pytest.raises(PluginError, match="cannot create the compute instance"):
        handle.allocate(alloc(devices, POD_A, "2g.20gb@4"))
    assert fake.gi_count(0) == 0
    fake.fail("nvmlComputeInstanceGetInfo_v2", 0)
    handle.allocate(alloc(devices, POD_A, "2g.20gb@4"))
    assert fake.gi_count(0) == 1


def test_an_agent_restart_destroys_what_ended_and_keeps_what_lives(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    mig_gpu(fake)
    before = dynamic(nvidia)
    devices = before.detect()
    ended = before.allocate(alloc(devices, POD_A, "3g.40gb@4")).envs["NVIDIA_VISIBLE_DEVICES"]
    live = before.allocate(alloc(devices, POD_B, "2g.20gb@0")).envs["NVIDIA_VISIBLE_DEVICES"]
    fake.add_process(0, 7, 100, mig=fake.mig_slot(0, live))
    before.shutdown()  # the agent stops; the instances stay on the GPU

    after = dynamic(nvidia)  # a new agent, same node disk
    after.detect()
    assert fake.gi_count(0) == 2  # detection destroys nothing
    after.release(release(POD_A))  # pod A ended while the agent was down
    assert fake.gi_count(0) == 1
    assert fake.alive(0, live) and not fake.alive(0, ended)
    # The live pod's release, once it ends, is what destroys its instance.
    fake.clear_processes(0, mig=fake.mig_slot(0, live))
    after.release(release(POD_B))
    assert fake.gi_count(0) == 0


def test_an_allocate_cut_short_is_released_from_its_intent(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    devices = handle.detect()
    handle.allocate(alloc(devices, POD_A, "1g.10gb@6"))
    journal = hami_dir / "xpushare-meta" / "mig" / f"{POD_A.uid}_main.json"
    # As if the agent had stopped between creating the instance and noting its ids.
    journal.write_text(
        f'{{"v": 1, "instances": [{{"gpu": "{uuid(0)}", "profile": "1g.10gb", "start": 6}}]}}'
    )
    handle.release(release(POD_A))
    assert fake.gi_count(0) == 0


# -- modes ----------------------------------------------------------------------------------


def test_a_gpu_switches_to_mig_only_when_nothing_runs_on_it(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake, enabled=False)
    fake.add_gpus(1)  # a second GPU, left as it is
    handle = nvidia(gpu_modes={uuid(0): "mig"})
    fake.add_process(0, 99, 500)
    first, other = handle.detect()
    assert first.mode == "shared" and first.extra["mode_pending"] == "mig"
    assert other.mode == "shared" and "mode_pending" not in other.extra
    fake.clear_processes(0)
    first, other = handle.detect()
    assert first.mode == "mig" and first.extra["mig_dynamic"] == "true"
    assert "mode_pending" not in first.extra
    assert other.mode == "shared"


def test_a_gpu_leaves_mig_once_its_instances_are_released(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    devices = handle.detect()
    handle.allocate(alloc(devices, POD_A, "7g.80gb@0"))
    handle.shutdown()
    back = nvidia(mode="hami-core")  # the agent restarted with the node set to hami-core
    (device,) = back.detect()
    assert device.mode == "mig" and device.extra["mode_pending"] == "hami-core"
    assert fake.gi_count(0) == 1  # the pod's instance lives on
    back.release(release(POD_A))
    (device,) = back.detect()
    assert device.mode == "shared" and device.partitions == ()
    assert "mode_pending" not in device.extra


def test_exclusive_mode_gives_whole_gpus(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    handle = nvidia(gpu_modes={"1": "exclusive"})
    shared, whole = handle.detect()
    assert (shared.mode, whole.mode, whole.share_slots) == ("shared", "exclusive", 1)
    view = NodeView(name=NODE, devices=(shared, whole))
    mode = ask(8000, mode="exclusive")
    (piece,) = handle.fit(request=mode, node=view, usage={}, device_order=[]).devices
    assert (piece.device_id, piece.memory_mib, piece.exclusive) == (whole.id, 81920, True)
    given = handle.allocate(alloc([whole], POD_A, *()).model_copy(update={"slices": (piece,)}))
    assert given.envs["NVIDIA_VISIBLE_DEVICES"] == whole.id
    assert not any(k.startswith("CUDA_DEVICE_MEMORY_LIMIT") for k in given.envs)


def test_the_score_prefers_the_placement_that_loses_least(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    (device,) = handle.detect()
    view = NodeView(name=NODE, devices=(device,))

    def score(booked: list[str]) -> float | None:
        usage = {device.id: DeviceUsage(device_id=device.id, partitions_in_use=tuple(booked))}
        result = handle.fit(request=ask(4000), node=view, usage=usage, device_order=[])
        return handle.score(request=ask(4000), node=view, fit=result, usage=usage)

    # A 1g on the empty A100: the largest profile left goes from 7g to 4g (3 of 7 slices).
    assert score([]) == pytest.approx(1 - 3 / 7)
    # Beside a 3g at 4: from 4g to 2g (2 of 7): this GPU is the better place.
    assert score(["3g.40gb@4"]) == pytest.approx(1 - 2 / 7)
    # Beside 3g at 4 and 2g at 0, slices 2-3 are left: from 2g to 1g (1 of 7).
    assert score(["3g.40gb@4", "2g.20gb@0"]) == pytest.approx(1 - 1 / 7)
    # With only one 1g slot left, taking it loses the 1g itself (1 of 7) too; a full GPU
    # has no fit, hence no score.
    assert score(["3g.40gb@4", "2g.20gb@0", "1g.10gb@2"]) == pytest.approx(1 - 1 / 7)


def test_cdi_names_the_new_mig_device(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia, device_list_strategy="cdi")
    devices = handle.detect()
    given = handle.allocate(alloc(devices, POD_A, "1g.10gb@6"))
    (name,) = given.cdi_devices
    assert name.startswith("nvidia.com/gpu=MIG-") and fake.alive(0, name.split("=", 1)[1])
    assert "NVIDIA_VISIBLE_DEVICES" not in given.envs


def test_the_placer_never_books_overlapping_instances(
    fake: FakeNvml, driver_root: Path, hami_dir: Path
) -> None:
    """Through the placement engine and its ledger: two containers of one pod, then more
    pods, each booked where the earlier bookings leave room, until the GPU is full."""
    from nvidia_kit import base_config

    from xpushare.placement import Placer
    from xpushare.scheduling import PodRequest, UsageLedger
    from xpushare.scheduling.partitions import geometry_of
    from xpushare.testing.hosts import VendorHosts
    from xpushare_nvidia import plugin

    mig_gpu(fake)
    with VendorHosts("nvidia", plugin, node_name=NODE, strict=True) as hosts:
        host = hosts.host({**base_config(driver_root, hami_dir), "mode": "mig"})
        handle = host.vendor("nvidia")
        handle.startup()
        (device,) = handle.detect()
        ledger = UsageLedger()
        ledger.set_node(NODE, [device])
        placer = Placer(ledger, "binpack", host=host)
        pair = PodRequest.build(
            [ask(30000).model_copy(update={"container": c}) for c in ("a", "b")]
        )
        first = placer.decide(pair, NODE)
        places = [s.partition for c in first.containers for s in c.devices]
        assert sorted(places) == ["3g.40gb@0", "3g.40gb@4"]  # not twice the same start
        placer.commit("ml/pair", pair, first)
        one = PodRequest.build([ask(4000)])
        # 3g at 0 and at 4 take all eight memory slices: not even a 1g is left.
        assert placer.filter(one, [NODE]).fits == []
        usage = ledger.device_usage(NODE, "nvidia")[device.id]
        geometry = geometry_of(device.partitions)
        assert geometry is not None
        assert geometry.occupancy(usage.partitions_in_use).broken == ""


def test_a_whole_gpu_request_gets_the_instance_that_spans_the_gpu(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    mig_gpu(fake)
    handle = dynamic(nvidia)
    (device,) = handle.detect()
    whole = ContainerRequest(vendor="nvidia", compute_percent=100, exclusive=True)
    (piece,) = fit_on(handle, device, whole, []).devices
    assert (piece.partition, piece.memory_mib) == ("7g.80gb@0", 81152)
    all_memory = ContainerRequest(vendor="nvidia", memory_percent=100)
    assert [s.partition for s in fit_on(handle, device, all_memory, []).devices] == ["7g.80gb@0"]
    # Not while anything else is on the GPU.
    assert not fit_on(handle, device, whole, ["1g.10gb@6"]).fits
