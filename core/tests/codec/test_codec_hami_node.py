"""HAMi node registration reader: both encodings, with HAMi's parsing rules (research §2.2)."""

import json

import pytest

from xpushare.codec import decode_hami_node_devices
from xpushare.errors import CodecError
from xpushare.models import PartitionProfile

# --- (a) JSON list ------------------------------------------------------------------------

# Two H100s as a v2.8+ NVIDIA plugin registers them. Go's omitempty drops zero values, so
# the first GPU (index 0, NUMA 0) carries neither key.
TWO_GPUS = json.dumps(
    [
        {
            "id": "GPU-11111111-2222-3333-4444-555555555555",
            "count": 4,
            "devmem": 95830,
            "devcore": 200,
            "type": "NVIDIA H100 80GB HBM3",
            "mode": "hami-core",
            "health": True,
        },
        {
            "id": "GPU-66666666-7777-8888-9999-000000000000",
            "index": 1,
            "count": 4,
            "devmem": 95830,
            "devcore": 200,
            "type": "NVIDIA H100 80GB HBM3",
            "numa": 1,
            "mode": "hami-core",
            "health": True,
        },
    ]
)


def test_json_list_maps_every_field():
    first, second = decode_hami_node_devices(TWO_GPUS, "nvidia")
    assert first.vendor == "nvidia"
    assert first.id == "GPU-11111111-2222-3333-4444-555555555555"
    assert (first.index, first.numa_node) == (0, 0)  # omitted zero values
    assert (second.index, second.numa_node) == (1, 1)
    assert first.memory_mib == 95830
    assert first.share_slots == 4
    assert first.model == "NVIDIA H100 80GB HBM3"
    assert first.healthy is True
    assert first.mode == "shared"
    assert first.extra == {"hami.devcore": "200", "hami.mode": "hami-core"}
    assert first.partitions == ()


def test_json_missing_health_means_unhealthy():
    # omitempty hides health:false: a device without the key is not healthy.
    (device,) = decode_hami_node_devices('[{"id":"GPU-a","count":2,"devmem":100}]', "nvidia")
    assert device.healthy is False
    assert device.model == "unknown"  # empty type
    assert device.mode == "shared"
    assert device.extra == {"hami.devcore": "0"}


def test_json_keys_match_case_insensitively_like_go_exact_key_wins():
    value = '[{"ID":"GPU-a","DevMem":7,"devmem":9,"COUNT":3,"Health":true}]'
    (device,) = decode_hami_node_devices(value, "nvidia")
    assert device.id == "GPU-a"
    assert device.memory_mib == 9  # the exact tag beats the folded one
    assert device.share_slots == 3
    assert device.healthy is True


def test_json_unknown_keys_and_migtemplate_are_ignored():
    value = json.dumps(
        [
            {
                "id": "a",
                "count": 1,
                "devmem": 5,
                "devicevendor": "NVIDIA",
                "migtemplate": [[{"name": "x"}]],
                "laterField": {"anything": [1, 2]},
                "health": True,
            }
        ]
    )
    (device,) = decode_hami_node_devices(value, "nvidia")
    assert device.id == "a"


def test_json_mig_profiles_become_partitions():
    profiles = [
        # seven one-slice placements: seven instances at once
        {
            "name": "1g.10gb",
            "memoryMB": 9856,
            "core": 15,
            "sliceCount": 1,
            "placements": [{"start": i, "size": 1} for i in range(7)],
        },
        # placements at 0, 2, 4 of size 2 do not overlap: three at once
        {
            "name": "2g.20gb",
            "memoryMB": 19968,
            "core": 29,
            "sliceCount": 2,
            "placements": [{"start": s, "size": 2} for s in (0, 2, 4)],
        },
        # overlapping placements (0-4, 2-6, 4-8): only two can be in use together
        {
            "name": "4g.40gb",
            "memoryMB": 40192,
            "core": 58,
            "sliceCount": 4,
            "placements": [{"start": s, "size": 4} for s in (0, 2, 4)],
        },
        # no placement: can never be placed, so left out
        {"name": "7g.80gb", "memoryMB": 80000, "core": 100, "sliceCount": 7, "placements": None},
    ]
    value = json.dumps(
        [{"id": "GPU-m", "count": 7, "devmem": 81920, "devcore": 100, "mode": "mig",
          "health": True, "migProfiles": profiles}]
    )  # fmt: skip
    (device,) = decode_hami_node_devices(value, "nvidia")
    assert device.mode == "mig"
    assert device.extra["hami.mode"] == "mig"
    assert device.partitions == (
        PartitionProfile(name="1g.10gb", memory_mib=9856, compute_percent=15, max_count=7),
        PartitionProfile(name="2g.20gb", memory_mib=19968, compute_percent=29, max_count=3),
        PartitionProfile(name="4g.40gb", memory_mib=40192, compute_percent=58, max_count=2),
    )


