"""The fragmentation measure on dynamic MIG GPUs, against A100-80GB cases worked by hand.

A MIG GPU's free capacity is its compute slices no instance takes (7 on an A100: one slice
is 1000 // 7 = 142 units, k slices 1000 * k // 7); all of it is a task shape's fragment
when the fit could give the shape no instance there, none of it when it could.

The shapes (the smallest A100-80GB profile that holds each):
``t1`` 5,000 MiB 10 % -> 1g.10gb; ``t2`` 15,000 MiB 20 % -> 2g.20gb; ``t3`` 30,000 MiB
30 % -> 3g.40gb; ``t4`` 40,000 MiB 50 % -> 4g.40gb; ``w`` exclusive -> 7g.80gb.
Placements (memory slices): 1g at 0-6, 2g at 0/2/4, 3g at 0/4, 4g at 0, 7g at 0; a 1g
cannot start at slice 7, only 1g.20gb at 6 (slices 6-7) and 7g reach it.
"""

from __future__ import annotations

from typing import Any

import pytest

from xpushare.models import (
    ContainerAssignment,
    ContainerRequest,
    Device,
    DeviceSlice,
    FitReason,
    PodAssignment,
)
from xpushare.placement import Placer
from xpushare.scheduling import (
    FragmentationMeter,
    FragmentationPolicy,
    PodRequest,
    TaskShape,
    UsageLedger,
    Workload,
)
from xpushare.scheduling.fit import check_device
from xpushare.scheduling.hostaware import FgdCpuPolicy, HostAwareMeter
from xpushare.scheduling.partitions import ANSWERS_LIMIT, Occupancy, geometry_of, slot_name
from xpushare.scheduling.state import (
    SIG_OCCUPANCY,
    DeviceState,
    cached_signature,
    device_signature,
)
from xpushare.testing.partitions import A100_80GB, profiles

P80 = profiles(A100_80GB)
BY_NAME = {p.name: p for p in P80}
MEMORY = 81920


def units(slices: int) -> int:
    return 1000 * slices // 7


def mig_gpus(node: str, n: int = 1) -> list[Device]:
    return [
        Device(
            vendor="acme",
            id=f"{node}-{i}",
            index=i,
            model="A100-SXM4-80GB",
            memory_mib=MEMORY,
            share_slots=7,
            mode="mig",
            partitions=P80,
        )
        for i in range(n)
    ]


def book(ledger: UsageLedger, node: str, *slots: str, device: int = 0) -> None:
    """Book instances ``"<profile>@<start>"`` on one GPU, as the NVIDIA fit books them."""
    for n, slot in enumerate(slots):
        p = BY_NAME[slot.split("@")[0]]
        s = DeviceSlice(
            device_id=f"{node}-{device}",
            memory_mib=p.memory_mib,
            compute_percent=p.compute_percent,
            partition=slot,
        )
        ledger.add(
            f"{node}/{device}/{n}/{slot}",
            PodAssignment(
                node=node,
                containers=(ContainerAssignment(container="c", vendor="acme", devices=(s,)),),
            ),
        )


def pod(**kw: Any) -> PodRequest:
    return PodRequest.build([ContainerRequest(vendor="acme", **kw)])


T1 = pod(memory_mib=5000, compute_percent=10)
T2 = pod(memory_mib=15000, compute_percent=20)
T3 = pod(memory_mib=30000, compute_percent=30)
T4 = pod(memory_mib=40000, compute_percent=50)
WHOLE = pod(compute_percent=100, exclusive=True)


def workload(*requests: PodRequest) -> Workload:
    return Workload([TaskShape.of(r) for r in requests], [1.0] * len(requests))


def frag(*slots: str, shapes: tuple[PodRequest, ...] = (T1, T4)) -> float:
    ledger = UsageLedger()
    ledger.set_node("n", mig_gpus("n"))
    book(ledger, "n", *slots)
    return FragmentationMeter(workload(*shapes)).node_frag(ledger.nodes["n"]) * len(shapes)


