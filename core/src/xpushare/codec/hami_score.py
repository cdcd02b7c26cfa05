"""Reader of HAMi's GPU pair scores (``hami.io/node-nvidia-score``), as device links.

HAMi's NVIDIA device plugin publishes, when topology scoring is on, a JSON list with one
element per GPU, ``{"uuid": "GPU-a", "score": {"GPU-b": 220, ...}}``
(research/hami-protocol.md §2.3). A pair's score is the sum of its PCIe/board level (10 to
60 points) and 100 points per NVLink, so it splits back into the links it came from: the
hundreds are NVLinks, the rest the level. HAMi's "several PCIe switches" (40) and "one
switch" (50) are one kind here (:attr:`LinkKind.PCIE_SWITCH`). The links are what the
NVIDIA plugin's topology-aware choice reads, so a node HAMi registered is placed with its
NVLinks in mind like one our agent registered.
"""

from typing import Any, Final

from xpushare.codec import _safejson as sj
from xpushare.models import LinkKind, TopologyLink

SCORE_KEY: Final = "hami.io/node-nvidia-score"

_HINT = (
    "check the HAMi NVIDIA device plugin that wrote it (ENABLE_TOPOLOGY_SCORE); the node is "
    "placed without its pair scores meanwhile"
)

#: HAMi's points per PCIe/board level (calculate_score.go), the part of a score below 100.
_LEVELS: Final = {
    60: LinkKind.SAME_BOARD,
    50: LinkKind.PCIE_SWITCH,
    40: LinkKind.PCIE_SWITCH,
    30: LinkKind.PCIE_HOST_BRIDGE,
    20: LinkKind.SAME_NUMA,
    10: LinkKind.CROSS_NUMA,
}
#: 100 points per NVLink; HAMi counts at most 18 links a pair (NVML's NVLink ports).
NVLINK_POINTS: Final = 100
MAX_NVLINKS: Final = 18
#: GPUs, and peers per GPU, read at most (more than any node has).
MAX_GPUS: Final = 64


def decode_pair_links(
    value: str, *, node: str | None = None
) -> dict[str, tuple[TopologyLink, ...]]:
    """Per GPU UUID, its links to its peers, read from a ``hami.io/node-nvidia-score``
    value; :class:`CodecError` names what is wrong. A JSON ``null`` reads as no scores."""
    what = sj.describe(SCORE_KEY, node=node)
    data: Any = sj.load_json(value, what, _HINT)
    if data is None:
        return {}
    if not isinstance(data, list):
        sj.fail(what, f"must be a JSON list, got {sj.json_type(data)}", _HINT)
    if len(data) > MAX_GPUS:
        sj.fail(what, f"{len(data)} GPUs; at most {MAX_GPUS} are read", _HINT)
    out: dict[str, tuple[TopologyLink, ...]] = {}
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            sj.fail(what, f"element {position} must be an object, got {sj.json_type(item)}", _HINT)
        uuid = item.get("uuid")
        scores = item.get("score")
        if not isinstance(uuid, str) or not uuid:
            sj.fail(what, f"element {position}: 'uuid' must be a non-empty string", _HINT)
        if scores is None:
            scores = {}
        if not isinstance(scores, dict) or len(scores) > MAX_GPUS:
            sj.fail(what, f"GPU {uuid}: 'score' must be an object of at most {MAX_GPUS}", _HINT)
        links: list[TopologyLink] = []
        for peer, points in scores.items():
            if peer == uuid or not peer:
                continue
            if type(points) is not int:
                sj.fail(what, f"GPU {uuid}: the score of {peer} must be an integer", _HINT)
            split = _split(points)
            if split is None:
                sj.fail(
                    what,
                    f"GPU {uuid}: {points} is no pair score HAMi writes (100 per NVLink, up to "
                    f"{MAX_NVLINKS}, plus 0 or 10-60 for the PCIe level)",
                    _HINT,
                )
            nvlinks, level = split
            if nvlinks:
                links.append(TopologyLink(peer=peer, kind=LinkKind.NVLINK, count=nvlinks))
            if level:
                links.append(TopologyLink(peer=peer, kind=_LEVELS[level]))
        if uuid in out:
            sj.fail(what, f"GPU {uuid} is listed twice", _HINT)
        out[uuid] = tuple(links)
    return out


def _split(points: int) -> tuple[int, int] | None:
    nvlinks, level = divmod(points, NVLINK_POINTS)
    if points < 0 or nvlinks > MAX_NVLINKS or (level and level not in _LEVELS):
        return None
    return nvlinks, level


__all__ = ["SCORE_KEY", "decode_pair_links"]
