"""The usage ledger: incremental updates equal a recount, reservations, late inventories."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from xpushare.models import ContainerAssignment, Device, DeviceSlice, PodAssignment
from xpushare.scheduler.candidates import NO_TABLE, UNBOUNDED, UNKNOWN, CandidateRows
from xpushare.scheduling import UsageLedger, audit, charges_of

NODES = ("n0", "n1", "n2")
DEVICES_PER_NODE = 3


def devices(node: str, n: int = DEVICES_PER_NODE, vendor: str = "acme") -> list[Device]:
    return [
        Device(vendor=vendor, id=f"{node}-{vendor}-{i}", index=i, model="M", memory_mib=1000)
        for i in range(n)
    ]


def assignment(node: str, slices: list[tuple[str, int, int, bool, bool]]) -> PodAssignment:
    """slices: (device id, MiB, compute, exclusive, init container?)"""
    containers = [
        ContainerAssignment(
            container=f"c{k}",
            vendor="acme",
            init=init,
            devices=(DeviceSlice(device_id=d, memory_mib=m, compute_percent=c, exclusive=x),),
        )
        for k, (d, m, c, x, init) in enumerate(slices)
    ]
    return PodAssignment(node=node, containers=tuple(containers))


def test_add_and_remove_touch_only_the_pods_devices() -> None:
    ledger = UsageLedger()
    ledger.set_node("n0", devices("n0"), cpu_milli=8000, memory_mib=16000)
    before = ledger.node("n0")
    assert before is not None
    version = before.version
    ledger.add("ns/a", assignment("n0", [("n0-acme-1", 300, 20, False, False)]), cpu_milli=500)
    usage = ledger.device_usage("n0", "acme")
    assert (usage["n0-acme-1"].used_memory_mib, usage["n0-acme-1"].used_compute_percent) == (
        300,
        20,
    )
    assert usage["n0-acme-0"].used_slots == 0
    assert before.cpu_used == 500 and before.version > version
    table = before.tables["acme"]
    assert (table.max_free_memory, table.n_whole_free) == (1000, 2)
    assert ledger.remove("ns/a") and not ledger.remove("ns/a")
    assert ledger.device_usage("n0", "acme")["n0-acme-1"].used_memory_mib == 0
    assert before.cpu_used == 0


def test_init_containers_count_their_peak_not_their_sum() -> None:
    a = assignment(
        "n0",
        [
            ("d", 500, 10, False, True),  # init
            ("d", 700, 30, False, True),  # init
            ("d", 200, 20, False, False),  # app
            ("d", 100, 20, False, False),  # app
        ],
    )
    [charge] = charges_of(a)
    assert (charge.slots, charge.memory, charge.compute) == (2, 700, 40)
    [only_init] = charges_of(assignment("n0", [("d", 500, 10, False, True)]))
    assert only_init.slots == 1


def test_reservations_count_until_released_and_survive_confirmation() -> None:
    ledger = UsageLedger()
    ledger.set_node("n0", devices("n0"))
    ledger.reserve("ns/a", assignment("n0", [("n0-acme-0", 100, 0, False, False)]))
    assert ledger.device_usage("n0", "acme")["n0-acme-0"].used_slots == 1
    assert ledger.release("ns/a")
    assert ledger.device_usage("n0", "acme")["n0-acme-0"].used_slots == 0
    ledger.reserve("ns/b", assignment("n0", [("n0-acme-0", 100, 0, False, False)]))
    assert ledger.confirm("ns/b")
    assert not ledger.release("ns/b"), "a bound pod is not a reservation any more"
    assert ledger.device_usage("n0", "acme")["n0-acme-0"].used_slots == 1


def test_a_pod_seen_before_its_node_is_counted_when_the_node_registers() -> None:
    ledger = UsageLedger()
    ledger.add("ns/a", assignment("n9", [("n9-acme-2", 400, 50, False, False)]), cpu_milli=100)
    assert ledger.device_usage("n9", "acme")["n9-acme-2"].used_memory_mib == 400  # orphan
    ledger.set_node("n9", devices("n9"), cpu_milli=1000)
    state = ledger.node("n9")
    assert state is not None and state.cpu_used == 100
    assert state.tables["acme"].by_id["n9-acme-2"].used_memory == 400
    assert state.orphans == {}
    ledger.remove_node("n9")
    assert ledger.device_usage("n9", "acme")["n9-acme-2"].used_memory_mib == 400
    ledger.remove("ns/a")
    assert ledger.node("n9") is None
    assert ledger.snapshot() == ledger.recount() == {}


def test_replacing_an_entry_replaces_its_usage() -> None:
    ledger = UsageLedger()
    ledger.set_node("n0", devices("n0"))
    ledger.add("ns/a", assignment("n0", [("n0-acme-0", 100, 0, False, False)]))
    ledger.add("ns/a", assignment("n0", [("n0-acme-1", 200, 0, False, False)]))
    usage = ledger.device_usage("n0", "acme")
    assert usage["n0-acme-0"].used_memory_mib == 0 and usage["n0-acme-1"].used_memory_mib == 200
    assert len(ledger) == 1


def test_exclusive_use_and_overcommit_show_in_the_summaries() -> None:
    ledger = UsageLedger(memory_overcommit={"*": 2.0})
    ledger.set_node("n0", devices("n0", 2))
    table = ledger.node("n0").tables["acme"]  # type: ignore[union-attr]
    assert table.max_free_memory == 2000
    ledger.add("ns/a", assignment("n0", [("n0-acme-0", 1000, 100, True, False)]))
    assert (table.n_usable, table.n_held, table.n_whole_free) == (1, 1, 1)


# -- property: any sequence of operations leaves the ledger equal to a recount ---------------

slice_st = st.tuples(
    st.sampled_from(NODES),
    st.lists(
        st.tuples(
            st.integers(0, DEVICES_PER_NODE),  # DEVICES_PER_NODE: a device the node lacks
            st.integers(0, 600),
            st.integers(0, 100),
            st.booleans(),
            st.booleans(),
        ),
        min_size=0,
        max_size=3,
    ),
    st.integers(0, 4000),
    st.integers(0, 4000),
)
op_st = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 6), slice_st, st.booleans()),
    st.tuples(st.just("remove"), st.integers(0, 6)),
    st.tuples(st.just("release"), st.integers(0, 6)),
    st.tuples(st.just("confirm"), st.integers(0, 6)),
    st.tuples(st.just("node"), st.sampled_from(NODES), st.integers(0, DEVICES_PER_NODE)),
    st.tuples(st.just("drop-node"), st.sampled_from(NODES)),
)


def start_ledger() -> UsageLedger:
    ledger = UsageLedger(memory_overcommit={"acme": 1.5})
    for n in NODES[:2]:
        ledger.set_node(n, devices(n), cpu_milli=16000, memory_mib=64000)
    return ledger


def apply_op(ledger: UsageLedger, op: Any) -> None:
    kind = op[0]
    if kind == "add":
        _, k, (node, slices, cpu, mem), reserved = op
        a = assignment(node, [(f"{node}-acme-{i}", m, c, x, init) for i, m, c, x, init in slices])
        ledger.add(f"p{k}", a, cpu_milli=cpu, memory_mib=mem, reserved=reserved)
    elif kind == "remove":
        ledger.remove(f"p{op[1]}")
    elif kind == "release":
        ledger.release(f"p{op[1]}")
    elif kind == "confirm":
        ledger.confirm(f"p{op[1]}")
    elif kind == "node":
        ledger.set_node(op[1], devices(op[1], op[2]), cpu_milli=16000)
    else:
        ledger.remove_node(op[1])


@settings(max_examples=150, deadline=None)
@given(st.lists(op_st, max_size=40))
def test_any_sequence_of_changes_equals_a_recount(ops: list[Any]) -> None:
    ledger = start_ledger()
    for op in ops:
        apply_op(ledger, op)
        assert ledger.snapshot() == ledger.recount()


# -- property: a mirror kept from take_changes equals one built from scratch -----------------


def facts(ledger: UsageLedger) -> dict[str, Any]:
    """Every node's state as a reader of per-node facts sees it (the object itself too:
    scheduler/candidates.py keeps it)."""
    counted = audit.snapshot(ledger.nodes)
    return {
        name: (
            id(state),
            state.version,
            state.cpu_free,
            state.memory_free,
            state.state_id(),
            sorted(state.labels.items()),
            counted[name],
        )
        for name, state in ledger.nodes.items()
    }


def sync_mirror(ledger: UsageLedger, mirror: dict[str, Any]) -> None:
    """Bring *mirror* up to date from the names take_changes returns only."""
    now = facts(ledger)
    for name in ledger.take_changes():
        if name in now:
            mirror[name] = now[name]
        else:
            mirror.pop(name, None)


def check_rows(ledger: UsageLedger, rows: CandidateRows) -> None:
    """Each node's row says what the node says now; a removed node's row answers as a name
    the ledger does not know."""
    sids = rows.vendor("acme")
    assert set(ledger.nodes) <= set(rows.rows)
    for name, row in rows.rows.items():
        state = ledger.nodes.get(name)
        if state is None:
            assert sids[row] == UNKNOWN
            continue
        table = state.tables.get("acme")
        assert sids[row] == (NO_TABLE if table is None else table.state_id())
        cpu, memory = state.cpu_free, state.memory_free
        assert rows.cpu_free[row] == (UNBOUNDED if cpu is None else cpu)
        assert rows.memory_free[row] == (UNBOUNDED if memory is None else memory)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(op_st, max_size=6), max_size=12))
def test_a_mirror_kept_from_take_changes_equals_one_built_from_scratch(
    batches: list[list[Any]],
) -> None:
    """Whatever happened between two reads (a node added, changed, removed, a placeholder
    node made or emptied by its last pod), the names take_changes returns are enough to
    bring a mirror up to date: removed names are absent from ``nodes``, changed ones present.
    The same sequence on a second ledger checks the real reader, the candidates' rows."""
    ledger, other = start_ledger(), start_ledger()
    ledger.track_changes()
    mirror: dict[str, Any] = {}
    rows = CandidateRows(other)
    for batch in batches:
        for op in batch:
            apply_op(ledger, op)
            apply_op(other, op)
        sync_mirror(ledger, mirror)
        assert mirror == facts(ledger)
        rows.sync()
        check_rows(other, rows)
