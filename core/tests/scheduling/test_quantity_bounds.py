"""Quantities from pod specs are untrusted: bounded cost, and refused beyond what they can mean.

"1e999999" used to freeze the scheduler for half a minute (rounding it built a million-digit
integer) and "1e999999999" raised decimal.Overflow; a quantity is now checked as text first.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import pytest

from xpushare.models import (
    API_VERSION,
    ContainerRequest,
    ContainerView,
    PodRef,
    PodView,
    ResourceNames,
    VendorSpec,
)
from xpushare.models.request import MAX_DEVICE_COUNT, MAX_DEVICE_MEMORY_MIB
from xpushare.placement import Placer
from xpushare.plugins import PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS, mock
from xpushare.plugins.builtin.defaults import xpushare_resource_request
from xpushare.scheduling import UsageLedger
from xpushare.scheduling.quantity import (
    MAX_QUANTITY,
    MAX_QUANTITY_CHARS,
    QuantityError,
    QuantityRangeError,
    cpu_millis,
    memory_mib,
    parse_quantity,
)

NVIDIA = VendorSpec(
    name="nvidia",
    api_version=API_VERSION,
    resource_names=ResourceNames(
        count="nvidia.com/gpu",
        memory="nvidia.com/gpumem",
        memory_percent="nvidia.com/gpumem-percentage",
        compute="nvidia.com/gpucores",
    ),
)

HOSTILE = [
    "1e999999",
    "1e999999999",
    "-1e999999999",
    "1e5000",
    "9" * 4000,
    "1" + "0" * 100_000,
    "0." + "0" * 100_000 + "1",
    "9223372036854775808",  # 2^63
    "8Ei",  # 2^63 as well
    "1e19",
    "99999999999999999999k",
]


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: t[:20])
def test_hostile_quantities_are_refused_before_any_arithmetic(text: str) -> None:
    started = time.perf_counter()
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)
    # Bounded cost: microseconds (the limit is generous for a loaded machine; the freeze it
    # guards against lasted 26-31 s).
    assert time.perf_counter() - started < 0.5
    message = str(err.value)
    assert len(message) < 200  # never the whole text: messages are copied per node
    if len(text) <= MAX_QUANTITY_CHARS:
        assert isinstance(err.value, QuantityRangeError)
        assert "2^63-1" in message
    else:
        assert f"at most {MAX_QUANTITY_CHARS}" in message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1Gi", Decimal(2**30)),
        ("1.5Mi", Decimal(1572864)),
        ("1E", Decimal(10**18)),  # exa, not an exponent
        ("1e3", Decimal(1000)),
        ("1.5e-3", Decimal("0.0015")),
        ("+.5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("-5", Decimal(-5)),
        ("0e999999999", Decimal(0)),  # zero, whatever its exponent
        ("1e-999999999", Decimal("1e-9")),  # below 1n: rounded up to it, as Kubernetes does
        (str(MAX_QUANTITY), Decimal(MAX_QUANTITY)),
        ("7Ei", Decimal(7 * 2**60)),
    ],
)
def test_quantities_kubernetes_can_hold_keep_their_value(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_conversions_are_exact() -> None:
    # One byte above 1 MiB is 2 MiB when rounded up, however many decimals it is written with.
    assert memory_mib("1048576.0000000000000000000000000001") == 2
    assert memory_mib("1.5Mi", round_up=False) == 1
    assert cpu_millis("0.0001") == 1
    assert cpu_millis(str(MAX_QUANTITY)) == MAX_QUANTITY * 1000


@pytest.mark.parametrize("text", ["1e3Ki", "1.2.3", "two", "", ".", "1e", "0x10", "1 Gi"])
def test_what_is_not_a_quantity_is_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def parse(limits: dict[str, str], vendor: VendorSpec = NVIDIA) -> Any:
    container = ContainerView(name="c", limits=limits)
    pod = PodView(ref=PodRef(namespace="ml", name="p"), containers=(container,))
    return xpushare_resource_request(vendor=vendor, pod=pod, container=container)


@pytest.mark.parametrize("value", ["1e999999", "1e999999999", "1e5000", "9Ei"])
def test_device_memory_beyond_a_quantity_names_container_field_and_limit(value: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ValueError) as err:
        parse({"nvidia.com/gpu": "1", "nvidia.com/gpumem": value})
    assert time.perf_counter() - started < 0.5
    message = str(err.value)
    assert "pod ml/p, container 'c'" in message
    assert "nvidia.com/gpumem" in message
    assert f"{MAX_DEVICE_MEMORY_MIB:,} MiB" in message and "ask for at most" in message


def test_device_memory_and_count_beyond_any_device_or_node_are_refused() -> None:
    with pytest.raises(ValueError, match=r"nvidia.com/gpumem is '16777217', above 16,777,216"):
        parse({"nvidia.com/gpumem": str(MAX_DEVICE_MEMORY_MIB + 1)})
    assert parse({"nvidia.com/gpumem": str(MAX_DEVICE_MEMORY_MIB)}).memory_mib == 2**24
    # In the vendor's units: 2^16 units of 256 MiB are 16 TiB.
    units = NVIDIA.model_copy(update={"memory_unit_mib": 256})
    with pytest.raises(ValueError, match="at most 65,536 \\(units of 256 MiB\\)"):
        parse({"nvidia.com/gpumem": "65537"}, units)
    with pytest.raises(ValueError, match=f"nvidia.com/gpu is '5000', above {MAX_DEVICE_COUNT:,}"):
        parse({"nvidia.com/gpu": "5000"})
    with pytest.raises(ValueError, match=r"nvidia\.com/gpucores is '1e999999'.*0 to 100"):
        parse({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "1e999999"})


def test_the_plugin_host_bounds_every_vendors_final_request() -> None:
    """A value with a unit may mean bytes to a vendor's wrapper (MetaX), so the core's parser
    leaves it alone; the host checks what the vendor finally asks, for every vendor: read as
    a count of MiB (8,589,934,592 MiB here), it is refused with the MiB it likely meant."""
    host = PluginHost(core_plugins=CORE_PLUGINS)
    host.register("mock", mock)
    placer = Placer(UsageLedger(), "binpack", host=host)
    container = ContainerView(
        name="main", limits={"xpushare.io/mock-gpu": "1", "xpushare.io/mock-gpumem": "8Gi"}
    )
    pod = PodView(ref=PodRef(namespace="ml", name="p"), containers=(container,))
    meant = r"'8Gi' read as bytes is 8192 MiB: write xpushare\.io/mock-gpumem: 8192"
    with pytest.raises(ValueError, match=meant):
        placer.request(pod)
    fine = container.model_copy(update={"limits": {"xpushare.io/mock-gpumem": "8000"}})
    request = placer.request(pod.model_copy(update={"containers": (fine,)}))
    assert [d.memory_mib for d in request.demands] == [8000]


def test_a_long_value_is_never_copied_whole_into_a_message() -> None:
    with pytest.raises(ValueError) as err:
        parse({"nvidia.com/gpu": "x" * 1_000_000})
    assert len(str(err.value)) < 300


def test_requests_within_the_bounds_are_unchanged() -> None:
    req = parse({"nvidia.com/gpu": "8", "nvidia.com/gpumem": "81920", "nvidia.com/gpucores": "50"})
    assert isinstance(req, ContainerRequest)
    assert (req.count, req.memory_mib, req.compute_percent) == (8, 81920, 50)
