"""Reader of HAMi's node registration annotations, so a HAMi cluster migrates without a drain.

HAMi writes a node's devices in one of two encodings (research/hami-protocol.md §2.2): a JSON
list of ``DeviceInfo`` (NVIDIA since v2.8, AMD, Kunlun vXPU, Ascend, Vastai, Biren) and a
legacy colon/comma string (NVIDIA before v2.8, Hygon, Iluvatar). Both are read here with
HAMi's own rules, so a value HAMi accepts is accepted and one HAMi refuses is refused, and
both become xpushare :class:`~xpushare.models.Device` entries:

=================  ===================================================================
HAMi field         Device field
=================  ===================================================================
``id``             ``id``
``index``          ``index`` (the 7-field legacy form has none: 0, as in HAMi)
``count``          ``share_slots``; 0 or less (no slot) becomes an unhealthy device with
                   one slot, the original kept as ``extra["hami.count"]``
``devmem``         ``memory_mib``
``devcore``        ``extra["hami.devcore"]`` (units differ between vendors)
``type``           ``model`` (``"unknown"`` when empty)
``numa``           ``numa_node``; negative becomes None (HAMi writes 0 for unknown)
``health``         ``healthy``
``mode``           ``mode``: ``hami-core`` and empty become ``shared``, others kept; the
                   original is kept as ``extra["hami.mode"]``
``migProfiles``    ``partitions``; a profile's ``max_count`` is the most non-overlapping
                   placements; a profile without placements can never be placed and is left
                   out
``custominfo``     ``extra["hami.custominfo.<key>"]`` (strings as is, other JSON compact)
=================  ===================================================================
"""

import json
import re
from typing import Any, Final

from pydantic import ValidationError

from xpushare.codec import _safejson as sj
from xpushare.errors import CodecError
from xpushare.models import Device, PartitionProfile

_HINT = "check the version and logs of the HAMi device plugin that registered the node"

# HAMi's DeviceInfo integer fields are Go int32 (count, devmem, devcore, MIG memory and core);
# index is a Go uint but a device index past int32 is nonsense, so int32 bounds it too.
_INT32_MAX: Final = 2**31 - 1
_INT32_MIN: Final = -(2**31)
_UINT32_MAX: Final = 2**32 - 1

# Go's strconv.ParseInt/Atoi in base 10: an optional sign and ASCII digits, nothing else
# (no spaces, no underscores, no other Unicode digits, which Python's int() would take).
_GO_INT = re.compile(r"^[+-]?[0-9]+$")
# Go's strconv.ParseBool.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})

# The legacy string's separators (HAMi's OneContainerMultiDeviceSplitSymbol and ",").
_DEVICE_SEP = ":"
_FIELD_SEP = ","

#: HAMi's default sharing mode; ours is called "shared".
_HAMI_CORE = "hami-core"

# Go's encoding/json matches object keys to struct tags case-insensitively (exact first).
_JSON_FIELDS = {
    name.lower(): name
    for name in (
        "id",
        "index",
        "count",
        "devmem",
        "devcore",
        "type",
        "numa",
        "mode",
        "migProfiles",
        "migtemplate",
        "health",
        "devicevendor",
        "custominfo",
    )
}
_PROFILE_FIELDS = {
    name.lower(): name for name in ("name", "memoryMB", "core", "sliceCount", "placements")
}
_PLACEMENT_FIELDS = {"start": "start", "size": "size"}


class _Bad(Exception):
    """A problem in one field; the caller adds which device it belongs to."""


def decode_hami_node_devices(
    value: str, vendor: str, *, key: str | None = None, node: str | None = None
) -> list[Device]:
    """Read a HAMi node registration value (either encoding) as *vendor*'s devices.

    *key* and *node* only name the annotation in errors. A JSON ``null`` reads as no devices,
    as in HAMi.
    """
    what = sj.describe(key or f"HAMi {vendor} registration", node=node)
    text = sj.check_text(value, what, _HINT)
    if not isinstance(vendor, str) or not vendor:
        raise CodecError(f"{what}: the vendor name must be a non-empty string, got {vendor!r}")
    stripped = text.strip()
    if stripped[:1] in ("[", "{") or stripped == "null":
        return _from_json(text, vendor, what)
    return _from_legacy(text, vendor, what)


# --- shared -------------------------------------------------------------------------------


