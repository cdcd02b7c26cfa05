"""DRS instances cut at Allocate and destroyed at release, through a fake efsmi (a real process).

The fake keeps each GCU's DRS state and instances in a file, so each test asserts what
Enflame's tool was asked to do and what the GCU holds afterwards, as Enflame's device plugin
leaves it: DRS on, one instance of the container's profile, ``TOPS_VISIBLE_DEVICES`` naming
it; after the pod, no instance and DRS off.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from enflame_fakes import FakeEfsmi

from xpushare.errors import VendorUnavailable
from xpushare.models import (
    AllocatedContainer,
    AllocateRequest,
    DeviceSlice,
    PodRef,
    ReleaseRequest,
)
from xpushare_others.enflame.efsmi import Efsmi, EfsmiError, parse_instances

POD = PodRef(namespace="ml", name="p", uid="u1")


def _drs(enflame: Any, **config: Any) -> tuple[Any, Any]:
    handle = enflame("enflame-drs", **config)
    handle.startup()
    return handle, handle.detect()


def _alloc(devices: Any, index: int, profile: str, container: str = "main") -> AllocateRequest:
    memory = {"1g.6gb": 6144, "3g.20gb": 20480, "6g.40gb": 40960}[profile]
    piece = DeviceSlice(
        device_id=devices[index].id,
        index=index,
        memory_mib=memory,
        compute_percent=50,
        partition=profile,
    )
    return AllocateRequest(
        pod=POD,
        container=container,
        node="node-a",
        resource_name="enflame.com/drs-gcu",
        slices=(piece,),
        devices=(devices[index],),
    )


def _release(*containers: tuple[AllocateRequest, dict[str, str] | None]) -> ReleaseRequest:
    return ReleaseRequest(
        pod=POD,
        node="node-a",
        containers=tuple(
            AllocatedContainer(container=r.container, slices=r.slices, record=rec)
            for r, rec in containers
        ),
    )


def test_allocate_cuts_an_instance_of_the_profile_as_enflames_plugin_does(
    table: Any, enflame: Any, efsmi: FakeEfsmi, tmp_path: Path
) -> None:
    handle, devices = _drs(enflame)
    efsmi.forget_calls()  # detection listed the profiles
    result = handle.allocate(_alloc(devices, 2, "3g.20gb"))
    [made] = efsmi.instances(2)
    assert made["profile"] == "3g.20gb" and efsmi.drs_on(2)
    assert result.envs["TOPS_VISIBLE_DEVICES"] == f"DRS-{made['uuid']}"
    assert result.envs["XPUSHARE_ENFLAME_DRS_INSTANCE"] == made["id"]
    assert result.envs["ENFLAME_VISIBLE_DEVICES"] == "2"
    assert result.record == {
        "gcu": "2",
        "profile": "3g.20gb",
        "instance": made["id"],
        "uuid": made["uuid"],
    }
    # Enflame's sequence: DRS on, list, create by profile id, list again to find the new one.
    assert efsmi.calls() == [
        ["-i", "2", "--drs", "on"],
        ["-i", "2", "-L"],
        ["-i", "2", "--drs", "--create-instance", "1"],
        ["-i", "2", "-L"],
    ]
    state = json.loads((tmp_path / "drs-state" / "u1_main.json").read_text())
    assert state["instance"] == made["id"] and state["gcu"] == 2

    # kubelet allocating the same container again gets the same instance, not a second one.
    again = handle.allocate(_alloc(devices, 2, "3g.20gb"))
    assert again.envs["TOPS_VISIBLE_DEVICES"] == result.envs["TOPS_VISIBLE_DEVICES"]
    assert len(efsmi.instances(2)) == 1


def test_release_destroys_the_instance_and_turns_drs_off_when_none_is_left(
    table: Any, enflame: Any, efsmi: FakeEfsmi, tmp_path: Path
) -> None:
    handle, devices = _drs(enflame)
    first = _alloc(devices, 0, "1g.6gb", "a")
    second = _alloc(devices, 0, "3g.20gb", "b")
    a = handle.allocate(first)
    b = handle.allocate(second)
    assert len(efsmi.instances(0)) == 2

    handle.release(_release((first, a.record)))
    assert [i["profile"] for i in efsmi.instances(0)] == ["3g.20gb"]
    assert efsmi.drs_on(0)  # another container's instance is still there
    handle.release(_release((second, b.record)))
    assert efsmi.instances(0) == [] and not efsmi.drs_on(0)
    assert not list((tmp_path / "drs-state").glob("*.json"))
    handle.release(_release((first, a.record), (second, b.record)))  # at least once: repeatable


def test_release_without_a_record_finds_the_instance_by_the_containers_state_file(
    table: Any, enflame: Any, efsmi: FakeEfsmi, tmp_path: Path
) -> None:
    handle, devices = _drs(enflame)
    other = handle.allocate(_alloc(devices, 1, "1g.6gb", "other"))
    mine = _alloc(devices, 1, "1g.6gb", "main")
    handle.allocate(mine)
    # The agent stopped before noting the instance: its state file holds only the listing
    # taken before the creation.
    path = tmp_path / "drs-state" / "u1_main.json"
    state = json.loads(path.read_text())
    path.write_text(json.dumps({k: state[k] for k in ("gcu", "profile", "before")}))

    handle.release(_release((mine, None)))
    # The new 1g.6gb instance is destroyed; the one "other" holds (same profile) is not.
    assert [i["id"] for i in efsmi.instances(1)] == [other.record["instance"]]
    assert not path.exists()


def test_a_failed_cut_names_the_pod_the_gcu_and_the_profile_and_leaves_nothing(
    table: Any, enflame: Any, efsmi: FakeEfsmi, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle, devices = _drs(enflame)
    request = _alloc(devices, 3, "6g.40gb")
    monkeypatch.setenv("FAKE_EFSMI_FAIL", "create")
    with pytest.raises(
        Exception,
        match=r"pod ml/p, container 'main'.*DRS instance 6g\.40gb on "
        r"Enflame GCU 3 failed.*create-instance 2.*status 1",
    ):
        handle.allocate(request)
    monkeypatch.delenv("FAKE_EFSMI_FAIL")
    handle.release(_release((request, None)))
    assert efsmi.instances(3) == [] and not efsmi.drs_on(3)


def test_a_failed_destroy_raises_so_the_agent_retries(
    table: Any, enflame: Any, efsmi: FakeEfsmi, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle, devices = _drs(enflame)
    request = _alloc(devices, 0, "1g.6gb")
    made = handle.allocate(request)
    monkeypatch.setenv("FAKE_EFSMI_FAIL", "destroy")
    with pytest.raises(Exception, match=r"ml/p.*'main'.*destroying its Enflame DRS instance"):
        handle.release(_release((request, made.record)))
    monkeypatch.delenv("FAKE_EFSMI_FAIL")
    handle.release(_release((request, made.record)))
    assert efsmi.instances(0) == []


def test_without_efsmi_the_drs_vendor_is_inactive_unless_cutting_is_off(
    table: Any, enflame: Any, efsmi: FakeEfsmi, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-efsmi")
    with pytest.raises(VendorUnavailable, match=r"efsmi .*no-efsmi.* not on the node agent's"):
        enflame("enflame-drs", efsmi_path=missing).startup()
    handle, devices = _drs(enflame, efsmi_path=missing, drs_cut=False)
    envs = handle.allocate(_alloc(devices, 0, "1g.6gb")).envs
    assert "TOPS_VISIBLE_DEVICES" not in envs and envs["XPUSHARE_ENFLAME_DRS_PROFILE"] == "1g.6gb"
    # Whole GCUs never need efsmi.
    enflame("enflame", efsmi_path=missing).startup()


def test_efsmi_output_is_parsed_as_untrusted_text() -> None:
    text = "\n".join(
        [
            "| GCU Profile Instance UUID |",
            "| 0  3g.20gb  2  7325501d-02bd-4da2-9289-24d8521736b9 |",
            "| 0  3g.20gb  x  7325501d |",  # id not a number
            "| 3g.20gb  4  abc |",  # no GCU index before the profile
            "| 1  1g.6gb  5  $(rm -rf) |",  # not a UUID
            "1 6g.40gb 7 ab-cd",
        ]
    )
    assert [(i.gcu, i.profile, i.id, i.uuid) for i in parse_instances(text)] == [
        (0, "3g.20gb", "2", "7325501d-02bd-4da2-9289-24d8521736b9"),
        (1, "6g.40gb", "7", "ab-cd"),
    ]
    with pytest.raises(EfsmiError, match="profile id '1; reboot' of GCU 0 is not a number"):
        Efsmi("efsmi", 1.0).create(0, "1; reboot")


def test_an_efsmi_that_hangs_is_stopped_at_its_time_limit(tmp_path: Path) -> None:
    hang = tmp_path / "efsmi"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    with pytest.raises(EfsmiError, match=r"`efsmi -i 0 -L` did not finish within 0.2 s"):
        Efsmi(str(hang), 0.2).instances(0)


def test_a_container_allocated_again_with_another_profile_keeps_only_the_new_instance(
    table: Any, enflame: Any, efsmi: FakeEfsmi
) -> None:
    handle, devices = _drs(enflame)
    first = handle.allocate(_alloc(devices, 1, "1g.6gb"))
    again = handle.allocate(_alloc(devices, 1, "3g.20gb"))
    assert [i["profile"] for i in efsmi.instances(1)] == ["3g.20gb"]
    assert again.record["instance"] != first.record["instance"]


def test_release_destroys_every_instance_a_container_may_hold(
    table: Any, enflame: Any, efsmi: FakeEfsmi
) -> None:
    handle, devices = _drs(enflame)
    older = _alloc(devices, 2, "1g.6gb")
    made = handle.allocate(older)
    # kubelet allocated the container again on another GCU; that Allocate's record was lost.
    newer = _alloc(devices, 3, "1g.6gb")
    handle.allocate(newer)
    assert efsmi.instances(2) == [] and len(efsmi.instances(3)) == 1
    efsmi_state = efsmi.state()
    efsmi_state["gcus"]["2"]["instances"].append(  # an instance the older record names again
        {"profile": "1g.6gb", "id": made.record["instance"], "uuid": "old", "slices": 1}
    )
    efsmi.save(efsmi_state)
    handle.release(_release((older, made.record), (newer, None)))
    assert efsmi.instances(2) == [] and efsmi.instances(3) == []


def test_an_efsmi_that_floods_its_output_is_read_to_the_end_and_cut_short(
    tmp_path: Path,
) -> None:
    flood = tmp_path / "efsmi"
    flood.write_text("#!/bin/sh\nyes '| 0 3g.20gb 1 abc |' | head -c 3000000\n")
    flood.chmod(0o755)
    text = Efsmi(str(flood), 30.0).run("-i", "0", "-L")
    assert len(text) == 1 << 20  # kept: the first MiB; the rest was read and dropped
    assert len(parse_instances(text)) == 256  # at most MAX_ROWS rows are taken