def test_an_empty_a100_fits_every_shape_and_a_used_one_not_the_whole() -> None:
    assert frag(shapes=(T1, T2, T3, T4, WHOLE)) == 0
    # One 3g at 4: 4 slices free (571); the 4g fits at 0, the 7g not.
    assert frag("3g.40gb@4", shapes=(T1, T2, T3, T4)) == 0
    assert frag("3g.40gb@4", shapes=(WHOLE,)) == units(4)


def test_a_1g_at_slice_0_blocks_the_4g_one_at_slice_6_does_not() -> None:
    # 1g@6: 6 slices free (857); a 1g fits, a 4g fits at 0: nothing lost.
    # 1g@0: no 4g or 7g fits any more: all 857 are lost to the 4g shape.
    assert frag("1g.10gb@6") == 0
    assert frag("1g.10gb@0") == units(6)


def test_3g_2g_combinations() -> None:
    # 3g@4 + 2g@0 leave slices 2-3: a 2g fits there, and a 1g: nothing lost.
    # 3g@0 + 2g@4 leave slices 6-7 (2 compute slices, 285): a 1g at 6, but no 2g (its
    # placements are 0, 2 and 4): 285 lost to the 2g shape.
    shapes = (T1, T2)
    assert frag("3g.40gb@4", "2g.20gb@0", shapes=shapes) == 0
    assert frag("3g.40gb@0", "2g.20gb@4", shapes=shapes) == units(2)
    # A 1g then: at 2 after 3g@4 + 2g@0 it leaves slice 3, where a 1g still fits (the 2g
    # shape loses the 142); at 6 after 3g@0 + 2g@4 it leaves slice 7, which has no 1g
    # placement: 142 lost to both shapes.
    assert frag("3g.40gb@4", "2g.20gb@0", "1g.10gb@2", shapes=shapes) == units(1)
    assert frag("3g.40gb@0", "2g.20gb@4", "1g.10gb@6", shapes=shapes) == 2 * units(1)


def test_free_shares_no_profile_can_use_are_not_capacity() -> None:
    # Seven 1g instances book 91 % of the compute and 83 % of the memory: a shared GPU
    # would have 90 units left; a MIG GPU has no slice left.
    ledger = UsageLedger()
    ledger.set_node("n", mig_gpus("n"))
    book(ledger, "n", *(f"1g.10gb@{s}" for s in range(7)))
    d = ledger.nodes["n"].tables["acme"].devices[0]
    assert d.free_units() == 0
    assert FragmentationMeter(workload(T1, T4)).node_frag(ledger.nodes["n"]) == 0
    # Four 1g.20gb take all 8 memory slices and 4 compute slices: 3 slices (428) free that
    # no profile can use, lost to every shape.
    assert frag("1g.20gb@0", "1g.20gb@2", "1g.20gb@4", "1g.20gb@6") == 2 * units(3)


def test_fgd_takes_the_node_where_the_instance_blocks_less() -> None:
    # x: 3g@4 booked (slices 0-3 free: a 4g still fits). y: 4g@0 booked (slices 4-6 free,
    # 428 lost to the 4g shape already). A 1g on x blocks the 4g: 0 -> 428 lost. On y it
    # goes to slice 6 (a 2g stays possible at 4): 428 -> 285, growth -143. By shares alone
    # (the measure without MIG geometry) a 4g task could still go on both before and after.
    for order in (("x", "y"), ("y", "x")):
        ledger = UsageLedger()
        for name in order:
            ledger.set_node(name, mig_gpus(name))
        book(ledger, "x", "3g.40gb@4")
        book(ledger, "y", "4g.40gb@0")
        nodes = ledger.nodes
        fgd = FragmentationPolicy(workload(T1, T4))
        assert [fgd.best(nodes[n], T1).growth * 2 for n in "xy"] == [units(3), units(2) - units(3)]
        decision = Placer(ledger, fgd).place(T1)
        assert decision is not None and decision.node == "y"
        (got,) = decision.assignment.containers[0].devices
        assert got.partition == "1g.10gb@6"
        assert Placer(ledger, FgdCpuPolicy(workload(T1, T4))).select(T1) == "y"


