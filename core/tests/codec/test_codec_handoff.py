"""Per-node handoff: its helpers, its wire format and what a reader refuses."""

import re

import pytest
from codec_strategies import CODEC_SETTINGS, handoffs
from hypothesis import given
from pydantic import ValidationError

from xpushare.codec import Handoff, decode_handoff, encode_handoff
from xpushare.errors import CodecError
from xpushare.models import PodRef

POD = PodRef(namespace="ml", name="train-3", uid="6d0c0a4e-1b2f-4b8e-9b7a-2f1d9c3e4a55")


def handoff(**fields: object) -> Handoff:
    values: dict[str, object] = {
        "pod": POD,
        "vendors": ("nvidia", "amd"),
        "since": 1_700_000_000.25,
        "expires": 1_700_000_020.25,
    }
    values.update(fields)
    return Handoff(**values)  # type: ignore[arg-type]


def test_begin_sets_times_and_sorts_vendors():
    started = Handoff.begin(POD, ["nvidia", "amd"], now=50.5, ttl_s=20)
    assert started == Handoff(
        pod=POD, vendors=("amd", "nvidia"), allocated=(), since=50.5, expires=70.5
    )


def test_expired_from_the_expiry_on():
    item = handoff()
    assert not item.expired(1_700_000_020.0)
    assert item.expired(1_700_000_020.25)
    assert item.expired(1_800_000_000)


def test_complete_once_every_vendor_allocated():
    item = handoff()
    assert not item.complete()
    half = item.with_allocated("nvidia")
    assert half.allocated == ("nvidia",)
    assert not half.complete()
    assert item.allocated == ()  # frozen: the original is unchanged
    done = half.with_allocated("amd")
    assert done.allocated == ("amd", "nvidia")
    assert done.complete()
    assert done.with_allocated("amd") == done  # idempotent


def test_with_allocated_refuses_a_vendor_the_pod_does_not_wait_for():
    with pytest.raises(ValueError, match="'ascend' is not part of the handoff of pod ml/train-3"):
        handoff().with_allocated("ascend")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"vendors": ()}, "at least 1 item"),
        ({"vendors": ("a", "a")}, "appears twice"),
        ({"allocated": ("intel",)}, "allocated vendors ['intel'] are not among"),
        ({"expires": 1.0}, "is before since"),
        ({"since": float("nan")}, "finite number"),
        ({"pod": PodRef(name="")}, "the pod has no name"),
    ],
)
def test_model_refuses_inconsistent_handoffs(fields, expected):
    with pytest.raises(ValidationError, match=re.escape(expected)):
        handoff(**fields)


def test_wire_format_is_the_documented_one():
    value = encode_handoff(handoff().with_allocated("amd"), node="n1")
    assert value == (
        '{"v":1,"pod":{"namespace":"ml","name":"train-3",'
        '"uid":"6d0c0a4e-1b2f-4b8e-9b7a-2f1d9c3e4a55"},"vendors":["amd","nvidia"],'
        '"allocated":["amd"],"since":1700000000.25,"expires":1700000020.25,"term":0}'
    )
    assert decode_handoff(value) == handoff().with_allocated("amd")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"v":1,"pod":{"name":"p"},"vendors":["a"],"since":NaN,"expires":1}', "NaN"),
        ('{"v":1,"pod":{"name":"p"},"vendors":["a"],"since":0,"expires":1e999}', "too large"),
        ('{"v":1,"pod":{"name":"p"},"vendors":["a"],"since":"0","expires":1}', "since: Input"),
        ('{"v":1,"pod":{"name":"p","node":"x"},"vendors":["a"],"since":0,"expires":1}',
         "pod.node: Extra inputs"),
        ('{"v":1,"pod":{"name":"p"},"vendors":["a"],"allocated":["b"],"since":0,"expires":1}',
         "not among"),
        ('{"v":1,"pod":"ns/p","vendors":["a"],"since":0,"expires":1}', "pod: Input should be"),
        ('{"v":9}', "written in format version 9 by a newer xpushare"),
    ],
)  # fmt: skip
def test_reader_refuses_malformed_values(value, expected):
    with pytest.raises(CodecError) as caught:
        decode_handoff(value, node="gpu-1")
    assert expected in str(caught.value)
    assert "'xpushare.io/handoff' of node 'gpu-1'" in str(caught.value)


def test_encoder_names_node_and_pod_when_too_big():
    item = handoff(vendors=tuple(f"vendor-{i:05d}" for i in range(5000)))
    with pytest.raises(CodecError, match="of node 'gpu-1' \\(pod 'ml/train-3'\\)"):
        encode_handoff(item, node="gpu-1")


@CODEC_SETTINGS
@given(handoffs())
def test_round_trip(item):
    value = encode_handoff(item)
    assert decode_handoff(value) == item
    assert encode_handoff(decode_handoff(value)) == value


def test_encoder_refuses_what_is_not_a_valid_handoff():
    with pytest.raises(CodecError, match="expected a Handoff, got dict"):
        encode_handoff({"pod": "p"})  # type: ignore[arg-type]
    broken = Handoff.model_construct(pod=POD, vendors=(), allocated=(), since=0.0, expires=1.0)
    with pytest.raises(CodecError, match="of node 'n2': refusing to write vendors"):
        encode_handoff(broken, node="n2")


def test_a_handoff_written_is_read_back_as_the_object_written():
    """The leader's handoff, read back from the node's watch event: the very object it
    wrote, not a copy validated again; a bad value is refused however often it comes."""
    written = handoff(since=1_700_000_100.5, expires=1_700_000_120.5)
    value = encode_handoff(written)
    assert encode_handoff(written) == value
    assert decode_handoff(value) is written
    bad = value.replace('"expires":1700000120.5', '"expires":1.0')
    assert bad != value
    for _ in range(2):
        with pytest.raises(CodecError):
            decode_handoff(bad)
