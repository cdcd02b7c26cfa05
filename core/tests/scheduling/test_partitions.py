"""The partition geometry against hand-worked A100 cases (slices 0-7, 1g cannot start at 7)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from xpushare.models import Device, PartitionPlacement, PartitionProfile
from xpushare.scheduling.partitions import (
    Geometry,
    geometry_of,
    is_dynamic,
    parse_slot,
    slot_name,
)
from xpushare.testing.partitions import A100_40GB, A100_80GB, profiles

P80 = profiles(A100_80GB)
P40 = profiles(A100_40GB)


def geo(table: tuple[PartitionProfile, ...] = P80) -> Geometry:
    found = geometry_of(table)
    assert found is not None
    return found


def book(g: Geometry, names: list[str]) -> list[str]:
    """Books one instance per profile name, as the fit would; returns the booked names."""
    booked: list[str] = []
    for name in names:
        chosen = g.choose(0, 0, g.occupancy(booked), named=name)
        assert chosen is not None, f"{name} after {booked}"
        booked.append(slot_name(chosen[0].name, chosen[1]))
    return booked


def test_seven_1g_10gb_fill_an_a100_80gb_and_an_eighth_does_not_fit() -> None:
    g = geo()
    booked = book(g, ["1g.10gb"] * 7)
    assert sorted(parse_slot(b)[1] for b in booked) == [0, 1, 2, 3, 4, 5, 6]  # type: ignore[index]
    occ = g.occupancy(booked)
    assert g.choose(0, 0, occ, named="1g.10gb") is None
    assert g.fits_left(occ) == ()
    assert g.free_fraction(occ) == 0.0
    # Slice 7 stays free, but no profile can use it: it counts as nothing.
    assert occ.mask == 0b0111_1111


def test_the_first_1g_goes_last_so_that_4g_stays_possible() -> None:
    g = geo()
    (first,) = book(g, ["1g.10gb"])
    assert first == "1g.10gb@6"
    assert g.choose(0, 0, g.occupancy([first]), named="4g.40gb") == (g.by_name["4g.40gb"], 0)


@pytest.mark.parametrize(
    ("sequence", "expected"),
    [
        # 3g at 4 keeps 4g at 0 possible; 2g then at 0 (tie with 2, lowest wins); 1g at 2, 3.
        (
            ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
            ["3g.40gb@4", "2g.20gb@0", "1g.10gb@2", "1g.10gb@3"],
        ),
        (["4g.40gb", "3g.40gb"], ["4g.40gb@0", "3g.40gb@4"]),
        (["3g.40gb", "3g.40gb"], ["3g.40gb@4", "3g.40gb@0"]),
        # The first 2g at 4, not HAMi's lowest start: at 0 it would block 4g.
        (
            ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"],
            ["2g.20gb@4", "2g.20gb@0", "2g.20gb@2", "1g.10gb@6"],
        ),
    ],
)
def test_combinations_that_fill_the_gpu(sequence: list[str], expected: list[str]) -> None:
    g = geo()
    booked = book(g, sequence)
    assert booked == expected
    occ = g.occupancy(booked)
    assert occ.compute == 7 or sequence == ["3g.40gb", "3g.40gb"]
    assert g.choose(0, 0, occ, named="1g.10gb") is None


def test_3g_2g_1g_leave_exactly_one_1g() -> None:
    g = geo()
    booked = book(g, ["3g.40gb", "2g.20gb", "1g.10gb"])
    left = {s.name for s in g.fits_left(g.occupancy(booked))}
    assert left == {"1g.10gb", "1g.10gb+me"}


def test_a_1g_at_slice_0_blocks_4g_and_7g_but_not_3g() -> None:
    g = geo()
    occ = g.occupancy(["1g.10gb@0"])
    assert g.choose(0, 0, occ, named="4g.40gb") is None
    assert g.choose(0, 0, occ, named="7g.80gb") is None
    assert g.choose(0, 0, occ, named="3g.40gb") == (g.by_name["3g.40gb"], 4)
    # By memory: 40 GiB asked, 3g.40gb is the smallest that holds it and fits.
    shape, start = g.choose(40000, 0, occ)  # type: ignore[misc]
    assert (shape.name, start) == ("3g.40gb", 4)
    assert g.room(occ)[0] == 3


def test_the_smallest_profile_that_holds_memory_and_compute() -> None:
    g = geo()
    empty = g.occupancy([])
    assert g.choose(8000, 0, empty)[0].name == "1g.10gb"  # type: ignore[index]
    assert g.choose(12000, 0, empty)[0].name == "1g.20gb"  # type: ignore[index]
    assert g.choose(8000, 30, empty)[0].name == "3g.40gb"  # type: ignore[index]  # 2g is 26 %
    assert g.choose(90000, 0, empty) is None
    # The smallest is full: the next that holds the request is taken.
    full_1g20 = book(g, ["1g.20gb"] * 4)
    assert g.choose(12000, 0, g.occupancy(full_1g20)) is None  # every slice pair is taken
    occ = g.occupancy(["1g.20gb@0", "1g.20gb@2", "1g.20gb@4"])
    assert g.choose(12000, 0, occ) == (g.by_name["1g.20gb"], 6)


def test_instance_counts_are_enforced_beyond_overlap() -> None:
    g = geo()
    occ = g.occupancy(["1g.10gb+me@0"])
    assert g.choose(0, 0, occ, named="1g.10gb+me") is None  # one media-engine instance only
    assert g.choose(0, 0, occ, named="1g.10gb") is not None


def test_a100_40gb_geometry_is_the_same_with_its_names() -> None:
    g = geo(P40)
    assert book(g, ["4g.20gb", "3g.20gb"]) == ["4g.20gb@0", "3g.20gb@4"]
    assert len(book(g, ["1g.5gb"] * 7)) == 7
    assert g.compute_slices == 7 and g.slices == 8


@pytest.mark.parametrize(
    "bad",
    ["3g.40gb@1", "nope@0", "3g.40gb", "1g.10gb@99", "x" * 200, "1g.10gb@-1", "@3"],
)
def test_a_booked_name_the_geometry_cannot_place_makes_the_device_full(bad: str) -> None:
    g = geo()
    occ = g.occupancy([bad])
    assert occ.broken == bad
    assert g.fits_left(occ) == ()


def test_overlapping_bookings_make_the_device_full() -> None:
    g = geo()
    occ = g.occupancy(["4g.40gb@0", "2g.20gb@2"])
    assert occ.broken in ("4g.40gb@0", "2g.20gb@2")  # one of the two, whichever comes second
    assert g.choose(0, 0, occ, named="3g.40gb") is None


def test_decoding_is_shared_by_tables_alike() -> None:
    first = geometry_of(P80)
    assert geometry_of(P80) is first
    copy = tuple(p.model_copy() for p in P80)  # another node's table of the same GPU model
    assert geometry_of(copy) is first
    assert geometry_of(P40) is not first


def test_static_profiles_have_no_geometry() -> None:
    static = (PartitionProfile(name="1g.10gb", memory_mib=9728, compute_percent=13, max_count=2),)
    assert geometry_of(static) is None
    assert not is_dynamic(static)
    assert is_dynamic(P80)


def test_hostile_geometry_is_refused_at_the_model() -> None:
    with pytest.raises(ValidationError, match="ends past slice"):
        PartitionPlacement(start=60, size=8)
    with pytest.raises(ValidationError):
        PartitionProfile(
            name="x",
            memory_mib=1,
            compute_percent=1,
            placements=tuple(PartitionPlacement(start=0, size=1) for _ in range(65)),
        )
    with pytest.raises(ValidationError):
        Device(
            vendor="nvidia",
            id="g",
            index=0,
            model="m",
            memory_mib=1,
            partitions=tuple(P80[0].model_copy(update={"name": f"p{i}"}) for i in range(65)),
        )


def test_a_node_annotation_with_hostile_geometry_is_refused_whole() -> None:
    """Through the inventory codec, as the scheduler reads a node: a table past the bounds is
    an error naming the field, not a slow decode or a geometry built from it."""
    from xpushare.codec import decode_inventory, encode_inventory, inventory_key
    from xpushare.errors import CodecError

    device = Device(
        vendor="nvidia", id="GPU-0", index=0, model="A100", memory_mib=81920, partitions=P80
    )
    good = decode_inventory(inventory_key("nvidia"), encode_inventory("nvidia", "n1", [device]))
    (back,) = good.devices
    assert back.partitions == P80 and geometry_of(back.partitions) is geometry_of(P80)
    text = encode_inventory("nvidia", "n1", [device])
    many = ", ".join('{"start": 0, "size": 1}' for _ in range(65))
    hostile = text.replace('"placements":[{"start":0,"size":1}', f'"placements":[{many}', 1)
    assert hostile != text
    with pytest.raises(CodecError, match="placements"):
        decode_inventory(inventory_key("nvidia"), hostile)