def _device(vendor: str, fields: dict[str, Any], position: int, what: str) -> Device:
    """Build a Device from HAMi's fields (Go zero values where absent)."""
    label = _label(position, fields.get("id"))
    count: int = fields["count"]
    mode: str = fields["mode"]
    numa: int = fields["numa"]
    extra = {"hami.devcore": str(fields["devcore"])}
    healthy: bool = fields["health"]
    if mode:
        extra["hami.mode"] = mode
    if count <= 0:
        # HAMi places nothing on a device without slots; the model has no zero-slot device.
        extra["hami.count"] = str(count)
        healthy = False
    extra.update(fields.get("custominfo", {}))
    if not fields["id"].strip():
        sj.fail(what, f"{label}: empty id", _HINT)
    if fields["devmem"] < 0:
        sj.fail(what, f"{label}: devmem {fields['devmem']} is negative", _HINT)
    if fields["index"] < 0:
        sj.fail(what, f"{label}: index {fields['index']} is negative", _HINT)
    try:
        return Device(
            vendor=vendor,
            id=fields["id"],
            index=fields["index"],
            model=fields["type"].strip() or "unknown",
            memory_mib=fields["devmem"],
            share_slots=max(count, 1),
            numa_node=numa if numa >= 0 else None,
            healthy=healthy,
            mode="shared" if mode in ("", _HAMI_CORE) else mode,
            partitions=tuple(fields.get("partitions", ())),
            extra=extra,
        )
    except ValidationError as exc:
        sj.fail(what, f"{label}: {sj.validation_problem(exc)}", _HINT)


def _label(position: int, device_id: object) -> str:
    if isinstance(device_id, str) and device_id:
        return f"device {position} ({sj.short(device_id, 50)})"
    return f"device {position}"


def _unique(devices: list[Device], what: str) -> list[Device]:
    seen: set[str] = set()
    for position, device in enumerate(devices):
        if device.id in seen:
            sj.fail(what, f"device {position}: id {device.id!r} appears twice", _HINT)
        seen.add(device.id)
    return devices


# --- (a) JSON list ------------------------------------------------------------------------


