"""Allocate and GetPreferredAllocation: pod found through the handoff, matched, served."""

import time

import grpc
import pytest
from nodekit import NODE, RESOURCE, mock_host, one_slice, running
from vendors import Acme

from xpushare.codec import HANDOFF_KEY, TERM_KEY, decode_handoff
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.testing.kubelet import AdmissionError, ContainerSpec


def dev(i: int) -> str:
    return f"MOCK-{NODE}-{i}"


async def test_allocate_serves_the_assignment_and_writes_nothing_back(plugin_dir):
    async with running(plugin_dir) as run:
        pod = run.kube.add_pod("train")
        run.kube.bind(pod, one_slice(dev(5), memory=8000, compute=30))
        written = run.kube.handoff_annotations[HANDOFF_KEY]
        lease_patches = len(run.kube.patches)
        result = await run.kubelet.admit_pod(pod.uid, [ContainerSpec("main", {RESOURCE: 1})])
        main = result["main"]
        # GetPreferredAllocation steered kubelet to a share of the assigned device, out of
        # 80 candidates kubelet would otherwise pick from at random.
        assert [i.split("::")[0] for i in main.devices[RESOURCE]] == [dev(5)]
        assert main.envs == {
            "XPUSHARE_MOCK_VISIBLE_DEVICES": dev(5),
            "XPUSHARE_MOCK_MEMORY_LIMIT_0": "8000m",
            "XPUSHARE_MOCK_CORE_LIMIT_0": "30",
        }
        # The handoff stays as the scheduler wrote it: kubelet's status write after the
        # admission frees it for the next bind (DESIGN.md §6), not a write of the agent.
        assert run.kube.handoff_annotations[HANDOFF_KEY] == written
        assert not [p for p in run.kube.patches[lease_patches:] if HANDOFF_KEY in str(p)]


async def test_a_served_handoff_is_never_served_again(plugin_dir):
    # The handoff of a pod served here still names it until the next bind replaces it: an
    # Allocate that comes meanwhile (a pod bound to the node past the xpushare scheduler)
    # must not get that pod's devices.
    async with running(plugin_dir) as run:
        pod = run.kube.add_pod("first")
        run.kube.bind(pod, one_slice(dev(5)))
        await run.kubelet.admit_pod(pod.uid, [ContainerSpec("main", {RESOURCE: 1})])
        assert HANDOFF_KEY in run.kube.handoff_annotations
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await run.kubelet.allocate(RESOURCE, [f"{dev(5)}::7"])
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no pod is waiting" in info.value.details()


async def test_after_a_restart_a_handoff_of_an_admitted_pod_is_not_served(plugin_dir):
    # The agent's record of what it served is in memory: after a restart the pod's
    # status.startTime (kubelet admitted it) says the handoff has served; the Pending pod
    # that waits is found by listing.
    async with running(plugin_dir) as run:
        old = run.kube.add_pod("old")
        run.kube.bind(old, one_slice(dev(1)))
        run.kube.pods[("default", "old")]["status"]["startTime"] = "2026-12-06T10:00:00Z"
        waiting = run.kube.add_pod("waiting")
        handoff = run.kube.handoff_annotations[HANDOFF_KEY]
        run.kube.bind(waiting, one_slice(dev(4)))
        run.kube.set_handoff_annotations({HANDOFF_KEY: handoff})  # still names "old"
        result = await run.kubelet.admit_pod(waiting.uid, [ContainerSpec("main", {RESOURCE: 1})])
        assert result["main"].envs["XPUSHARE_MOCK_VISIBLE_DEVICES"] == dev(4)


async def test_each_container_gets_its_own_slices(plugin_dir):
    assignment = PodAssignment(
        node=NODE,
        containers=(
            ContainerAssignment(
                container="prep",
                vendor="mock",
                init=True,
                devices=(DeviceSlice(device_id=dev(1), memory_mib=1000, compute_percent=10),),
            ),
            ContainerAssignment(
                container="main",
                vendor="mock",
                devices=(
                    DeviceSlice(device_id=dev(3), memory_mib=3000, compute_percent=50),
                    DeviceSlice(device_id=dev(6), memory_mib=6000, compute_percent=50),
                ),
            ),
        ),
    )
    async with running(plugin_dir) as run:
        pod = run.kube.add_pod("two")
        run.kube.bind(pod, assignment)
        result = await run.kubelet.admit_pod(
            pod.uid,
            [ContainerSpec("main", {RESOURCE: 2}), ContainerSpec("prep", {RESOURCE: 1}, init=True)],
        )
        assert result["prep"].envs["XPUSHARE_MOCK_VISIBLE_DEVICES"] == dev(1)
        main = result["main"].envs
        assert sorted(main["XPUSHARE_MOCK_VISIBLE_DEVICES"].split(",")) == [dev(3), dev(6)]
        assert sorted(
            [main["XPUSHARE_MOCK_MEMORY_LIMIT_0"], main["XPUSHARE_MOCK_MEMORY_LIMIT_1"]]
        ) == [
            "3000m",
            "6000m",
        ]


