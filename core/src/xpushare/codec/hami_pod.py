"""HAMi's pod device string: read it to count what HAMi placed, write it to stay compatible.

Grammar (research/hami-protocol.md §2.6), one annotation per vendor::

    pod        := container* ;       each container entry TERMINATED by ';'
    container  := device*            each device TERMINATED by ':'; empty for none
    device     := UUID ',' TYPE ',' MEM ',' CORES [',' ignored...]

Entry ``i`` is container ``i`` counting init containers first, so empty entries are kept.
HAMi's device plugin blanks an entry when it serves the container and writes the string
back, adding one more trailing ``;`` each time, so any number of trailing empty entries is
normal. The reader follows HAMi's current rules: a device segment must contain ``,`` and
have at least four fields, UUID and TYPE must be non-empty, MEM and CORES are non-negative
int32 (Go ``strconv.ParseInt(s, 10, 32)``).
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pydantic import ValidationError

from xpushare.codec import _safejson as sj
from xpushare.errors import CodecError
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment

_HINT = "check the version and logs of the HAMi scheduler that placed the pod"

_CONTAINER_SEP: Final = ";"
_DEVICE_SEP: Final = ":"
_FIELD_SEP: Final = ","
_SEPARATORS: Final = frozenset(_CONTAINER_SEP + _DEVICE_SEP + _FIELD_SEP)
# HAMi's MEM and CORES are Go int32.
_INT32_MAX: Final = 2**31 - 1
_GO_INT = re.compile(r"^[+-]?[0-9]+$")


@dataclass(frozen=True, slots=True)
class HamiSlice:
    """One device given to one container, as HAMi records it.

    ``cores`` is HAMi's raw core value: a percent for NVIDIA and most vendors, but compute
    units for AMD, a core bitmask for AWS Neuron, 16ths of a GPU for Moore Threads.
    """

    uuid: str
    type: str
    memory_mib: int
    cores: int

    def __post_init__(self) -> None:
        problem = _slice_problem(self)
        if problem:
            raise CodecError(f"invalid HAMi device slice {self!r}: {problem}")


def _slice_problem(item: object) -> str | None:
    if not isinstance(item, HamiSlice):
        return f"expected a HamiSlice, got {type(item).__name__}"
    for name in ("uuid", "type"):
        text = getattr(item, name)
        if not isinstance(text, str) or not text:
            return f"{name} must be a non-empty string"
        if _SEPARATORS.intersection(text):
            return (
                f"{name} {text!r} contains one of HAMi's separators ; : , which cannot be escaped"
            )
        if any("\ud800" <= ch <= "\udfff" for ch in text):
            return f"{name} is not valid UTF-8 (lone surrogate)"
    for name in ("memory_mib", "cores"):
        number = getattr(item, name)
        if isinstance(number, bool) or not isinstance(number, int):
            return f"{name} must be an integer"
        if not 0 <= number <= _INT32_MAX:
            return f"{name} = {number} is out of range 0..{_INT32_MAX}"
    return None


def _what(vendor: object, key: str | None, pod: str | None) -> str:
    return sj.describe(key or f"HAMi {vendor} pod devices", pod=pod)


def _number(text: str, name: str) -> int:
    if not _GO_INT.match(text) or len(text) > 25:
        raise ValueError(f"{name} {sj.short(text, 30)} is not an integer")
    number = int(text)
    if number < 0:
        raise ValueError(f"{name} {number} is negative")
    if number > _INT32_MAX:
        raise ValueError(f"{name} {number} does not fit in int32")
    return number


def _container(entry: str, index: int, what: str) -> list[HamiSlice]:
    devices: list[HamiSlice] = []
    for segment in entry.split(_DEVICE_SEP):
        if segment == "":  # every device is terminated by ':'
            continue
        at = f"container entry {index}, device {len(devices)}"
        if _FIELD_SEP not in segment:
            sj.fail(what, f"{at}: {sj.short(segment, 40)} has no ',' (not a device)", _HINT)
        fields = segment.split(_FIELD_SEP)
        if len(fields) < 4:
            sj.fail(what, f"{at}: {len(fields)} fields, expected UUID,TYPE,MEM,CORES", _HINT)
        uuid, kind = fields[0], fields[1]
        if not uuid:
            sj.fail(what, f"{at}: empty device UUID", _HINT)
        if not kind:
            sj.fail(what, f"{at} ({sj.short(uuid, 50)}): empty device type", _HINT)
        try:
            memory, cores = _number(fields[2], "MEM"), _number(fields[3], "CORES")
        except ValueError as exc:
            sj.fail(what, f"{at} ({sj.short(uuid, 50)}): {exc}", _HINT)
        devices.append(HamiSlice(uuid, kind, memory, cores))
    return devices


def decode_hami_pod_devices(
    value: str, vendor: str, *, key: str | None = None, pod: str | None = None
) -> list[list[HamiSlice]]:
    """Read one vendor's HAMi pod device string: one list of slices per container entry.

    Entry ``i`` belongs to container ``i`` (init containers first). Entries are kept as
    written, empty ones included; only the piece after the final ``;`` (always empty in
    what HAMi writes) is dropped, so ``""`` reads as no entries and ``"A:;"`` as one.
    *vendor*, *key* and *pod* name the annotation in errors.
    """
    what = _what(vendor, key, pod)
    text = sj.check_text(value, what, _HINT)
    entries = text.split(_CONTAINER_SEP)
    if entries[-1] == "":
        entries.pop()
    return [_container(entry, index, what) for index, entry in enumerate(entries)]


def encode_hami_pod_devices(
    containers: Sequence[Sequence[HamiSlice]],
    vendor: str,
    *,
    key: str | None = None,
    pod: str | None = None,
) -> str:
    """Write one vendor's HAMi pod device string, one entry per container, init first.

    Containers without devices of the vendor need their (empty) entry, or HAMi's device
    plugin attributes the entries to the wrong containers.
    """
    what = _what(vendor, key, pod)
    if isinstance(containers, str) or not isinstance(containers, Sequence):
        sj.fail(what, "expected a list of containers' slices", "a caller bug")
    parts: list[str] = []
    for index, container in enumerate(containers):
        if isinstance(container, str) or not isinstance(container, Sequence):
            sj.fail(what, f"container entry {index} must be a list of slices", "a caller bug")
        for position, item in enumerate(container):
            problem = _slice_problem(item)
            if problem is not None:
                sj.fail(what, f"container entry {index}, device {position}: {problem}", "fix it")
            assert isinstance(item, HamiSlice)  # checked just above
            parts.append(f"{item.uuid},{item.type},{item.memory_mib},{item.cores}{_DEVICE_SEP}")
        parts.append(_CONTAINER_SEP)
    hint = f"the pod has {len(containers)} container entries, too many to record: split the pod"
    return sj.check_size("".join(parts), what, hint)


def _percent(vendor: str, item: HamiSlice) -> int:
    if item.cores > 100:
        raise ValueError(
            f"CORES {item.cores} of device {item.uuid!r} is not a percent (HAMi records "
            f"compute units for some vendors); pass to_percent to convert {vendor}'s units"
        )
    return item.cores


def hami_pod_assignment(
    node: str,
    decoded: Mapping[str, Sequence[Sequence[HamiSlice]]],
    containers: Sequence[str],
    init_containers: Sequence[str] = (),
    *,
    pod: str | None = None,
    device_index: Mapping[str, int] | None = None,
    to_percent: Callable[[str, HamiSlice], int] | None = None,
) -> PodAssignment:
    """The assignment of a pod HAMi placed on *node*, for the usage ledger.

    *decoded* maps each xpushare vendor name to that vendor's decoded pod device string
    (:func:`decode_hami_pod_devices`); entries map to *init_containers* then *containers*
    (names in pod-spec order). Entries past the last container must be empty (HAMi's
    trailing ``;``). *device_index* gives the node index of a device UUID (HAMi does not
    record it; 0 otherwise). *to_percent* turns a vendor's CORES into a percent where HAMi
    records other units; by default CORES must already be a percent. No slice is marked
    exclusive: HAMi holds a device for a 100 % slice only through its core counts (nobody
    else fits in the cores left), and only on a device of 100 cores; on one over-committed
    (``deviceCoreScaling`` 2) the slice is half the cores and others share the device. The
    compute the slice books does the same here.
    """
    what = sj.describe("HAMi pod devices", node=node if isinstance(node, str) else None, pod=pod)
    names = [*init_containers, *containers]
    convert = to_percent or _percent
    assigned: list[tuple[int, str, ContainerAssignment]] = []
    for vendor, entries in sorted(decoded.items()):
        for index, entry in enumerate(entries):
            if not entry:
                continue
            if index >= len(names):
                sj.fail(
                    what,
                    f"{vendor} entry {index} has devices but the pod has only {len(names)} "
                    "containers (init containers included): the annotation is not this pod's",
                    _HINT,
                )
            try:
                slices = []
                for item in entry:
                    percent = convert(vendor, item)
                    slices.append(
                        DeviceSlice(
                            device_id=item.uuid,
                            index=(device_index or {}).get(item.uuid, 0),
                            memory_mib=item.memory_mib,
                            compute_percent=percent,
                        )
                    )
                row = ContainerAssignment(
                    container=names[index],
                    vendor=vendor,
                    init=index < len(init_containers),
                    devices=tuple(slices),
                )
            except ValidationError as exc:
                sj.fail(what, f"{vendor} entry {index}: {sj.validation_problem(exc)}", _HINT)
            except ValueError as exc:
                sj.fail(what, f"{vendor} entry {index}: {exc}", _HINT)
            assigned.append((index, vendor, row))
    assigned.sort(key=lambda row: (row[0], row[1]))
    try:
        return PodAssignment(node=node, containers=tuple(row[2] for row in assigned))
    except ValidationError as exc:
        sj.fail(what, sj.validation_problem(exc), _HINT)