def test_the_cpu_aware_measure_reads_the_same_geometry() -> None:
    # Without CPU asked it is FGD's: 1g@0 leaves 857 to the 4g shape.
    ledger = UsageLedger()
    ledger.set_node("n", mig_gpus("n"), cpu_milli=64000)
    book(ledger, "n", "1g.10gb@0")
    node = ledger.nodes["n"]
    w = workload(T1, T4)
    assert HostAwareMeter(w).node_frag(node) == FragmentationMeter(w).node_frag(node) == 857 / 2


def test_the_fit_gives_the_instance_the_geometry_chooses() -> None:
    ledger = UsageLedger()
    ledger.set_node("n", mig_gpus("n"))
    book(ledger, "n", "4g.40gb@0")
    d = ledger.nodes["n"].tables["acme"].devices[0]
    pick = check_device(d, T1.demands[0], None)
    assert pick == (d, 9728, BY_NAME["1g.10gb"].compute_percent, False, "1g.10gb@6")
    # A second container of the same pod sees the first's instance (extra).
    extra = {d.id: [1, 9728, 13, 0], f"{d.id}\0" + "1g.10gb@6": [1, 0, 0, 0]}
    second = check_device(d, T1.demands[0], extra)
    assert type(second) is tuple and second[4] == "1g.10gb@4"
    assert check_device(d, T4.demands[0], None) is FitReason.PARTITION_UNAVAILABLE
    assert type(check_device(d, WHOLE.demands[0], None)) is not tuple


def test_two_layouts_with_the_same_shares_are_two_signatures() -> None:
    ledger = UsageLedger()
    ledger.set_node("a", mig_gpus("a"))
    ledger.set_node("b", mig_gpus("b"))
    book(ledger, "a", "1g.10gb@0")
    book(ledger, "b", "1g.10gb@6")
    sa, sb = (cached_signature(ledger.nodes[n].tables["acme"].devices[0]) for n in "ab")
    assert sa[:12] == sb[:12]  # the same shares booked
    assert sa != sb and sa[SIG_OCCUPANCY] != sb[SIG_OCCUPANCY]
    assert sorted([sa, sb]) == sorted([sb, sa])  # signatures stay ordered


@pytest.mark.parametrize("mig", [False, True])
def test_other_devices_keep_their_signature(mig: bool) -> None:
    ledger = UsageLedger()
    devices = mig_gpus("n")
    if not mig:
        devices = [d.model_copy(update={"mode": "shared", "partitions": ()}) for d in devices]
    ledger.set_node("n", devices)
    sig = device_signature(ledger.nodes["n"].tables["acme"].devices[0])
    assert len(sig) == (14 if mig else 12)


def test_an_a100_has_finitely_many_layouts_each_its_own_signature() -> None:
    """The occupancy in the signature adds a bounded dimension: every layout an A100-80GB
    can be left in (instances created at any free placement, in any order) is one of 1,109,
    within the geometry's caches, and each has a signature of its own."""
    geometry = geometry_of(P80)
    assert geometry is not None
    layouts: dict[Occupancy, list[str]] = {Occupancy(): []}
    todo = [Occupancy()]
    while todo:
        occ = todo.pop()
        for shape in geometry.shapes:
            for start in geometry.free_starts(shape, occ):
                after = geometry.with_instance(occ, shape, start)
                if after not in layouts:
                    layouts[after] = [*layouts[occ], slot_name(shape.name, start)]
                    todo.append(after)
    assert len(layouts) == 1109 and len(layouts) < ANSWERS_LIMIT
    (device,) = mig_gpus("n")
    sigs = set()
    for names in layouts.values():
        d = DeviceState.from_device(device)
        d.used_slots = len(names)
        d.partitions_used.update(names)
        sigs.add(device_signature(d))
    assert len(sigs) == len(layouts)
