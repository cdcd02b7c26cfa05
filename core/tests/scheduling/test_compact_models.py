"""Long-lived models share their field sets and repeated strings, and read exactly the same."""

from __future__ import annotations

import gc
import tracemalloc

from xpushare.codec import decode_inventory, encode_inventory, inventory_key
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.models._compact import compact
from xpushare.plugins.builtin.mock import parse_spec
from xpushare.scheduling import UsageLedger


def _inventories(n: int) -> list[str]:
    return [
        encode_inventory("mock", f"node-{i:05d}", parse_spec("8x A100-80GB", f"node-{i:05d}"))
        for i in range(n)
    ]


def test_compacted_devices_read_the_same_and_share_what_repeats() -> None:
    texts = _inventories(2)
    a = decode_inventory(inventory_key("mock"), texts[0]).devices
    b = decode_inventory(inventory_key("mock"), texts[1]).devices
    before = [d.model_dump() for d in (*a, *b)]
    for d in (*a, *b):
        compact(d)
    assert [d.model_dump() for d in (*a, *b)] == before
    assert a[0].model_fields_set is b[1].model_fields_set
    assert a[0].model is b[1].model and a[0].pci_bus_id is b[0].pci_bus_id
    # A copy with changes gets its own set: the shared one is never written.
    shared = set(a[0].model_fields_set)
    changed = a[0].model_copy(update={"healthy": False})
    assert changed.healthy is False and a[0].healthy is True
    assert a[1].model_fields_set == shared


def test_compacting_saves_memory_on_every_device() -> None:
    texts = _inventories(500)
    gc.collect()
    tracemalloc.start()
    try:
        kept = [decode_inventory(inventory_key("mock"), t).devices for t in texts]
        gc.collect()
        plain, _ = tracemalloc.get_traced_memory()
        for devices in kept:
            for d in devices:
                compact(d)
        gc.collect()
        compacted, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    saved = (plain - compacted) / 4000
    assert saved > 400, f"{saved:.0f} bytes saved a device"


def test_the_ledger_keeps_compacted_inventories_and_assignments() -> None:
    ledger = UsageLedger()
    devices = decode_inventory(inventory_key("mock"), _inventories(1)[0]).devices
    ledger.set_node("node-00000", devices)
    piece = DeviceSlice(device_id=devices[0].id, index=0, memory_mib=1000, compute_percent=10)
    one = PodAssignment(
        node="node-00000",
        containers=(ContainerAssignment(container="main", vendor="mock", devices=(piece,)),),
    )
    other = one.model_copy(deep=True)
    ledger.add("p1", one)
    ledger.add("p2", other)
    kept = ledger.devices("node-00000", "mock")
    assert kept == devices
    assert kept[0].model_fields_set is kept[1].model_fields_set
    p1, p2 = ledger.entry("p1"), ledger.entry("p2")
    assert p1 is not None and p2 is not None
    assert p1.assignment == p2.assignment
    c1, c2 = p1.assignment.containers[0], p2.assignment.containers[0]  # type: ignore[union-attr]
    assert c1.model_fields_set is c2.model_fields_set and c1.container is c2.container
