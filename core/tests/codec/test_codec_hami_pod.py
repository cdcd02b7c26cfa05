"""HAMi pod device string: reader, writer and the conversion to a PodAssignment (§2.6)."""

import pytest
from codec_strategies import CODEC_SETTINGS, HAMI_POD
from hypothesis import given

from xpushare.codec import (
    MAX_VALUE_BYTES,
    HamiSlice,
    decode_hami_pod_devices,
    encode_hami_pod_devices,
    hami_pod_assignment,
)
from xpushare.errors import CodecError
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment


def s(uuid: str, memory: int, cores: int, kind: str = "NVIDIA") -> HamiSlice:
    return HamiSlice(uuid, kind, memory, cores)


# Pods as HAMi's scheduler writes them at filter time, and the device plugin's rewrites.
EXAMPLES = [
    # one container, one GPU, 6000 MiB and 40 %
    ("GPU-p1,NVIDIA,6000,40:;", [[s("GPU-p1", 6000, 40)]]),
    # two containers sharing one GPU, no core limit
    ("GPU-p1,NVIDIA,1000,0:;GPU-p1,NVIDIA,7000,0:;",
     [[s("GPU-p1", 1000, 0)], [s("GPU-p1", 7000, 0)]]),
    # one container, two GPUs
    ("GPU-p1,NVIDIA,12000,70:GPU-p2,NVIDIA,12000,70:;",
     [[s("GPU-p1", 12000, 70), s("GPU-p2", 12000, 70)]]),
    # a container without GPUs keeps its empty entry
    (";GPU-p2,NVIDIA,500,10:;", [[], [s("GPU-p2", 500, 10)]]),
    # the device plugin served the first container (init) and wrote the string back
    (";GPU-p2,NVIDIA,2048,0:;;", [[], [s("GPU-p2", 2048, 0)], []]),
    # ... and then the second: only empty entries remain
    (";;;;", [[], [], [], []]),
    ("", []),
]  # fmt: skip


@pytest.mark.parametrize(("value", "expected"), EXAMPLES)
def test_worked_examples_decode(value, expected):
    assert decode_hami_pod_devices(value, "nvidia") == expected


@pytest.mark.parametrize(("value", "decoded"), EXAMPLES)
def test_worked_examples_encode_to_the_same_text(value, decoded):
    assert encode_hami_pod_devices(decoded, "nvidia") == value


def test_any_number_of_trailing_empty_entries_is_tolerated():
    for tail in range(6):
        decoded = decode_hami_pod_devices("GPU-p1,NVIDIA,5,0:;" + ";" * tail, "nvidia")
        assert decoded[0] == [s("GPU-p1", 5, 0)]
        assert decoded[1:] == [[]] * tail


def test_unterminated_entries_and_devices_still_count():
    assert decode_hami_pod_devices("GPU-p1,NVIDIA,5,1", "nvidia") == [[s("GPU-p1", 5, 1)]]
    assert decode_hami_pod_devices("a,T,1,1:;b,T,2,2", "amd") == [
        [s("a", 1, 1, "T")],
        [s("b", 2, 2, "T")],
    ]


def test_fields_past_the_fourth_are_ignored():
    assert decode_hami_pod_devices("GPU-p1,NVIDIA,5,1,future,x:;", "nvidia") == [
        [s("GPU-p1", 5, 1)]
    ]


def test_type_is_kept_as_written_amd_puts_the_model_there():
    decoded = decode_hami_pod_devices("gpu-a1,AMD Instinct MI300X,1024,10:;", "amd")
    assert decoded == [[s("gpu-a1", 1024, 10, "AMD Instinct MI300X")]]


def test_go_integer_syntax_and_int32_bounds():
    decoded = decode_hami_pod_devices("a,T,+7,2147483647:;", "x")
    assert decoded == [[s("a", 7, 2**31 - 1, "T")]]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("GPU-p1,NVIDIA,5:;", "container entry 0, device 0: 3 fields"),
        (";GPU-p1:;", "container entry 1, device 0: 'GPU-p1' has no ','"),
        ("a,T,1,1:,T,1,1:;", "container entry 0, device 1: empty device UUID"),
        ("a,,1,1:;", "empty device type"),
        ("a,T,-1,1:;", "MEM -1 is negative"),
        ("a,T,1,-1:;", "CORES -1 is negative"),
        ("a,T,2147483648,1:;", "MEM 2147483648 does not fit in int32"),
        ("a,T,1, 2:;", "CORES ' 2' is not an integer"),
        ("a,T,1.5,2:;", "MEM '1.5' is not an integer"),
        ("a,T,1,9" + "9" * 40 + ":;", "is not an integer"),
        ("\udc80,T,1,1:;", "not valid UTF-8"),
    ],
)
def test_malformed_names_entry_and_device(value, expected):
    with pytest.raises(CodecError) as caught:
        decode_hami_pod_devices(
            value, "nvidia", key="hami.io/vgpu-devices-allocated", pod="ml/train-0"
        )
    assert expected in str(caught.value)
    assert "'hami.io/vgpu-devices-allocated' of pod 'ml/train-0'" in str(caught.value)


@pytest.mark.parametrize("value", [None, 3, b"a,T,1,1:;", ["a"]])
def test_non_text_is_refused(value):
    with pytest.raises(CodecError, match="must be a string"):
        decode_hami_pod_devices(value, "nvidia")


