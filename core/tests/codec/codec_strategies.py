"""Hypothesis strategies shared by the codec tests: valid models, and junk aimed at readers."""

import json
import string

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from xpushare.codec import HamiSlice, Handoff, Inventory
from xpushare.models import (
    ContainerAssignment,
    Device,
    DeviceSlice,
    LinkKind,
    PartitionProfile,
    PodAssignment,
    PodRef,
    TopologyLink,
)

# Modest, and no example database written into the repository.
CODEC_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?", fullmatch=True)
# Any text a model keeps once stripped; the default alphabet already has no surrogates.
NAME = st.text(min_size=1, max_size=20).filter(lambda s: s.strip() != "")
TEXT = st.text(max_size=20)
INT64 = st.integers(min_value=0, max_value=2**63 - 1)
SMALL = st.integers(min_value=0, max_value=2**31 - 1)


def devices(vendor: str) -> st.SearchStrategy[Device]:
    return st.builds(
        Device,
        vendor=st.just(vendor),
        id=NAME,
        index=SMALL,
        model=NAME,
        memory_mib=INT64,
        compute_units=SMALL,
        share_slots=st.integers(min_value=1, max_value=1000),
        numa_node=st.none() | st.integers(min_value=0, max_value=64),
        pci_bus_id=st.none() | TEXT,
        healthy=st.booleans(),
        mode=TEXT,
        partitions=st.lists(
            st.builds(
                PartitionProfile,
                name=NAME,
                memory_mib=SMALL,
                compute_percent=st.integers(0, 100),
                max_count=st.integers(1, 8),
            ),
            max_size=3,
        ).map(tuple),
        links=st.lists(
            st.builds(
                TopologyLink,
                peer=NAME,
                kind=st.sampled_from(LinkKind),
                count=st.integers(1, 18),
            ),
            max_size=3,
        ).map(tuple),
        extra=st.dictionaries(TEXT, TEXT, max_size=4),
    )


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    vendor = draw(DNS_LABEL)
    state = draw(st.sampled_from(["ok", "no-devices", "error"]))
    found: list[Device] = []
    if state != "no-devices":
        found = draw(
            st.lists(
                devices(vendor),
                min_size=1 if state == "ok" else 0,
                max_size=4,
                unique_by=lambda d: d.id,
            )
        )
    return Inventory(
        vendor=vendor,
        node=draw(NAME),
        devices=tuple(found),
        state=state,
        message=draw(TEXT),
    )


SLICES = st.builds(
    DeviceSlice,
    device_id=NAME,
    index=SMALL,
    memory_mib=INT64,
    compute_percent=st.integers(0, 100),
    exclusive=st.booleans(),
    partition=st.none() | TEXT,
)

ASSIGNMENTS = st.builds(
    PodAssignment,
    node=NAME,
    containers=st.lists(
        st.builds(
            ContainerAssignment,
            container=TEXT,
            vendor=NAME,
            init=st.booleans(),
            devices=st.lists(SLICES, max_size=3).map(tuple),
        ),
        max_size=4,
    ).map(tuple),
)


@st.composite
def handoffs(draw: st.DrawFn) -> Handoff:
    vendors = draw(st.lists(DNS_LABEL, min_size=1, max_size=4, unique=True))
    allocated = draw(st.lists(st.sampled_from(vendors), unique=True))
    since = draw(st.floats(min_value=0, max_value=4e9, allow_nan=False))
    ttl = draw(st.floats(min_value=0, max_value=3600, allow_nan=False))
    return Handoff(
        pod=PodRef(namespace=draw(TEXT), name=draw(NAME), uid=draw(TEXT)),
        vendors=tuple(vendors),
        allocated=tuple(allocated),
        since=since,
        expires=since + ttl,
    )


# HAMi's separators can never appear inside a field: the format cannot escape them.
_HAMI_FIELD = st.text(
    alphabet=st.characters(exclude_characters=";:,", exclude_categories=["Cs"]),
    min_size=1,
    max_size=12,
)
HAMI_SLICES = st.builds(
    HamiSlice,
    uuid=_HAMI_FIELD,
    type=_HAMI_FIELD,
    memory_mib=st.integers(0, 2**31 - 1),
    cores=st.integers(0, 2**31 - 1),
)
HAMI_POD = st.lists(st.lists(HAMI_SLICES, max_size=3), max_size=5)

# --- junk for the readers ---------------------------------------------------------------

# Text including lone surrogates, which Python strings can hold and UTF-8 cannot.
ANY_TEXT = st.text(
    alphabet=st.characters(codec=None) | st.characters(categories=["Cs"]), max_size=60
)

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and infinities included: json.dumps writes them as tokens
    | ANY_TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=15,
)


def as_json(value: object) -> str:
    return json.dumps(value)


_INVENTORY_FIELDS = ["v", "vendor", "node", "devices", "state", "message", "extra"]
_DEVICE_FIELDS = [*Device.model_fields, "bogus"]
_HAMI_DEVICE_FIELDS = [
    "id",
    "ID",
    "index",
    "count",
    "devmem",
    "DevMem",
    "devcore",
    "type",
    "numa",
    "mode",
    "migProfiles",
    "health",
    "custominfo",
    "devicevendor",
]
_HAMI_PROFILE_FIELDS = ["name", "memoryMB", "core", "sliceCount", "placements"]

SMALL_JSON = JSON_SCALARS | st.lists(JSON_SCALARS, max_size=3)