async def test_without_a_handoff_the_pending_pod_is_found_by_listing(plugin_dir):
    async with running(plugin_dir) as run:
        pod = run.kube.add_pod("late")
        run.kube.bind(pod, one_slice(dev(2)))
        run.kube.set_handoff_annotations({HANDOFF_KEY: None})
        result = await run.kubelet.admit_pod(pod.uid, [ContainerSpec("main", {RESOURCE: 1})])
        assert result["main"].envs["XPUSHARE_MOCK_VISIBLE_DEVICES"] == dev(2)


async def test_an_expired_handoff_is_not_trusted(plugin_dir):
    async with running(plugin_dir) as run:
        stale = run.kube.add_pod("stale", phase="Running")
        run.kube.bind(stale, one_slice(dev(0)), now=1.0, ttl_s=1.0)  # expired long ago
        fresh = run.kube.add_pod("fresh")
        handoff = run.kube.handoff_annotations[HANDOFF_KEY]
        run.kube.bind(fresh, one_slice(dev(4)))
        run.kube.set_handoff_annotations({HANDOFF_KEY: handoff})  # the stale one again
        result = await run.kubelet.admit_pod(fresh.uid, [ContainerSpec("main", {RESOURCE: 1})])
        assert result["main"].envs["XPUSHARE_MOCK_VISIBLE_DEVICES"] == dev(4)


async def test_a_handoff_of_a_deposed_scheduler_term_is_not_trusted(plugin_dir):
    async with running(plugin_dir) as run:
        stale = run.kube.add_pod("stale", phase="Running")
        run.kube.bind(stale, one_slice(dev(0)))
        handoff = run.kube.handoff_annotations[HANDOFF_KEY]
        fresh = run.kube.add_pod("fresh")
        run.kube.bind(fresh, one_slice(dev(4)))
        # The Lease was written by term 3 since; the handoff (term 0) is a deposed leader's.
        run.kube.set_handoff_annotations({HANDOFF_KEY: handoff, TERM_KEY: "3"})
        result = await run.kubelet.admit_pod(fresh.uid, [ContainerSpec("main", {RESOURCE: 1})])
        assert result["main"].envs["XPUSHARE_MOCK_VISIBLE_DEVICES"] == dev(4)


async def test_a_handoff_claiming_a_year_of_life_is_read_with_the_longest_lifetime(plugin_dir):
    async with running(plugin_dir) as run:
        stale = run.kube.add_pod("stale", phase="Running")
        run.kube.bind(stale, one_slice(dev(0)), now=time.time() - 200, ttl_s=365 * 86400.0)
        handoff = run.kube.handoff_annotations[HANDOFF_KEY]
        fresh = run.kube.add_pod("fresh")
        run.kube.bind(fresh, one_slice(dev(4)))
        run.kube.set_handoff_annotations({HANDOFF_KEY: handoff})
        result = await run.kubelet.admit_pod(fresh.uid, [ContainerSpec("main", {RESOURCE: 1})])
        assert result["main"].envs["XPUSHARE_MOCK_VISIBLE_DEVICES"] == dev(4)


async def test_a_missing_assignment_is_an_error_naming_pod_and_node(plugin_dir):
    async with running(plugin_dir) as run:
        pod = run.kube.add_pod("bare")
        run.kube.bind(pod, one_slice(dev(1)))
        run.kube.pods[("default", "bare")]["metadata"]["annotations"].clear()
        with pytest.raises(AdmissionError) as info:
            await run.kubelet.admit_pod(pod.uid, [ContainerSpec("main", {RESOURCE: 1})])
        message = str(info.value)
        assert message.startswith("Allocate failed due to ")
        assert "default/bare" in message
        assert NODE in message
        assert "xpushare.io/assignment" in message


async def test_devices_other_than_the_assignment_are_refused(plugin_dir):
    async with running(plugin_dir) as run:
        pod = run.kube.add_pod("picky")
        run.kube.bind(pod, one_slice(dev(1)))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await run.kubelet.allocate(RESOURCE, [f"{dev(3)}::0"])
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = info.value.details()
        assert "default/picky" in details and NODE in details
        assert dev(3) in details and dev(1) in details
        assert HANDOFF_KEY in run.kube.handoff_annotations  # nothing was served


async def test_ids_that_are_not_ours_are_invalid(plugin_dir):
    async with running(plugin_dir) as run:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await run.kubelet.allocate(RESOURCE, ["GPU-0"])
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_no_pending_pod_is_a_clear_error(plugin_dir):
    async with running(plugin_dir) as run:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await run.kubelet.allocate(RESOURCE, [f"{dev(0)}::0"])
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no pod is waiting" in info.value.details()
        assert "schedulerName" in info.value.details()


