"""Pod assignment annotation: exact round trip, strict reading, size limit."""

import pytest
from codec_strategies import ASSIGNMENTS, CODEC_SETTINGS
from hypothesis import given

from xpushare.codec import MAX_VALUE_BYTES, decode_assignment, encode_assignment
from xpushare.errors import CodecError
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment

ASSIGNMENT = PodAssignment(
    node="gpu-node-2",
    containers=(
        ContainerAssignment(
            container="warmup",
            vendor="nvidia",
            init=True,
            devices=(DeviceSlice(device_id="GPU-a", index=2, memory_mib=1024, compute_percent=10),),
        ),
        ContainerAssignment(
            container="trainer",
            vendor="nvidia",
            devices=(
                DeviceSlice(device_id="GPU-a", index=2, memory_mib=8192, compute_percent=50),
                DeviceSlice(
                    device_id="GPU-b", index=3, memory_mib=0, compute_percent=100, exclusive=True
                ),
            ),
        ),
    ),
)


def test_encoding_is_compact_versioned_and_exact():
    value = encode_assignment(ASSIGNMENT)
    assert value.startswith('{"v":1,"node":"gpu-node-2","containers":[{"container":"warmup",')
    assert " " not in value
    assert decode_assignment(value) == ASSIGNMENT
    assert encode_assignment(decode_assignment(value)) == value


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (('"memory_mib":1024', '"memory_mib":"1024"'), "memory_mib: Input should be a valid int"),
        (('"memory_mib":1024', '"memory_mib":1024.0'), "containers[0].devices[0].memory_mib"),
        (('"compute_percent":10', '"compute_percent":101'), "less than or equal to 100"),
        (('"init":true', '"init":"yes"'), "containers[0].init"),
        (('"init":true', '"init":true,"priority":1'), "containers[0].priority: Extra inputs"),
        (('"node":"gpu-node-2"', '"node":""'), "node: String should have at least 1"),
        (('{"v":1', '{"v":3'), "format version 3"),
    ],
)
def test_malformed_fields_are_refused_with_their_path(change, expected):
    old, new = change
    value = encode_assignment(ASSIGNMENT).replace(old, new, 1)
    with pytest.raises(CodecError) as caught:
        decode_assignment(value, pod="team/trainer-0")
    assert expected in str(caught.value)
    assert "'xpushare.io/assignment' of pod 'team/trainer-0'" in str(caught.value)


def test_errors_name_node_and_pod():
    value = encode_assignment(ASSIGNMENT).replace('"index":2', '"index":-2', 1)
    with pytest.raises(CodecError, match="of pod 'a/b' on node 'gpu-node-2': containers"):
        decode_assignment(value, pod="a/b")


def test_refuses_to_encode_past_the_limit_and_names_node_and_pod():
    slices = tuple(
        DeviceSlice(device_id=f"GPU-{i:08d}", memory_mib=1, compute_percent=1) for i in range(900)
    )
    huge = PodAssignment(
        node="n9",
        containers=(ContainerAssignment(container="c", vendor="nvidia", devices=slices),),
    )
    with pytest.raises(CodecError) as caught:
        encode_assignment(huge, pod="ns/huge")
    assert "of pod 'ns/huge' on node 'n9'" in str(caught.value)
    assert f"at most {MAX_VALUE_BYTES} bytes" in str(caught.value)


def test_refuses_to_encode_a_model_built_around_validation():
    bad = PodAssignment.model_construct(node="", containers=())
    with pytest.raises(CodecError, match="refusing to write node"):
        encode_assignment(bad)
    with pytest.raises(CodecError, match="expected a PodAssignment"):
        encode_assignment({"node": "n"})  # type: ignore[arg-type]


@CODEC_SETTINGS
@given(ASSIGNMENTS)
def test_round_trip(assignment):
    value = encode_assignment(assignment)
    assert decode_assignment(value) == assignment
    assert encode_assignment(decode_assignment(value)) == value


def _one(node: str, memory: int) -> PodAssignment:
    device = DeviceSlice(device_id=f"GPU-{node}", memory_mib=memory, compute_percent=10)
    return PodAssignment(
        node=node,
        containers=(ContainerAssignment(container="main", vendor="mock", devices=(device,)),),
    )


def test_a_value_written_is_read_back_as_the_object_written() -> None:
    """The scheduler's own writes, read back from the watch: the very object it booked,
    not a copy validated again; the same object written twice is one value."""
    from xpushare.codec import _memo
    from xpushare.codec import assignment as module

    written = _one("memo-node", 1234)
    value = encode_assignment(written)
    assert encode_assignment(written) == value
    assert decode_assignment(value) is written
    # A copy of the value read by someone else: equal, and the same object again.
    copy = (value + " ")[:-1]
    assert copy is not value
    assert decode_assignment(copy) is written
    read = decode_assignment(encode_assignment(_one("memo-node", 99)).replace("99", "98"))
    assert read.containers[0].devices[0].memory_mib == 98
    assert decode_assignment(encode_assignment(read)) is read
    # Bounded: by count, and long values are never kept.
    for i in range(_memo.MEMO_ENTRIES + 10):
        encode_assignment(_one(f"fill-{i}", 1))
    assert len(module._MEMO.by_value) <= _memo.MEMO_ENTRIES
    assert len(module._MEMO.by_object) <= _memo.MEMO_ENTRIES
    long_value = encode_assignment(_one("n" * (_memo.MEMO_VALUE_BYTES), 1))
    assert long_value not in module._MEMO.by_value


def test_a_bad_value_is_refused_every_time() -> None:
    good = encode_assignment(_one("memo-bad", 10))
    bad = good.replace('"memory_mib":10', '"memory_mib":-10')
    assert bad != good
    for _ in range(2):
        with pytest.raises(CodecError):
            decode_assignment(bad)