def test_json_custominfo_goes_to_extra():
    value = json.dumps(
        [{"id": "npu-0", "count": 1, "devmem": 65536, "health": True,
          "custominfo": {"NetworkID": "net-7", "AIC": 3, "Ports": [1, 2]}}]
    )  # fmt: skip
    (device,) = decode_hami_node_devices(value, "ascend")
    assert device.extra["hami.custominfo.NetworkID"] == "net-7"
    assert device.extra["hami.custominfo.AIC"] == "3"
    assert device.extra["hami.custominfo.Ports"] == "[1,2]"


def test_json_count_zero_is_an_unusable_device_not_an_error():
    (device,) = decode_hami_node_devices('[{"id":"a","devmem":1,"health":true}]', "nvidia")
    assert device.healthy is False
    assert device.share_slots == 1
    assert device.extra["hami.count"] == "0"


def test_json_negative_numa_means_unknown():
    (device,) = decode_hami_node_devices('[{"id":"a","count":1,"numa":-1}]', "nvidia")
    assert device.numa_node is None


@pytest.mark.parametrize("value", ["null", "[]", " [ ] "])
def test_json_empty_or_null_list_is_no_devices(value):
    assert decode_hami_node_devices(value, "nvidia") == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('[{"id":"a","count":"10"}]', "device 0 ('a'): field 'count' must be an integer"),
        ('[{"id":"a","count":10.0}]', "field 'count' must be an integer, got a number"),
        ('[{"id":"a","count":true}]', "field 'count' must be an integer, got a boolean"),
        ('[{"id":"a","health":"true"}]', "field 'health' must be true or false"),
        ('[{"id":"a","count":2147483648}]', "field 'count' = 2147483648 is out of range"),
        ('[{"id":"a","index":-1}]', "device 0 ('a'): index -1 is negative"),
        ('[{"id":"a","devmem":-5}]', "devmem -5 is negative"),
        ('[{"id":7}]', "field 'id' must be a string"),
        ('[{"count":1}]', "device 0: empty id"),
        ('[{"id":"a"},null]', "device 1 must be a JSON object, got null"),
        ('{"id":"a"}', "expected a JSON list of devices, got an object"),
        ('[{"id":"a","migProfiles":{}}]', "field 'migProfiles' must be a list"),
        ('[{"id":"a","migProfiles":[{"name":"x","core":120,"placements":[]}]}]', "core 120"),
        ('[{"id":"a","migProfiles":[{"name":"1g","placements":[{"start":-1}]}]}]', "'start'"),
        ('[{"id":"a","custominfo":[1]}]', "field 'custominfo' must be an object"),
        ('[{"id":"a","count":1},{"id":"a","count":1}]', "device 1: id 'a' appears twice"),
        ('[{"id":"a","count":NaN}]', "NaN is not a JSON number"),
        ('[{"id":"a","count":1e999}]', "number at [0].count is too large"),
        ('[{"id":"a"', "invalid JSON at character"),
    ],
)
def test_json_malformed_names_the_device_and_field(value, expected):
    with pytest.raises(CodecError) as caught:
        decode_hami_node_devices(value, "nvidia", key="hami.io/node-nvidia-register", node="n7")
    message = str(caught.value)
    assert expected in message
    assert "'hami.io/node-nvidia-register' of node 'n7'" in message


# --- (b) legacy colon/comma string -------------------------------------------------------

NINE = (
    "GPU-v1,8,16384,100,NVIDIA-Tesla T4,0,true,0,hami-core:"
    "GPU-v2,8,16384,100,NVIDIA-Tesla T4,1,false,1,mig:"
)


def test_legacy_nine_fields():
    first, second = decode_hami_node_devices(NINE, "nvidia")
    assert (first.id, first.index, first.numa_node, first.healthy) == ("GPU-v1", 0, 0, True)
    assert (second.id, second.index, second.numa_node, second.healthy) == ("GPU-v2", 1, 1, False)
    assert first.share_slots == 8
    assert first.memory_mib == 16384
    assert first.model == "NVIDIA-Tesla T4"
    assert first.mode == "shared"
    assert second.mode == "mig"
    assert second.extra == {"hami.devcore": "100", "hami.mode": "mig"}