async def test_a_pod_of_two_vendors_is_served_through_one_handoff(plugin_dir):
    acme = Acme()
    assignment = PodAssignment(
        node=NODE,
        containers=(
            ContainerAssignment(
                container="main",
                vendor="mock",
                devices=(DeviceSlice(device_id=dev(0), memory_mib=100, compute_percent=10),),
            ),
            ContainerAssignment(
                container="main",
                vendor="acme",
                devices=(DeviceSlice(device_id="ACME-1", memory_mib=100, compute_percent=10),),
            ),
        ),
    )
    async with running(plugin_dir, host=mock_host("8x A100-80GB", ("acme", acme))) as run:
        await run.kubelet.wait_until(lambda: run.kubelet.allocatable(acme.resource) == 20)
        pod = run.kube.add_pod("both")
        run.kube.bind(pod, assignment)
        await run.kubelet.allocate(RESOURCE, [f"{dev(0)}::3"])
        response = await run.kubelet.allocate(acme.resource, ["ACME-1::0"])
        assert dict(response.container_responses[0].envs) == {"ACME_VISIBLE_DEVICES": "ACME-1"}
        handoff = decode_handoff(run.kube.handoff_annotations[HANDOFF_KEY])
        assert (handoff.pod.name, handoff.allocated) == ("both", ())
        # Both vendors served: neither serves the pod again from its handoff.
        for resource, ids in ((RESOURCE, [f"{dev(0)}::4"]), (acme.resource, ["ACME-1::1"])):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await run.kubelet.allocate(resource, ids)
            assert "no pod is waiting" in info.value.details()


async def test_a_hung_vendor_library_gets_an_error_within_the_deadline(plugin_dir):
    acme = Acme()
    host = mock_host("1x A100-80GB", ("acme", acme))
    async with running(plugin_dir, host=host, allocate_deadline_s=0.5) as run:
        await run.kubelet.wait_until(lambda: run.kubelet.allocatable(acme.resource) == 20)
        pod = run.kube.add_pod("stuck")
        run.kube.bind(
            pod,
            PodAssignment(
                node=NODE,
                containers=(
                    ContainerAssignment(
                        container="main",
                        vendor="acme",
                        devices=(DeviceSlice(device_id="ACME-0", memory_mib=1, compute_percent=1),),
                    ),
                ),
            ),
        )
        acme.hang.set()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await run.kubelet.allocate(acme.resource, ["ACME-0::0"])
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "'acme'" in info.value.details() and "default/stuck" in info.value.details()
        # While its library thread is stuck, every acme device is reported unhealthy...
        await run.kubelet.wait_until(
            lambda: set(run.kubelet.devices(acme.resource).values()) == {"Unhealthy"},
            what="acme devices unhealthy",
        )
        # ...the other vendor is untouched...
        assert run.kubelet.allocatable(RESOURCE) == 10
        # ...and once the call returns, they are healthy again.
        acme.release.set()
        await run.kubelet.wait_until(
            lambda: run.kubelet.allocatable(acme.resource) == 20, what="acme recovered"
        )


async def test_a_failing_vendor_allocate_is_an_internal_error_naming_the_container(plugin_dir):
    acme = Acme()
    async with running(plugin_dir, host=mock_host("1x A100-80GB", ("acme", acme))) as run:
        await run.kubelet.wait_until(lambda: run.kubelet.allocatable(acme.resource) == 20)
        pod = run.kube.add_pod("broken")
        run.kube.bind(
            pod,
            PodAssignment(
                node=NODE,
                containers=(
                    ContainerAssignment(
                        container="worker",
                        vendor="acme",
                        devices=(DeviceSlice(device_id="ACME-1", memory_mib=1, compute_percent=1),),
                    ),
                ),
            ),
        )
        acme.fail_allocate = True
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await run.kubelet.allocate(acme.resource, ["ACME-1::0"])
        assert info.value.code() == grpc.StatusCode.INTERNAL
        assert "cannot open /dev/acme0" in info.value.details()
        assert "'worker'" in info.value.details() and "default/broken" in info.value.details()


async def test_well_formed_ids_that_are_not_ours_are_invalid(plugin_dir):
    async with running(plugin_dir) as run:
        pod = run.kube.add_pod("strange")
        run.kube.bind(pod, one_slice(dev(1)))
        for kid in ("NOT-OURS::0", f"{dev(1)}::999", f"{dev(1)}::{'9' * 40}"):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await run.kubelet.allocate(RESOURCE, [kid])
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, kid
            assert kid[:20] in info.value.details()


async def test_an_allocate_of_a_huge_id_list_is_refused_with_a_short_message(plugin_dir):
    """Defect 9: the error quoted every ID (about 1 MB for 100,000), over gRPC's metadata
    limit, so kubelet saw RESOURCE_EXHAUSTED "Stream removed" instead of the reason."""
    from xpushare.node.grpcerrors import MAX_STATUS_CHARS

    ids = [f"NOT-OURS-{i:06d}::0" for i in range(100_000)]
    async with running(plugin_dir) as run:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await run.kubelet.allocate(RESOURCE, ids)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = info.value.details()
        assert len(details) <= MAX_STATUS_CHARS
        assert "100000 in all" in details and "'NOT-OURS-000000::0'" in details
        assert "NOT-OURS-099999" not in details
        assert NODE in details and "not a device this" in details
