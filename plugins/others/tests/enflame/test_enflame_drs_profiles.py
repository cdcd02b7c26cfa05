"""DRS profiles read from each GCU with efsmi at detection, through the fake efsmi (a process).

The fake lists each GCU's profiles as Enflame's device plugin parses them, only while DRS is
on; a test gives one GCU profiles of its own, so what the node publishes, what the fit picks
and what Allocate cuts can only be right if they came from efsmi and not from the settings.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from enflame_fakes import FakeEfsmi

from xpushare.models import (
    AllocateRequest,
    ContainerView,
    NodeView,
    PodRef,
    PodView,
)
from xpushare_others.enflame.efsmi import (
    MAX_LISTED_PROFILES,
    MAX_LISTING,
    EfsmiError,
    ListedProfile,
    parse_profiles,
)

#: GCU 1 of these tests: a card of 8 slices whose profiles the settings do not know.
GCU1_PROFILES = {"4": ["2g.12gb", 2], "5": ["4g.24gb", 4], "9": ["8g.48gb", 8]}


def _started(enflame: Any, **config: Any) -> Any:
    handle = enflame("enflame-drs", **config)
    handle.startup()
    return handle


def _warnings(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def _ask(handle: Any, slices: int) -> Any:
    c = ContainerView(name="main", limits={"enflame.com/drs-gcu": str(slices)})
    pod = PodView(ref=PodRef(name="p", namespace="ml", uid="u1"), containers=(c,))
    return handle.resource_request(pod=pod, container=c)


def test_each_gcu_publishes_the_profiles_efsmi_lists_for_it(
    table: Any, enflame: Any, efsmi: FakeEfsmi, caplog: pytest.LogCaptureFixture
) -> None:
    efsmi.update(gcu_profiles={"1": GCU1_PROFILES}, gcu_capacity={"1": 8})
    handle = _started(enflame)
    devices = handle.detect()
    gcu0, gcu1 = devices[0], devices[1]
    assert gcu1.extra["drs-profiles-from"] == "efsmi" and gcu1.extra["drs-capacity"] == "8"
    assert gcu1.share_slots == 8 and gcu1.memory_mib == 48 * 1024
    # max_count is efsmi's instance count; compute the share of the largest profile's slices.
    assert [(p.name, p.memory_mib, p.compute_percent, p.max_count) for p in gcu1.partitions] == [
        ("2g.12gb", 12 * 1024, 25, 4),
        ("4g.24gb", 24 * 1024, 50, 2),
        ("8g.48gb", 48 * 1024, 100, 1),
    ]
    assert {k: v for k, v in gcu1.extra.items() if k.startswith("drs-profile-id/")} == {
        "drs-profile-id/2g.12gb": "4",
        "drs-profile-id/4g.24gb": "5",
        "drs-profile-id/8g.48gb": "9",
    }
    assert gcu0.extra["drs-profiles-from"] == "efsmi"
    assert [p.name for p in gcu0.partitions] == ["1g.6gb", "3g.20gb", "6g.40gb"]
    assert not _warnings(caplog)
    # Enflame's way: DRS turned on to list, and off again on a GCU holding no instance.
    assert ["-i", "1", "--drs", "on"] in efsmi.calls()
    assert not any(efsmi.drs_on(g) for g in range(4))

    # The listing is kept: the agent's next detection runs efsmi no more.
    efsmi.forget_calls()
    assert handle.detect() == devices
    assert efsmi.calls() == []


def test_the_fit_and_allocate_use_what_the_gcu_offers(
    table: Any, enflame: Any, efsmi: FakeEfsmi
) -> None:
    efsmi.update(gcu_profiles={"1": GCU1_PROFILES}, gcu_capacity={"1": 8})
    handle = _started(enflame)
    devices = tuple(handle.detect())
    node = NodeView(name="node-a", devices=devices)

    # 8 slices: only GCU 1 has such a profile (the settings' largest has 6).
    fit = handle.fit(request=_ask(handle, 8), node=node, usage={}, device_order=())
    assert fit.fits
    [piece] = fit.devices
    assert piece.device_id == devices[1].id and piece.partition == "8g.48gb"
    assert piece.memory_mib == 48 * 1024 and piece.exclusive

    # 4 slices: no GCU of the settings' profiles has it either; GCU 1's id 5 is cut.
    fit = handle.fit(request=_ask(handle, 4), node=node, usage={}, device_order=())
    [piece] = fit.devices
    assert piece.device_id == devices[1].id and piece.partition == "4g.24gb"
    result = handle.allocate(
        AllocateRequest(
            pod=PodRef(namespace="ml", name="p", uid="u1"),
            container="main",
            node="node-a",
            resource_name="enflame.com/drs-gcu",
            slices=(piece,),
            devices=(devices[1],),
        )
    )
    [made] = efsmi.instances(1)
    assert made["profile"] == "4g.24gb"
    assert ["-i", "1", "--drs", "--create-instance", "5"] in efsmi.calls()
    assert result.envs["XPUSHARE_ENFLAME_DRS_PROFILE_ID"] == "5"

    # 5 slices: offered by no GCU, refused naming the profiles there are.
    fit = handle.fit(request=_ask(handle, 5), node=node, usage={}, device_order=())
    assert not fit.fits


@pytest.mark.parametrize(
    ("listing", "refusal"),
    [
        ("| 0  1g.6gb  x  6  6GB  2 |\n", r"profile id of GCU 0 that is not a number"),
        ("| 0  1g.6gb  0  0  6GB  2 |\n", r"instance count of GCU 0 that is not 1 to 1024"),
        ("| 0  1g.6gb |\n", r"GCU 0 has no profile id and instance count"),
        ("| 0 1g.6gb 0 6 |\n| 0 1g.6gb 1 6 |\n", r"lists DRS profile 1g.6gb of GCU 0 twice"),
        ("|" + " " * (MAX_LISTING + 10) + "|\n", rf"more than the {MAX_LISTING} its table"),
    ],
)
def test_a_bad_or_oversized_listing_is_refused_and_the_settings_used(
    table: Any,
    enflame: Any,
    efsmi: FakeEfsmi,
    caplog: pytest.LogCaptureFixture,
    listing: str,
    refusal: str,
) -> None:
    efsmi.update(listing={"0": listing})
    devices = _started(enflame).detect()
    assert devices[0].extra["drs-profiles-from"] == "settings"
    assert [p.name for p in devices[0].partitions] == ["1g.6gb", "3g.20gb", "6g.40gb"]
    assert devices[1].extra["drs-profiles-from"] == "efsmi"
    warned = _warnings(caplog)
    assert "Enflame GCU 0 (T6R000000000): its DRS profiles could not be read" in warned
    assert re.search(refusal, warned), warned
    assert not efsmi.drs_on(0)  # turned on to list, off again: no instance there


def test_a_failing_efsmi_falls_back_and_is_tried_again(
    table: Any,
    enflame: Any,
    efsmi: FakeEfsmi,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_EFSMI_FAIL", "profiles")
    handle = _started(enflame)
    devices = handle.detect()
    assert {d.extra["drs-profiles-from"] for d in devices} == {"settings"}
    assert "DRS is not enabled on device 3" in _warnings(caplog)
    # A failure is not kept: the next detection reads efsmi again.
    monkeypatch.delenv("FAKE_EFSMI_FAIL")
    efsmi.update(gcu_profiles={"3": GCU1_PROFILES}, gcu_capacity={"3": 8})
    again = handle.detect()
    assert again[3].extra["drs-profiles-from"] == "efsmi"
    assert [p.name for p in again[3].partitions] == ["2g.12gb", "4g.24gb", "8g.48gb"]


def test_profiles_in_the_settings_override_efsmi_and_each_difference_is_logged(
    table: Any, enflame: Any, efsmi: FakeEfsmi, caplog: pytest.LogCaptureFixture
) -> None:
    handle = _started(enflame, drs_profiles={"1g.6gb": "0", "3g.20gb": "7", "2g.12gb": "3"})
    gcu = handle.detect()[2]
    assert gcu.extra["drs-profiles-from"] == "settings"
    assert [p.name for p in gcu.partitions] == ["1g.6gb", "2g.12gb", "3g.20gb"]
    assert gcu.extra["drs-profile-id/3g.20gb"] == "7"
    warned = _warnings(caplog)
    who = "Enflame GCU 2 (T6R000000002)"
    assert (
        f"{who}: DRS profile 3g.20gb has id 7 in the settings' drs_profiles, efsmi lists id 1"
        in warned
    )
    assert f"{who}: DRS profile 2g.12gb of the settings' drs_profiles is not listed" in warned
    assert f"{who}: efsmi lists DRS profile 6g.40gb (id 2), which the settings'" in warned
    assert f"{who}: DRS profile 1g.6gb" not in warned  # the same in both: nothing to say


def test_without_efsmi_a_booking_only_node_uses_the_settings(
    table: Any, enflame: Any, caplog: pytest.LogCaptureFixture
) -> None:
    devices = _started(enflame, drs_cut=False, efsmi_path="/nonexistent/efsmi").detect()
    assert {d.extra["drs-profiles-from"] for d in devices} == {"settings"}
    assert not _warnings(caplog)


def test_the_parser_reads_enflames_row_shape_and_bounds_the_listing() -> None:
    text = (
        "+------------------------------------------+\n"
        "| Index  Profile   ID  Count  Memory  SIP  |\n"
        "| 0      1G.6GB    0   6      6GB     2    |\n"
        "| 0      3g.20gb   1   2      20GB    6    |\n"
        "+------------------------------------------+\n"
    )
    assert parse_profiles(text, 0) == [
        ListedProfile("1g.6gb", "0", 6),
        ListedProfile("3g.20gb", "1", 2),
    ]
    many = "".join(f"| 0 {i}g.{i}gb {i} 1 |\n" for i in range(1, MAX_LISTED_PROFILES + 2))
    with pytest.raises(EfsmiError, match=rf"more than {MAX_LISTED_PROFILES} DRS profiles"):
        parse_profiles(many, 0)
