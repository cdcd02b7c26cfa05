"""Node inventory annotation: format, validation, version and size rules."""

import json

import pytest
from codec_strategies import CODEC_SETTINGS, inventories
from hypothesis import given

from xpushare.codec import (
    MAX_VALUE_BYTES,
    Inventory,
    decode_inventory,
    encode_inventory,
    inventory_key,
)
from xpushare.errors import CodecError
from xpushare.models import Device, LinkKind, PartitionProfile, TopologyLink

KEY = "xpushare.io/inventory-nvidia"


def gpu(uuid: str = "GPU-1", index: int = 0, **fields: object) -> Device:
    values: dict[str, object] = {"model": "NVIDIA L40S", "memory_mib": 46068, **fields}
    return Device(vendor="nvidia", id=uuid, index=index, **values)  # type: ignore[arg-type]


def test_encodes_compact_json_with_version_first():
    value = encode_inventory("nvidia", "gpu-node-1", [gpu()])
    assert value.startswith('{"v":1,"vendor":"nvidia","node":"gpu-node-1","devices":[{')
    assert value.endswith('"state":"ok","message":""}')
    assert value == json.dumps(json.loads(value), separators=(",", ":"), ensure_ascii=False)


def test_round_trip_keeps_every_device_field():
    device = gpu(
        "GPU-9",
        3,
        compute_units=142,
        share_slots=4,
        numa_node=1,
        pci_bus_id="0000:41:00.0",
        healthy=False,
        mode="mig",
        partitions=(PartitionProfile(name="1g.12gb", memory_mib=11008, compute_percent=14),),
        links=(TopologyLink(peer="GPU-1", kind=LinkKind.NVLINK, count=4),),
        extra={"driver": "550.54", "cuda": "12.4"},
    )
    inventory = decode_inventory(KEY, encode_inventory("nvidia", "n1", [gpu(), device]))
    assert inventory == Inventory(vendor="nvidia", node="n1", devices=(gpu(), device), state="ok")


def test_state_defaults_from_the_devices_and_error_is_kept_apart():
    empty = decode_inventory(KEY, encode_inventory("nvidia", "n1", []))
    assert (empty.state, empty.devices) == ("no-devices", ())
    failed = decode_inventory(
        KEY, encode_inventory("nvidia", "n1", [], state="error", message="NVML: driver not loaded")
    )
    assert (failed.state, failed.message) == ("error", "NVML: driver not loaded")


def test_equal_inventories_encode_equally_whatever_the_extra_order():
    first = encode_inventory("nvidia", "n", [gpu(extra={"a": "1", "b": "2"})])
    second = encode_inventory("nvidia", "n", [gpu(extra={"b": "2", "a": "1"})])
    assert first == second


@pytest.mark.parametrize(
    ("devices", "state", "expected"),
    [
        ([], "ok", "state 'ok' with no devices"),
        ([gpu()], "no-devices", "state 'no-devices' with 1 devices"),
        ([gpu(), gpu()], None, "device id 'GPU-1' appears twice"),
        ([gpu().model_copy(update={"vendor": "amd"})], None, "belongs to vendor 'amd'"),
    ],
)
def test_encoder_refuses_inconsistent_inventories(devices, state, expected):
    with pytest.raises(CodecError) as caught:
        encode_inventory("nvidia", "node-a", devices, state=state)
    assert expected in str(caught.value)
    assert "of node 'node-a'" in str(caught.value)


def test_encoder_refuses_values_past_the_limit_and_names_the_node():
    big = gpu(extra={f"k{i}": "x" * 100 for i in range(MAX_VALUE_BYTES // 100)})
    with pytest.raises(CodecError) as caught:
        encode_inventory("nvidia", "node-b", [big])
    message = str(caught.value)
    assert "'xpushare.io/inventory-nvidia' of node 'node-b'" in message
    assert f"at most {MAX_VALUE_BYTES} bytes" in message
    assert "1 devices" in message


def test_encoder_refuses_numbers_it_could_not_read_back():
    with pytest.raises(CodecError, match="does not fit in 64 bits"):
        encode_inventory("nvidia", "n", [gpu(memory_mib=2**64)])


def test_encoder_refuses_bad_vendor_names():
    with pytest.raises(CodecError, match="lower-case DNS label"):
        encode_inventory("NVIDIA", "n", [])


def test_unknown_version_says_what_this_core_reads():
    with pytest.raises(CodecError) as caught:
        decode_inventory(KEY, '{"v":2,"vendor":"nvidia","node":"n","lanes":[]}')
    message = str(caught.value)
    assert "format version 2" in message
    assert "reads format version 1 only" in message
    assert "upgrade" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"vendor":"nvidia"}', "no format version field 'v'"),
        ('{"v":"1","vendor":"nvidia"}', "format version 'v' must be an integer, got '1'"),
        ('{"v":true,"vendor":"nvidia"}', "must be an integer, got True"),
        ('{"v":0}', "unknown format version 0"),
        ("[1]", "expected a JSON object, got a list"),
        ('{"v":1,"vendor":"nvidia","node":"n","state":"ok","devices":[],"x":1}', "x: Extra"),
        ('{"v":1,"vendor":"nvidia","node":"n","state":"maybe"}', "state: Input should be"),
        (
            '{"v":1,"vendor":"nvidia","node":"n","state":"ok","devices":[{"vendor":"nvidia",'
            '"id":"g","index":0,"model":"m","memory_mib":"5"}]}',
            "devices[0].memory_mib: Input should be a valid integer",
        ),
        (
            '{"v":1,"vendor":"nvidia","node":"n","state":"ok","devices":[{"vendor":"nvidia",'
            '"id":"g","index":0,"model":"m","memory_mib":5.0}]}',
            "devices[0].memory_mib",
        ),
        ('{"v":1,"vendor":"amd","node":"n","state":"no-devices"}', "inventory of vendor 'amd'"),
    ],
)
def test_malformed_values_are_refused_precisely(value, expected):
    with pytest.raises(CodecError) as caught:
        decode_inventory(KEY, value)
    assert expected in str(caught.value)
    assert KEY in str(caught.value)


def test_errors_name_the_node_once_it_is_known():
    with pytest.raises(CodecError, match=r"of node 'gpu-7'.*state"):
        decode_inventory(KEY, '{"v":1,"vendor":"nvidia","node":"gpu-7","state":"ok"}')


@pytest.mark.parametrize("key", ["xpushare.io/assignment", "xpushare.io/inventory-", 7, None])
def test_key_must_be_an_inventory_key(key):
    with pytest.raises(CodecError, match="not an xpushare inventory key"):
        decode_inventory(key, encode_inventory("nvidia", "n", []))


@CODEC_SETTINGS
@given(inventories())
def test_round_trip(inventory):
    key = inventory_key(inventory.vendor)
    value = encode_inventory(
        inventory.vendor, inventory.node, inventory.devices, inventory.state, inventory.message
    )
    assert decode_inventory(key, value) == inventory
    again = decode_inventory(key, value)
    assert encode_inventory(
        again.vendor, again.node, again.devices, again.state, again.message
    ) == (value)