def _fold(obj: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Go's key matching: exact tag first, else ASCII case-insensitive; unknown keys ignored."""
    found: dict[str, Any] = {}
    exact: set[str] = set()
    for key, item in obj.items():
        name = names.get(key.lower()) if key.isascii() else None
        if name is None:
            continue
        if key == name:
            found[name] = item
            exact.add(name)
        elif name not in exact:
            found[name] = item
    return found


def _int(obj: dict[str, Any], name: str, low: int, high: int) -> int:
    item = obj.get(name)
    if item is None:  # absent (omitempty) or null: Go's zero value
        return 0
    if isinstance(item, bool) or not isinstance(item, int):
        raise _Bad(f"field {name!r} must be an integer, got {sj.json_type(item)}")
    if not low <= item <= high:
        raise _Bad(f"field {name!r} = {item} is out of range {low}..{high}")
    return item


def _str(obj: dict[str, Any], name: str) -> str:
    item = obj.get(name)
    if item is None:
        return ""
    if not isinstance(item, str):
        raise _Bad(f"field {name!r} must be a string, got {sj.json_type(item)}")
    return item


def _bool(obj: dict[str, Any], name: str) -> bool:
    item = obj.get(name)
    if item is None:  # omitempty hides health:false
        return False
    if not isinstance(item, bool):
        raise _Bad(f"field {name!r} must be true or false, got {sj.json_type(item)}")
    return item


def _list(obj: dict[str, Any], name: str) -> list[Any]:
    item = obj.get(name)
    if item is None:
        return []
    if not isinstance(item, list):
        raise _Bad(f"field {name!r} must be a list, got {sj.json_type(item)}")
    return item


def _max_disjoint(placements: list[tuple[int, int]]) -> int:
    """The most placements that can be in use at once (non-overlapping intervals)."""
    taken, end = 0, -1
    for start, size in sorted(placements, key=lambda p: (p[0] + p[1], p[0])):
        if start >= end and size > 0:
            taken, end = taken + 1, start + size
    return taken


def _profiles(items: list[Any]) -> list[PartitionProfile]:
    profiles = []
    for i, raw in enumerate(items):
        if not isinstance(raw, dict):
            raise _Bad(f"migProfiles[{i}] must be an object, got {sj.json_type(raw)}")
        obj = _fold(raw, _PROFILE_FIELDS)
        try:
            name = _str(obj, "name")
            memory = _int(obj, "memoryMB", _INT32_MIN, _INT32_MAX)
            core = _int(obj, "core", _INT32_MIN, _INT32_MAX)
            _int(obj, "sliceCount", 0, _UINT32_MAX)
            placements = []
            for j, place in enumerate(_list(obj, "placements")):
                if not isinstance(place, dict):
                    raise _Bad(f"placements[{j}] must be an object, got {sj.json_type(place)}")
                fields = _fold(place, _PLACEMENT_FIELDS)
                placements.append(
                    (_int(fields, "start", 0, _UINT32_MAX), _int(fields, "size", 0, _UINT32_MAX))
                )
        except _Bad as exc:
            raise _Bad(f"migProfiles[{i}]: {exc}") from None
        if not name.strip():
            raise _Bad(f"migProfiles[{i}] has no name")
        if memory < 0 or not 0 <= core <= 100:
            raise _Bad(
                f"migProfiles[{i}] ({name!r}): memoryMB {memory} must be >= 0 and core {core} "
                "a percent 0..100"
            )
        count = _max_disjoint(placements)
        if count:
            profiles.append(
                PartitionProfile(
                    name=name, memory_mib=memory, compute_percent=core, max_count=count
                )
            )
    return profiles


def _custom(items: dict[str, Any]) -> dict[str, str]:
    return {
        f"hami.custominfo.{k}": v
        if isinstance(v, str)
        else json.dumps(v, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
        for k, v in items.items()
    }


def _json_fields(raw: dict[str, Any]) -> dict[str, Any]:
    obj = _fold(raw, _JSON_FIELDS)
    fields: dict[str, Any] = {
        "id": _str(obj, "id"),
        "index": _int(obj, "index", _INT32_MIN, _INT32_MAX),
        "count": _int(obj, "count", _INT32_MIN, _INT32_MAX),
        "devmem": _int(obj, "devmem", _INT32_MIN, _INT32_MAX),
        "devcore": _int(obj, "devcore", _INT32_MIN, _INT32_MAX),
        "type": _str(obj, "type"),
        "numa": _int(obj, "numa", -(2**63), 2**63 - 1),
        "mode": _str(obj, "mode"),
        "health": _bool(obj, "health"),
        "partitions": _profiles(_list(obj, "migProfiles")),
    }
    _str(obj, "devicevendor")  # type-checked as Go would; the caller names the vendor
    custom = obj.get("custominfo")
    if custom is not None:
        if not isinstance(custom, dict):
            raise _Bad(f"field 'custominfo' must be an object, got {sj.json_type(custom)}")
        fields["custominfo"] = _custom(custom)
    return fields


def _from_json(text: str, vendor: str, what: str) -> list[Device]:
    data = sj.load_json(text, what, _HINT)
    if data is None:
        return []
    if not isinstance(data, list):
        sj.fail(what, f"expected a JSON list of devices, got {sj.json_type(data)}", _HINT)
    devices = []
    for position, raw in enumerate(data):
        if not isinstance(raw, dict):
            sj.fail(
                what, f"device {position} must be a JSON object, got {sj.json_type(raw)}", _HINT
            )
        try:
            fields = _json_fields(raw)
        except _Bad as exc:
            sj.fail(what, f"{_label(position, raw.get('id'))}: {exc}", _HINT)
        devices.append(_device(vendor, fields, position, what))
    return _unique(devices, what)


# --- (b) legacy colon/comma string --------------------------------------------------------


def _go_int(text: str, name: str, low: int, high: int) -> int:
    if not _GO_INT.match(text):
        raise _Bad(f"field {name!r} = {sj.short(text, 30)} is not an integer")
    if len(text) > 25:  # far past int64, and keeps int() cheap
        raise _Bad(f"field {name!r} = {sj.short(text, 30)} is out of range")
    number = int(text)
    if not low <= number <= high:
        raise _Bad(f"field {name!r} = {number} is out of range {low}..{high}")
    return number


def _go_bool(text: str, name: str) -> bool:
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise _Bad(f"field {name!r} = {sj.short(text, 30)} is not a boolean (true, false, 1, 0, t, f)")


def _legacy_fields(items: list[str]) -> dict[str, Any]:
    nine = len(items) == 9
    return {
        "id": items[0],
        "count": _go_int(items[1], "count", _INT32_MIN, _INT32_MAX),
        "devmem": _go_int(items[2], "devmem", _INT32_MIN, _INT32_MAX),
        "devcore": _go_int(items[3], "devcore", _INT32_MIN, _INT32_MAX),
        "type": items[4],
        "numa": _go_int(items[5], "numa", -(2**63), 2**63 - 1),
        "health": _go_bool(items[6], "health"),
        "index": _go_int(items[7], "index", _INT32_MIN, _INT32_MAX) if nine else 0,
        "mode": items[8] if nine else _HAMI_CORE,
    }


def _from_legacy(text: str, vendor: str, what: str) -> list[Device]:
    if _DEVICE_SEP not in text:
        sj.fail(
            what,
            "neither a JSON list nor HAMi's legacy device string (no ':' device separator)",
            _HINT,
        )
    devices = []
    position = 0
    for segment in text.split(_DEVICE_SEP):
        if segment == "":  # every device is terminated by ':', so the last piece is empty
            continue
        items = segment.split(_FIELD_SEP)
        if len(items) not in (7, 9):
            sj.fail(
                what,
                f"device {position}: {len(items)} comma-separated fields, expected 7 "
                "(id,count,devmem,devcore,type,numa,health) or 9 (…,index,mode)",
                _HINT,
            )
        try:
            fields = _legacy_fields(items)
        except _Bad as exc:
            sj.fail(what, f"{_label(position, items[0])}: {exc}", _HINT)
        devices.append(_device(vendor, fields, position, what))
        position += 1
    return _unique(devices, what)
