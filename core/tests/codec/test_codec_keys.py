"""Annotation keys: ours, and the catalogue of HAMi's per vendor (research §2.1, §8.1)."""

import pytest

from xpushare.codec import (
    ASSIGNMENT_KEY,
    HAMI_CHIP_VENDORS,
    HAMI_ILUVATAR_CHIPS,
    HAMI_KEYS,
    HANDOFF_KEY,
    HamiKeys,
    hami_keys,
    inventory_key,
    vendor_of_inventory_key,
)
from xpushare.errors import CodecError


def test_our_keys():
    assert ASSIGNMENT_KEY == "xpushare.io/assignment"
    assert HANDOFF_KEY == "xpushare.io/handoff"
    assert inventory_key("nvidia") == "xpushare.io/inventory-nvidia"


@pytest.mark.parametrize("vendor", ["nvidia", "metax-sgpu", "a" * 53])
def test_inventory_keys_round_trip_to_their_vendor(vendor):
    assert vendor_of_inventory_key(inventory_key(vendor)) == vendor


@pytest.mark.parametrize("vendor", ["", "NVIDIA", "-x", "x_y", "a" * 54, None, 3])
def test_inventory_key_refuses_names_kubernetes_would_refuse(vendor):
    with pytest.raises(CodecError, match="lower-case DNS label of at most 53"):
        inventory_key(vendor)


@pytest.mark.parametrize(
    "key", ["xpushare.io/assignment", "xpushare.io/inventory-", "xpushare.io/inventory-A", 5]
)
def test_vendor_of_other_keys_is_none(key):
    assert vendor_of_inventory_key(key) is None


def test_nvidia_keys():
    assert hami_keys("nvidia") == HamiKeys(
        vendor="nvidia",
        hami_type="NVIDIA",
        register="hami.io/node-nvidia-register",
        register_format="json",
        allocated="hami.io/vgpu-devices-allocated",
        to_allocate="hami.io/vgpu-devices-to-allocate",
    )


@pytest.mark.parametrize(
    ("vendor", "register", "register_format", "allocated"),
    [
        ("amd", "hami.io/node-amd-register", "json", "hami.io/amd-devices-allocated"),
        ("hygon", "hami.io/node-dcu-register", "legacy", "hami.io/dcu-devices-allocated"),
        ("cambricon", None, None, "hami.io/cambricon-mlu-devices-allocated"),
        ("mthreads", None, None, "hami.io/mthreads-vgpu-devices-allocated"),
        ("metax", None, None, "hami.io/metax-gpu-devices-allocated"),
        ("metax-sgpu", "metax-tech.com/node-gpu-devices", "foreign",
         "hami.io/metax-sgpu-devices-allocated"),
        ("kunlun", None, None, "hami.io/kunlun-allocated"),
        ("kunlun-vxpu", "hami.io/node-register-xpu", "json", "hami.io/xpu-devices-allocated"),
        ("enflame", None, None, "hami.io/enflame-gcu-devices-allocated"),
        ("enflame-drs", "enflame.com/gcu-drs-capacity", "foreign",
         "hami.io/enflame-vgpu-devices-allocated"),
        ("awsneuron", None, None, "hami.io/aws-neuron-devices-allocated"),
        ("vastai", "hami.io/node-va-register", "json", "hami.io/Vastai-devices-allocated"),
        ("biren", "hami.io/node-biren-register", "json", "hami.io/Biren-devices-allocated"),
    ],
)  # fmt: skip
def test_other_vendor_keys(vendor, register, register_format, allocated):
    keys = hami_keys(vendor)
    assert (keys.register, keys.register_format, keys.allocated) == (
        register,
        register_format,
        allocated,
    )
    # a register annotation and its format come together
    assert (keys.register is None) == (keys.register_format is None)


def test_chip_vendors_embed_the_chip():
    ascend = hami_keys("ascend", "Ascend910B3")
    assert ascend.register == "hami.io/node-register-Ascend910B3"
    assert ascend.register_format == "json"
    assert ascend.allocated == "hami.io/Ascend910B3-devices-allocated"
    assert ascend.to_allocate == "hami.io/Ascend910B3-devices-to-allocate"
    for chip in HAMI_ILUVATAR_CHIPS:
        iluvatar = hami_keys("iluvatar", chip)
        assert iluvatar.register == f"hami.io/node-{chip}-register"
        assert iluvatar.register_format == "legacy"
        assert iluvatar.allocated == f"hami.io/{chip}-devices-allocated"
    assert {"ascend", "iluvatar"} == HAMI_CHIP_VENDORS


@pytest.mark.parametrize(
    ("vendor", "chip", "expected"),
    [
        ("ascend", None, "embed a chip name"),
        ("iluvatar", "MR V100", "embed a chip name"),
        ("nvidia", "A100", "do not depend on a chip"),
        ("intel", None, "no HAMi annotation keys are known for vendor 'intel'"),
    ],
)
def test_hami_keys_refuses_what_it_cannot_answer(vendor, chip, expected):
    with pytest.raises(CodecError, match=expected):
        hami_keys(vendor, chip)


def test_catalogue_is_read_only_and_keyed_by_our_vendor_names():
    assert all(name == keys.vendor for name, keys in HAMI_KEYS.items())
    with pytest.raises(TypeError):
        HAMI_KEYS["x"] = HAMI_KEYS["nvidia"]  # type: ignore[index]


def test_a_handoff_lease_is_named_after_its_node_and_a_long_name_is_digested():
    from xpushare.codec import handoff_lease_name

    assert handoff_lease_name("gpu-1.example.com") == "handoff.gpu-1.example.com"
    # Node names are DNS subdomains of up to 253 characters; with the prefix a long one
    # would not be a valid Lease name, so it is digested (still one name per node).
    long_a = ".".join(["a" * 63] * 3) + "." + "b" * 61
    long_b = long_a[:-1] + "c"
    assert len(long_a) == 253
    names = {handoff_lease_name(long_a), handoff_lease_name(long_b)}
    assert len(names) == 2
    for name in names:
        assert name.startswith("handoff-") and len(name) <= 253
    assert handoff_lease_name("x" * 245) == "handoff." + "x" * 245
    assert handoff_lease_name("x" * 246).startswith("handoff-")
