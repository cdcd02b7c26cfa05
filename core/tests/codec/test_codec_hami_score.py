"""HAMi's GPU pair scores (hami.io/node-nvidia-score) read back as the links they sum."""

from __future__ import annotations

import json

import pytest

from xpushare.codec.hami_score import MAX_GPUS, SCORE_KEY, decode_pair_links
from xpushare.errors import CodecError
from xpushare.models import Device, LinkKind, TopologyLink
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduling import UsageLedger

HAMI_REGISTER = json.dumps(
    [
        {
            "id": f"GPU-{c}",
            "index": i,
            "count": 10,
            "devmem": 81920,
            "devcore": 100,
            "type": "NVIDIA A100",
            "health": True,
        }
        for i, c in enumerate("abc")
    ]
)


def test_a_score_splits_into_its_nvlinks_and_its_pcie_level() -> None:
    value = json.dumps(
        [
            {"uuid": "GPU-a", "score": {"GPU-b": 620, "GPU-c": 10, "GPU-a": 999}},
            {"uuid": "GPU-b", "score": {"GPU-a": 600, "GPU-c": 0}},
            {"uuid": "GPU-c", "score": None},
        ]
    )
    links = decode_pair_links(value, node="n")
    assert links["GPU-a"] == (
        TopologyLink(peer="GPU-b", kind=LinkKind.NVLINK, count=6),
        TopologyLink(peer="GPU-b", kind=LinkKind.SAME_NUMA),
        TopologyLink(peer="GPU-c", kind=LinkKind.CROSS_NUMA),
    )
    assert links["GPU-b"] == (TopologyLink(peer="GPU-a", kind=LinkKind.NVLINK, count=6),)
    assert links["GPU-c"] == ()
    assert decode_pair_links("null") == {}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("{}", "must be a JSON list"),
        ("[1]", "element 0 must be an object"),
        ('[{"score": {}}]', "'uuid' must be a non-empty string"),
        ('[{"uuid": "a", "score": {"b": "100"}}]', "must be an integer"),
        ('[{"uuid": "a", "score": {"b": 1.5}}]', "must be an integer"),
        ('[{"uuid": "a", "score": {"b": 75}}]', "75 is no pair score"),
        ('[{"uuid": "a", "score": {"b": -10}}]', "no pair score"),
        ('[{"uuid": "a", "score": {"b": 1900}}]', "no pair score"),
        ('[{"uuid": "a"}, {"uuid": "a"}]', "listed twice"),
        (json.dumps([{"uuid": f"g{i}"} for i in range(MAX_GPUS + 1)]), "at most 64"),
        ("[", "invalid JSON"),
    ],
)
def test_a_malformed_value_is_refused_naming_the_annotation(value: str, words: str) -> None:
    with pytest.raises(CodecError, match=words) as err:
        decode_pair_links(value, node="n")
    assert SCORE_KEY in str(err.value)


def _node(annotations: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "n", "resourceVersion": "1", "annotations": annotations}}


def test_a_node_hami_registered_gets_the_links_of_its_pair_scores() -> None:
    reported: list[str] = []
    ledger = UsageLedger()
    cluster = ClusterState(ledger, report=lambda kind, obj, key, message: reported.append(key))
    score = json.dumps(
        [{"uuid": "GPU-a", "score": {"GPU-b": 200}}, {"uuid": "GPU-b", "score": {"GPU-a": 200}}]
    )
    cluster.apply_node(_node({"hami.io/node-nvidia-register": HAMI_REGISTER, SCORE_KEY: score}))
    devices: dict[str, Device] = {d.id: d for d in ledger.devices("n")}
    assert devices["GPU-a"].links == (TopologyLink(peer="GPU-b", kind=LinkKind.NVLINK, count=2),)
    assert devices["GPU-c"].links == ()
    # A change of the scores alone is seen; a broken value is reported and the node stays.
    node = _node({"hami.io/node-nvidia-register": HAMI_REGISTER, SCORE_KEY: "[{"})
    node["metadata"]["resourceVersion"] = "2"  # type: ignore[index]
    cluster.apply_node(node)
    assert reported == [SCORE_KEY]
    assert {d.id: d.links for d in ledger.devices("n")}["GPU-a"] == ()
    assert len(ledger.devices("n")) == 3