# --- encoder ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (("a:b", "T", 1, 1), "uuid 'a:b' contains one of HAMi's separators"),
        (("a", "T;", 1, 1), "type 'T;' contains one of HAMi's separators"),
        (("", "T", 1, 1), "uuid must be a non-empty string"),
        (("a", "T", -1, 1), "memory_mib = -1 is out of range"),
        (("a", "T", 1, 2**31), "cores = 2147483648 is out of range"),
        (("a", "T", True, 1), "memory_mib must be an integer"),
    ],
)
def test_slices_that_hami_cannot_carry_are_refused(fields, expected):
    with pytest.raises(CodecError, match="invalid HAMi device slice") as caught:
        HamiSlice(*fields)
    assert expected in str(caught.value)


def test_encoder_refuses_non_slices_and_oversized_values():
    with pytest.raises(CodecError, match="container entry 0, device 0: expected a HamiSlice"):
        encode_hami_pod_devices([["a,T,1,1"]], "nvidia")  # type: ignore[list-item]
    with pytest.raises(CodecError, match="container entry 0 must be a list"):
        encode_hami_pod_devices(["a,T,1,1"], "nvidia")  # type: ignore[list-item]
    many = [[s(f"GPU-{i:06d}", 1000, 10) for i in range(MAX_VALUE_BYTES // 20)]]
    with pytest.raises(CodecError, match=r"of pod 'ns/big'.*refusing to write") as caught:
        encode_hami_pod_devices(many, "nvidia", pod="ns/big")
    assert f"at most {MAX_VALUE_BYTES} bytes" in str(caught.value)


@CODEC_SETTINGS
@given(HAMI_POD)
def test_round_trip(pod):
    text = encode_hami_pod_devices(pod, "nvidia")
    assert decode_hami_pod_devices(text, "nvidia") == pod
    assert encode_hami_pod_devices(decode_hami_pod_devices(text, "nvidia"), "nvidia") == text


# --- to a PodAssignment -------------------------------------------------------------------


def test_assignment_maps_entries_to_init_then_app_containers():
    nvidia = decode_hami_pod_devices("GPU-p1,NVIDIA,2000,0:;;GPU-p1,NVIDIA,3000,100:;;;", "nvidia")
    amd = decode_hami_pod_devices(";;a1,AMD,100,5:;", "amd")
    result = hami_pod_assignment(
        "node-3",
        {"nvidia": nvidia, "amd": amd},
        containers=["app", "sidecar"],
        init_containers=["fetch"],
        pod="ml/job-1",
        device_index={"GPU-p1": 5},
    )
    assert result == PodAssignment(
        node="node-3",
        containers=(
            ContainerAssignment(
                container="fetch",
                vendor="nvidia",
                init=True,
                devices=(
                    DeviceSlice(device_id="GPU-p1", index=5, memory_mib=2000, compute_percent=0),
                ),
            ),
            ContainerAssignment(
                container="sidecar",
                vendor="amd",
                devices=(DeviceSlice(device_id="a1", memory_mib=100, compute_percent=5),),
            ),
            ContainerAssignment(
                container="sidecar",
                vendor="nvidia",
                devices=(
                    DeviceSlice(
                        device_id="GPU-p1", index=5, memory_mib=3000, compute_percent=100,
                    ),
                ),
            ),
        ),
    )  # fmt: skip


def test_assignment_of_a_fully_served_pod_is_empty():
    decoded = decode_hami_pod_devices(";;;;;;", "nvidia")
    assert hami_pod_assignment("n", {"nvidia": decoded}, ["a", "b"]).containers == ()


def test_assignment_refuses_devices_past_the_last_container():
    decoded = decode_hami_pod_devices(";;GPU-p1,NVIDIA,1,1:;", "nvidia")
    with pytest.raises(CodecError, match="nvidia entry 2 has devices but the pod has only 2"):
        hami_pod_assignment("n", {"nvidia": decoded}, ["a"], ["i"], pod="ns/p")


def test_assignment_refuses_cores_that_are_not_a_percent_unless_converted():
    decoded = decode_hami_pod_devices("m0,Mthreads,4096,16:;", "mthreads")
    with pytest.raises(CodecError, match="CORES 160 of device 'm0' is not a percent") as caught:
        hami_pod_assignment("n", {"mthreads": [[s("m0", 4096, 160, "Mthreads")]]}, ["a"])
    assert "pass to_percent" in str(caught.value)
    result = hami_pod_assignment(
        "n",
        {"mthreads": decoded},
        ["a"],
        to_percent=lambda vendor, item: item.cores * 100 // 16,  # 16 cores make one GPU
    )
    assert result.containers[0].devices[0].compute_percent == 100
    # Held by its compute, not as exclusive: an over-committed device has room beside it.
    assert result.containers[0].devices[0].exclusive is False


def test_assignment_reports_bad_conversions_as_codec_errors():
    decoded = decode_hami_pod_devices("a,T,1,1:;", "x")
    with pytest.raises(CodecError, match="x entry 0: compute_percent"):
        hami_pod_assignment("n", {"x": decoded}, ["c"], to_percent=lambda v, i: 101)
    with pytest.raises(CodecError, match="node"):
        hami_pod_assignment("", {"x": decoded}, ["c"])


def test_slices_with_text_utf8_cannot_carry_are_refused():
    with pytest.raises(CodecError, match="uuid is not valid UTF-8"):
        HamiSlice("GPU-\ud800", "NVIDIA", 1, 1)