def test_legacy_seven_fields_mean_index_zero_and_hami_core():
    (device,) = decode_hami_node_devices("DCU-0,4,32768,100,DCU Z100,1,true:", "hygon")
    assert device.vendor == "hygon"
    assert device.index == 0
    assert device.mode == "shared"
    assert device.extra["hami.mode"] == "hami-core"
    assert device.numa_node == 1


@pytest.mark.parametrize("word", ["1", "t", "T", "TRUE", "true", "True"])
def test_legacy_health_takes_go_parsebool_true(word):
    (device,) = decode_hami_node_devices(f"a,1,2,3,M,0,{word}:", "hygon")
    assert device.healthy is True


@pytest.mark.parametrize("word", ["0", "f", "F", "FALSE", "false", "False"])
def test_legacy_health_takes_go_parsebool_false(word):
    (device,) = decode_hami_node_devices(f"a,1,2,3,M,0,{word}:", "hygon")
    assert device.healthy is False


@pytest.mark.parametrize("word", ["yes", "tRUE", " true", "", "2"])
def test_legacy_health_refuses_what_parsebool_refuses(word):
    with pytest.raises(CodecError, match="field 'health'"):
        decode_hami_node_devices(f"a,1,2,3,M,0,{word}:", "hygon")


def test_legacy_empty_segments_and_trailing_separators_are_skipped():
    value = "::a,1,2,3,M,0,true:::b,1,2,3,M,0,true::"
    assert [d.id for d in decode_hami_node_devices(value, "hygon")] == ["a", "b"]


def test_legacy_only_separators_is_no_devices():
    assert decode_hami_node_devices(":", "hygon") == []


def test_legacy_go_integer_syntax():
    (device,) = decode_hami_node_devices("a,+3,0010,3,M,-0,true,+2,hami-core:", "hygon")
    assert (device.share_slots, device.memory_mib, device.index, device.numa_node) == (3, 10, 2, 0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a,1,2,3,M,0,true", "no ':' device separator"),  # the terminator is required
        ("a,1,2,3,M,0,true,1:", "8 comma-separated fields, expected 7"),
        ("a,1,2,3,M,0:", "6 comma-separated fields"),
        ("junk:", "1 comma-separated fields"),
        ("a,1,2,3,M,0,true,-1,hami-core:", "index -1 is negative"),
        ("a,2147483648,2,3,M,0,true:", "field 'count' = 2147483648 is out of range"),
        ("a, 1,2,3,M,0,true:", "field 'count' = ' 1' is not an integer"),
        ("a,1_0,2,3,M,0,true:", "field 'count' = '1_0' is not an integer"),
        ("a,\u0661,2,3,M,0,true:", "is not an integer"),  # an Arabic-Indic digit one
        ("a,1,-2,3,M,0,true:", "devmem -2 is negative"),
        (",1,2,3,M,0,true:", "device 0: empty id"),
        ("a,1,2,3,M,0,true:a,1,2,3,M,0,true:", "id 'a' appears twice"),
        # separators are not escaped: a model with ':' splits the device in two
        ("a,1,2,3,Card:X,0,true:", "comma-separated fields"),
    ],
)
def test_legacy_malformed(value, expected):
    with pytest.raises(CodecError) as caught:
        decode_hami_node_devices(value, "hygon", key="hami.io/node-dcu-register")
    assert expected in str(caught.value)
    assert "'hami.io/node-dcu-register'" in str(caught.value)


def test_legacy_device_positions_count_only_devices():
    with pytest.raises(CodecError, match="device 1 \\('b'\\): field 'numa'"):
        decode_hami_node_devices("::a,1,2,3,M,0,true::b,1,2,3,M,x,true:", "hygon")


@pytest.mark.parametrize("value", ["", "   ", "\ud800:", None, 5, b"a,1:"])
def test_empty_and_non_text_values_are_refused(value):
    with pytest.raises(CodecError):
        decode_hami_node_devices(value, "nvidia")


def test_int32_bounds_are_inclusive():
    (device,) = decode_hami_node_devices("a,2147483647,2147483647,-2147483648,M,0,1:", "x")
    assert device.share_slots == 2**31 - 1
    assert device.extra["hami.devcore"] == "-2147483648"
