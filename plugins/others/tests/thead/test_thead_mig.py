"""T-Head MIG: geometry read through the fake HGML, fit, instances cut and destroyed.

The fake HGML (compiled from C) keeps its GPU and compute instances in a state file and writes
the driver's capability records with each, and refuses what the hardware refuses (MIG off, an
unknown profile or start, an overlap, a profile at its count, a GPU instance with a compute
instance under it, a compute instance in use). Each test asserts what the PPU holds after.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.models import (
    AllocatedContainer,
    AllocateRequest,
    ContainerView,
    DeviceSlice,
    DeviceUsage,
    NodeView,
    PodRef,
    PodView,
    ReleaseRequest,
)
from xpushare.plugins import VendorHandle

GIB = 1024**3
PPU = "alibabacloud.com/ppu"
#: A 96 GB PPU of 8 memory slices: GPUStack saw 4g48gb (id 5, two) and 8g96gb (id 3, one);
#: 2g24gb (id 9) adds a finer profile, and "~bad" is a name nothing can be made of.
PROFILES = ",".join(
    [
        "0/9/2g24gb/2/2/4/24576/0+2+4+6",
        "2/5/4g48gb/4/4/2/49152/0+4",
        "4/3/8g96gb/8/8/1/98304/0",
        "6/11/~bad/1/1/8/12288/0+1",
    ]
)
CAP_BASE = 229632


def ppu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "uuid": f"PPU-{index}",
        "mem_total": 96 * GIB,
        "mem_used": 0,
        "bus_id": f"00000000:{0x60 + index:02X}:00.0",
        "minor": index + 1,
        "mig": 1,
        "mig_profiles": PROFILES,
    }
    row.update(overrides)
    return row


class Fake:
    """The fake HGML's table, MIG state and capability tree for one test."""

    def __init__(self, table: Any, tmp: Path, host: Path) -> None:
        self.table = table
        self.state = tmp / "mig-state"
        self.caps = tmp / "caps"
        self.dev = host / "dev/alixpu-caps"

    def gis(self) -> list[tuple[int, ...]]:
        """(ppu, gi, profile id, start, size, ci) of each live GPU instance."""
        if not self.state.exists():
            return []
        lines = self.state.read_text().split("\n")
        return sorted(tuple(int(v) for v in line.split()) for line in lines if line.strip())