def _objects(fields: list[str], values: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.dictionaries(st.sampled_from(fields), values, max_size=len(fields))


# Objects shaped like ours with a valid version, so the junk reaches the model validation.
NEAR_INVENTORY = st.builds(
    lambda fields, devices: {"v": 1, **fields, "devices": devices},
    _objects(_INVENTORY_FIELDS[1:], SMALL_JSON),
    st.lists(_objects(_DEVICE_FIELDS, SMALL_JSON), max_size=3),
).map(as_json)
NEAR_ASSIGNMENT = st.builds(
    lambda node, containers: {"v": 1, "node": node, "containers": containers},
    SMALL_JSON,
    st.lists(
        _objects(["container", "vendor", "init", "devices"], SMALL_JSON)
        | st.builds(
            lambda c, d: {"container": c, "vendor": "x", "devices": d},
            JSON_SCALARS,
            st.lists(_objects(["device_id", "index", "memory_mib", "compute_percent"], SMALL_JSON)),
        ),
        max_size=3,
    ),
).map(as_json)
NEAR_HANDOFF = st.builds(
    lambda pod, fields: {"v": 1, "pod": pod, **fields},
    _objects(["namespace", "name", "uid", "x"], SMALL_JSON) | SMALL_JSON,
    _objects(["vendors", "allocated", "since", "expires"], SMALL_JSON),
).map(as_json)
VERSIONS = st.builds(
    lambda v, rest: {"v": v, **rest}, JSON_SCALARS, st.dictionaries(ANY_TEXT, SMALL_JSON)
).map(as_json)
NEAR_HAMI_JSON = st.lists(
    _objects(_HAMI_DEVICE_FIELDS, SMALL_JSON)
    | st.builds(
        lambda d, profiles: {**d, "migProfiles": profiles},
        _objects(_HAMI_DEVICE_FIELDS, SMALL_JSON),
        st.lists(
            _objects(_HAMI_PROFILE_FIELDS, SMALL_JSON)
            | st.builds(
                lambda p, places: {**p, "placements": places},
                _objects(_HAMI_PROFILE_FIELDS, SMALL_JSON),
                st.lists(_objects(["start", "size"], SMALL_JSON), max_size=3),
            ),
            max_size=3,
        ),
    ),
    max_size=3,
).map(as_json)

_GO_NUMBERS = r"(-?[0-9]{0,11}|\+[0-9]{1,3}|[0-9]_[0-9]|x)"
NEAR_LEGACY = st.from_regex(
    rf"(:|(GPU-[a-z]{{0,3}}|),{_GO_NUMBERS},{_GO_NUMBERS},{_GO_NUMBERS},[A-Z ]{{0,6}},"
    rf"{_GO_NUMBERS},(true|false|t|F|1|0|yes|),?{_GO_NUMBERS}?,?(hami-core|mig|)?:?){{0,3}}",
    fullmatch=True,
)
NEAR_POD = st.from_regex(
    rf"((G[a-z]{{0,2}}|),(NVIDIA|),{_GO_NUMBERS},{_GO_NUMBERS}(,[a-z]{{0,2}})?:?|;|:|,){{0,8}}",
    fullmatch=True,
)

PRINTABLE_JUNK = st.text(alphabet=string.printable, max_size=80)
NOT_STRINGS = st.none() | st.integers() | st.binary(max_size=8) | st.lists(st.text(max_size=3))

# --- valid values with one or two fields spoiled -----------------------------------------

HAMI_DEVICE_JSON = st.fixed_dictionaries(
    {"id": st.from_regex(r"GPU-[0-9a-f]{1,8}", fullmatch=True)},
    optional={
        "index": st.integers(0, 16),
        "count": st.integers(0, 20),
        "devmem": st.integers(0, 2**20),
        "devcore": st.integers(0, 300),
        "type": TEXT,
        "numa": st.integers(-1, 3),
        "mode": st.sampled_from(["hami-core", "mig", "mps", ""]),
        "health": st.booleans(),
        "custominfo": st.dictionaries(TEXT, SMALL_JSON, max_size=2),
        "migProfiles": st.lists(
            st.fixed_dictionaries(
                {
                    "name": NAME,
                    "memoryMB": st.integers(0, 2**17),
                    "core": st.integers(0, 100),
                    "sliceCount": st.integers(0, 8),
                    "placements": st.lists(
                        st.fixed_dictionaries(
                            {"start": st.integers(0, 8), "size": st.integers(0, 8)}
                        ),
                        max_size=4,
                    ),
                }
            ),
            max_size=3,
        ),
    },
)
HAMI_NODE_JSON = st.lists(HAMI_DEVICE_JSON, max_size=3, unique_by=lambda d: d["id"])


def _paths(data: object) -> list[tuple[object, ...]]:
    found: list[tuple[object, ...]] = []
    stack: list[tuple[object, tuple[object, ...]]] = [(data, ())]
    while stack:
        node, path = stack.pop()
        items = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else ()
        )
        for key, child in items:
            found.append((*path, key))
            stack.append((child, (*path, key)))
    return found


@st.composite
def spoiled(draw: st.DrawFn, base: st.SearchStrategy[object]) -> str:
    """A valid JSON value with a field replaced by junk, or removed."""
    data = json.loads(json.dumps(draw(base)))
    for _ in range(draw(st.integers(1, 2))):
        paths = _paths(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: object = data
        for key in path[:-1]:
            parent = parent[key]  # type: ignore[index]
        if draw(st.booleans()):
            parent[path[-1]] = draw(SMALL_JSON)  # type: ignore[index]
        else:
            del parent[path[-1]]  # type: ignore[attr-defined]
    return json.dumps(data)
