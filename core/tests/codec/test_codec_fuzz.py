"""Every reader, fed anything at all, returns or raises CodecError: never another exception."""

import contextlib
from collections.abc import Callable

import pytest
from codec_strategies import (
    ANY_TEXT,
    ASSIGNMENTS,
    CODEC_SETTINGS,
    HAMI_NODE_JSON,
    HAMI_POD,
    JSON_VALUES,
    NEAR_ASSIGNMENT,
    NEAR_HAMI_JSON,
    NEAR_HANDOFF,
    NEAR_INVENTORY,
    NEAR_LEGACY,
    NEAR_POD,
    NOT_STRINGS,
    PRINTABLE_JUNK,
    VERSIONS,
    as_json,
    handoffs,
    inventories,
    spoiled,
)
from hypothesis import given
from hypothesis import strategies as st

from xpushare.codec import (
    HamiSlice,
    decode_assignment,
    decode_hami_node_devices,
    decode_hami_pod_devices,
    decode_handoff,
    decode_inventory,
    hami_keys,
    hami_pod_assignment,
    inventory_key,
)
from xpushare.errors import CodecError

READERS: dict[str, Callable[[object], object]] = {
    "inventory": lambda v: decode_inventory("xpushare.io/inventory-nvidia", v),  # type: ignore[arg-type]
    "assignment": lambda v: decode_assignment(v),  # type: ignore[arg-type]
    "handoff": lambda v: decode_handoff(v),  # type: ignore[arg-type]
    "hami-node": lambda v: decode_hami_node_devices(v, "nvidia"),  # type: ignore[arg-type]
    "hami-pod": lambda v: decode_hami_pod_devices(v, "nvidia"),  # type: ignore[arg-type]
}

# Junk of every shape, for every reader.
ANYTHING = st.one_of(ANY_TEXT, PRINTABLE_JUNK, JSON_VALUES.map(as_json), VERSIONS)

# Near-valid values aimed at one reader: they get past the JSON parser into the version
# check, the model validation and HAMi's field rules.
AIMED: dict[str, st.SearchStrategy[str]] = {
    "inventory": NEAR_INVENTORY
    | spoiled(inventories().map(lambda i: i.model_dump(mode="json") | {"v": 1})),
    "assignment": NEAR_ASSIGNMENT
    | spoiled(ASSIGNMENTS.map(lambda a: a.model_dump(mode="json") | {"v": 1})),
    "handoff": NEAR_HANDOFF
    | spoiled(handoffs().map(lambda h: h.model_dump(mode="json") | {"v": 1})),
    "hami-node": NEAR_HAMI_JSON | spoiled(HAMI_NODE_JSON) | NEAR_LEGACY,
    "hami-pod": NEAR_POD,
}


def _only_codec_errors(reader: Callable[[object], object], value: object) -> None:
    try:
        reader(value)
    except CodecError as exc:
        assert str(exc)  # says something


@pytest.mark.parametrize("name", sorted(READERS))
@CODEC_SETTINGS
@given(value=ANYTHING)
def test_readers_raise_only_codec_errors(name, value):
    _only_codec_errors(READERS[name], value)


@pytest.mark.parametrize("name", sorted(READERS))
@CODEC_SETTINGS
@given(data=st.data())
def test_near_valid_values_raise_only_codec_errors(name, data):
    _only_codec_errors(READERS[name], data.draw(AIMED[name]))


@pytest.mark.parametrize("name", sorted(READERS))
@CODEC_SETTINGS
@given(value=NOT_STRINGS)
def test_non_strings_are_codec_errors(name, value):
    with pytest.raises(CodecError):
        READERS[name](value)


@pytest.mark.parametrize("name", sorted(READERS))
def test_deep_nesting_and_huge_numbers_are_codec_errors(name):
    for value in ("[" * 100_000, '{"a":' * 50_000, "9" * 5000, "[" + "9" * 5000 + "]",
                  "[" * 40 + "]" * 40, "x" * 300_000):  # fmt: skip
        _only_codec_errors(READERS[name], value)


@pytest.mark.parametrize("name", ["inventory", "assignment", "handoff", "hami-node"])
def test_json_readers_refuse_empty_values(name):
    for value in ("", " ", "\n"):
        with pytest.raises(CodecError, match=r"empty value|no ':' device separator"):
            READERS[name](value)


@st.composite
def _mutations(draw: st.DrawFn, base: st.SearchStrategy[str]) -> str:
    """A valid value with a few characters deleted, replaced or inserted."""
    text = draw(base)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 3))
        text = text[:at] + draw(st.text(max_size=2)) + text[at + cut :]
    return text


def _hami_text(pod: list[list[HamiSlice]]) -> str:
    # written out here rather than with the encoder, so a bug there cannot hide one here
    return "".join(
        "".join(f"{s.uuid},{s.type},{s.memory_mib},{s.cores}:" for s in entry) + ";"
        for entry in pod
    )


_VALID_POD = HAMI_POD.map(_hami_text)


@CODEC_SETTINGS
@given(value=_mutations(_VALID_POD) | _mutations(NEAR_HAMI_JSON) | _mutations(NEAR_HANDOFF))
def test_mutated_values_raise_only_codec_errors(value):
    for reader in READERS.values():
        _only_codec_errors(reader, value)


@CODEC_SETTINGS
@given(
    pod=HAMI_POD,
    names=st.lists(ANY_TEXT, max_size=4),
    inits=st.lists(ANY_TEXT, max_size=2),
    node=ANY_TEXT,
)
def test_hami_pod_assignment_raises_only_codec_errors(pod, names, inits, node):
    try:
        result = hami_pod_assignment(node, {"nvidia": pod}, names, inits)
    except CodecError:
        return
    # what it accepted holds every non-empty entry, each under its container's name
    assert len(result.containers) == sum(1 for entry in pod if entry)


@CODEC_SETTINGS
@given(vendor=ANY_TEXT | NOT_STRINGS, chip=st.none() | ANY_TEXT)
def test_key_helpers_raise_only_codec_errors(vendor, chip):
    for call in (lambda: inventory_key(vendor), lambda: hami_keys(vendor, chip)):  # type: ignore[arg-type]
        with contextlib.suppress(CodecError):
            call()


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("handoff", '{"\\ud800":1}', "object key is not valid UTF-8"),
        ("assignment", '{"v":1,"node":"\\udfff"}', "string at node is not valid UTF-8"),
        ("hami-node", "é" * 140_000, "280000 bytes is longer than Kubernetes allows"),
        ("hami-pod", "x" * 262_145, "262145 characters is longer than Kubernetes allows"),
        ("inventory", "[" * 40 + "]" * 40, "JSON nested deeper than 32 levels"),
        ("assignment", '{"v":1,"node":' + "9" * 30 + "}", "number at node does not fit"),
        ("handoff", "[" + "9" * 5000 + "]", "a number has thousands of digits"),
    ],
)
def test_defects_python_would_let_through_are_named(name, value, expected):
    with pytest.raises(CodecError) as caught:
        READERS[name](value)
    assert expected in str(caught.value)