@pytest.fixture
def fake(
    table_for: Callable[[str], Any],
    tmp_path: Path,
    thead_host: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Fake:
    t = table_for("FAKE_HGML_TABLE")
    t.write(ppu(0), ppu(1, mig=0))
    f = Fake(t, tmp_path, thead_host)
    monkeypatch.setenv("FAKE_HGML_MIG_STATE", str(f.state))
    monkeypatch.setenv("FAKE_HGML_CAPS", str(f.caps))
    monkeypatch.setenv("FAKE_HGML_CAPS_DEV", str(f.dev))
    return f


@pytest.fixture
def mig(thead: Callable[..., VendorHandle], fake: Fake, tmp_path: Path) -> Callable[[], Any]:
    """A started T-Head vendor on the fake (a new one: a node agent restarted)."""

    def make() -> Any:
        handle = thead(capabilities_root=str(fake.caps), journal_dir=str(tmp_path / "journal"))
        handle.startup()
        return handle

    return make


def _ask(handle: Any, uid: str = "u1", profile: str | None = None, **limits: str) -> Any:
    c = ContainerView(name="main", limits={PPU: "1", **limits})
    notes = {"xpushare.io/mig-profile": profile} if profile else {}
    pod = PodView(ref=PodRef(namespace="ml", name="p", uid=uid), annotations=notes, containers=(c,))
    return handle.resource_request(pod=pod, container=c)


def _fit(handle: Any, request: Any, devices: Any, *booked: str) -> Any:
    usage = {
        devices[0].id: DeviceUsage(
            device_id=devices[0].id, used_slots=len(booked), partitions_in_use=booked
        )
    }
    node = NodeView(name="node-a", devices=tuple(devices))
    return handle.fit(request=request, node=node, usage=usage, device_order=())


def _alloc(devices: Any, partition: str, uid: str = "u1", container: str = "main") -> Any:
    profile = partition.split("@")[0]
    memory = {"2g.24gb": 24576, "4g.48gb": 49152, "8g.96gb": 98304}[profile]
    piece = DeviceSlice(
        device_id=devices[0].id, index=0, memory_mib=memory, compute_percent=50, partition=partition
    )
    return AllocateRequest(
        pod=PodRef(namespace="ml", name=f"p-{uid}", uid=uid),
        container=container,
        node="node-a",
        resource_name=PPU,
        slices=(piece,),
        devices=(devices[0],),
    )


def _release(request: AllocateRequest) -> ReleaseRequest:
    return ReleaseRequest(
        pod=request.pod,
        node="node-a",
        containers=(AllocatedContainer(container=request.container, slices=request.slices),),
    )


def test_a_ppu_in_mig_mode_publishes_hgmls_profiles_and_placements(
    mig: Any, fake: Fake, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = mig().detect()
    assert first.mode == "mig" and first.extra["mig_mode"] == "enabled"
    # HGML's "MIG 4g48gb" is published as 4g.48gb; "~bad" is not offered, with a warning.
    assert [(p.name, p.compute_percent, p.max_count, p.memory_mib) for p in first.partitions] == [
        ("2g.24gb", 25, 4, 24576),
        ("4g.48gb", 50, 2, 49152),
        ("8g.96gb", 100, 1, 98304),
    ]
    assert [pl.start for pl in first.partitions[1].placements] == [0, 4]
    assert {pl.size for pl in first.partitions[1].placements} == {4}
    assert first.share_slots == 4
    assert "GPU instance profile id 11 has no usable name" in caplog.text
    # Not in MIG mode: the PPU is shared whole, as before.
    assert second.mode == "shared" and not second.partitions and "mig_mode" not in second.extra


def test_the_fit_places_instances_where_they_overlap_nothing(mig: Any, fake: Fake) -> None:
    handle = mig()
    devices = handle.detect()[:1]
    fit = _fit(handle, _ask(handle, profile="2g24gb"), devices)
    [piece] = fit.devices
    assert piece.partition == "2g.24gb@0" and piece.memory_mib == 24576

    # 2g at 0 taken: a 4g goes where it does not overlap it, at 4.
    fit = _fit(handle, _ask(handle, profile="4g.48gb"), devices, "2g.24gb@0")
    assert [p.partition for p in fit.devices] == ["4g.48gb@4"]
    # Both taken: the PPU-spanning profile fits nowhere, refused naming the profile.
    fit = _fit(handle, _ask(handle, profile="8g.96gb"), devices, "2g.24gb@0", "4g.48gb@4")
    assert not fit.fits and "profile 8g.96gb" in (fit.message or "")
    # No profile named: the smallest holding the memory; the whole PPU: the spanning one.
    fit = _fit(handle, _ask(handle, **{f"{PPU}.sliced.memory-mib": "30000"}), devices)
    assert [p.partition for p in fit.devices] == ["4g.48gb@0"]
    fit = _fit(handle, _ask(handle), devices)
    assert [p.partition for p in fit.devices] == ["8g.96gb@0"]


def test_a_shared_request_takes_a_ppu_not_in_mig_mode_first(mig: Any, fake: Fake) -> None:
    handle = mig()
    devices = handle.detect()
    fit = _fit(handle, _ask(handle, **{f"{PPU}.sliced.memory-mib": "1000"}), devices)
    [piece] = fit.devices
    assert piece.device_id == devices[1].id and piece.partition is None


def test_allocate_cuts_the_instance_and_gives_its_capability_nodes(mig: Any, fake: Fake) -> None:
    handle = mig()
    devices = handle.detect()
    result = handle.allocate(_alloc(devices, "4g.48gb@4"))
    [(ppu_index, gi, profile_id, start, size, ci)] = fake.gis()
    assert (ppu_index, profile_id, start, size, ci) == (0, 5, 4, 4, 0)
    paths = sorted(d.container_path for d in result.devices)
    caps = [f"/dev/alixpu-caps/alixpu-cap{CAP_BASE + 2 * gi + k}" for k in (0, 1)]
    assert paths == sorted(["/dev/alixpu", "/dev/alixpu_ctl", "/dev/alixpu_ppu0", *caps])
    assert result.envs == {"XPUSHARE_THEAD_MIG_INSTANCES": f"4g.48gb@4/{gi}/0"}
    assert not result.mounts  # the hardware enforces the instance: no HGGC shim

    # kubelet allocating the same container again gets the same instance, not a second one
    # (a process runs on it: were it cut again, the old one could not be destroyed).
    fake.table.write(ppu(0, busy_gi=gi), ppu(1, mig=0))
    again = handle.allocate(_alloc(devices, "4g.48gb@4"))
    assert again.envs == result.envs and len(fake.gis()) == 1


def test_release_destroys_the_instance_compute_instance_first(
    mig: Any, fake: Fake, tmp_path: Path
) -> None:
    handle = mig()
    devices = handle.detect()
    request = _alloc(devices, "2g.24gb@2")
    handle.allocate(request)
    [(_, gi, *_rest)] = fake.gis()
    fake.table.write(ppu(0, busy_gi=gi), ppu(1, mig=0))
    with pytest.raises(Exception, match=r"2g.24gb@2 on PPU 0 .*still in use"):
        handle.release(_release(request))
    assert len(fake.gis()) == 1  # kept while a process runs on it, and retried
    fake.table.write(ppu(0), ppu(1, mig=0))
    handle.release(_release(request))
    assert fake.gis() == [] and not list(fake.caps.rglob("access"))
    assert not list((tmp_path / "journal").glob("*.json"))
    handle.release(_release(request))  # at least once: repeatable


def test_an_overlapping_instance_in_use_refuses_the_allocate(mig: Any, fake: Fake) -> None:
    handle = mig()
    devices = handle.detect()
    handle.allocate(_alloc(devices, "4g.48gb@4", uid="a"))
    [(_, gi, *_rest)] = fake.gis()
    fake.table.write(ppu(0, busy_gi=gi), ppu(1, mig=0))
    with pytest.raises(Exception, match=r"4g.48gb@4 .*still in use and overlaps 8g.96gb@0"):
        handle.allocate(_alloc(devices, "8g.96gb@0", uid="b"))
    assert [g[2] for g in fake.gis()] == [5]


def test_restart_neither_leaks_nor_destroys_live_instances(
    mig: Any, fake: Fake, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = mig()
    devices = first.detect()
    live = _alloc(devices, "2g.24gb@0", uid="live")
    ended = _alloc(devices, "4g.48gb@4", uid="ended")
    first.allocate(live)
    first.allocate(ended)
    first.shutdown()

    # The agent comes back: startup and detection destroy nothing.
    second = mig()
    devices = second.detect()
    assert sorted(g[2] for g in fake.gis()) == [5, 9]
    # kubelet allocating the live container again gets its instance back, untouched (it
    # runs a process: cutting it again would have to destroy it first, and could not).
    [live_gi] = [g[1] for g in fake.gis() if g[2] == 9]
    fake.table.write(ppu(0, busy_gi=live_gi), ppu(1, mig=0))
    second.allocate(live)
    assert len(fake.gis()) == 2
    # The ended pod's release (the agent's ledger, without any record) destroys only its own.
    second.release(_release(ended))
    assert [(g[2], g[3]) for g in fake.gis()] == [(9, 0)]


def test_an_instance_cut_short_of_its_record_is_found_and_destroyed(
    mig: Any, fake: Fake, tmp_path: Path
) -> None:
    handle = mig()
    devices = handle.detect()
    request = _alloc(devices, "4g.48gb@0")
    handle.allocate(request)
    # The agent stopped between creating the instance and noting its ids: an intent only.
    [path] = (tmp_path / "journal").glob("*.json")
    path.write_text(
        json.dumps({"v": 1, "instances": [{"ppu": 0, "profile": "4g.48gb", "start": 0}]})
    )
    handle.release(_release(request))
    assert fake.gis() == []


def test_an_ended_pods_stale_instance_gives_way_and_its_release_spares_the_new_one(
    mig: Any, fake: Fake
) -> None:
    handle = mig()
    devices = handle.detect()
    old = _alloc(devices, "4g.48gb@0", uid="old")
    handle.allocate(old)
    # The scheduler gave the slices to a new pod before the old one's release ran.
    new = _alloc(devices, "4g.48gb@0", uid="new")
    handle.allocate(new)
    [(_, gi, profile_id, start, *_)] = fake.gis()
    handle.release(_release(old))
    assert fake.gis() == [(0, gi, profile_id, start, 4, 0)]  # the new pod's, left alone
    handle.release(_release(new))
    assert fake.gis() == []


def test_an_hgml_without_mig_serves_every_ppu_whole(
    fake: Fake,
    thead: Callable[..., VendorHandle],
    compile_fake: Callable[..., Path],
    tmp_path: Path,
) -> None:
    source = Path(__file__).parent / "fake_hgml" / "fake_hgml.c"
    lib = compile_fake(source, tmp_path / "nomig", "libhgml.so", defines=["FAKE_OMIT_MIG"])
    fake.table.write(ppu(0), ppu(1))
    handle = thead(library_path=str(lib))
    handle.startup()
    assert {d.mode for d in handle.detect()} == {"shared"}


def test_a_bad_profile_annotation_is_refused_naming_it(mig: Any, fake: Fake) -> None:
    handle = mig()
    with pytest.raises(Exception, match=r"xpushare.io/mig-profile='~~' is not a MIG profile"):
        _ask(handle, profile="~~")


def test_a_creation_hgml_refuses_fails_the_allocate_and_leaves_no_record(
    mig: Any, fake: Fake, tmp_path: Path
) -> None:
    handle = mig()
    devices = handle.detect()
    fake.table.write(ppu(0, mig=0), ppu(1, mig=0))  # MIG turned off since detection
    with pytest.raises(Exception, match=r"cannot create MIG 4g.48gb at slice 4 on PPU 0"):
        handle.allocate(_alloc(devices, "4g.48gb@4"))
    assert fake.gis() == [] and not list((tmp_path / "journal").glob("*.json"))
    with pytest.raises(Exception, match=r"offers no MIG instance 4g.48gb@2"):
        handle.allocate(_alloc(devices, "4g.48gb@2"))  # not a legal start


def test_a_release_before_detection_keeps_the_record_and_is_retried(
    mig: Any, fake: Fake, tmp_path: Path
) -> None:
    first = mig()
    request = _alloc(first.detect(), "2g.24gb@0")
    first.allocate(request)
    first.shutdown()
    second = mig()  # restarted: its release ledger may call release before it detects
    with pytest.raises(Exception, match=r"not detected yet \(retried later\)"):
        second.release(_release(request))
    assert len(fake.gis()) == 1 and list((tmp_path / "journal").glob("*.json"))
    second.detect()
    second.release(_release(request))
    assert fake.gis() == []
