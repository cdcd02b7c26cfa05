"""ResourceClaims and ResourceSlices (resource.k8s.io/v1) read into the few values placement needs.

Why by hand, bounded, and here: in DRA mode kube-scheduler allocates the devices and writes
the result into the claim's status (research/k8s-apis.md §6.1), and the extender ranks nodes
over what those results book (scheduler/drabook.py). A claim is written by users (its spec)
and by whoever may update claim status, so it is hostile input like a pod: every list is
bounded, every quantity is checked as text before any arithmetic (scheduling/quantity.py),
results of drivers that are not ours are ignored, and a malformed claim raises a
``ValueError`` naming the claim and the field, which the caller logs and never books.

Only our drivers count: ``<vendor>.xpushare.io`` (node/dra/slices.py), for a vendor this
scheduler has installed. Capacities are the ones our slices publish: ``memory`` in bytes
(booked in MiB, rounded up as kube-scheduler rounds requests) and ``cores`` in percent of the
device's compute. A result with no ``consumedCapacity`` is a device allocated whole (a device
that does not allow multiple allocations), so it books the whole device, exclusively.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from xpushare.models.request import MAX_DEVICE_COUNT, MAX_DEVICE_MEMORY_MIB, ContainerRequest
from xpushare.scheduler import objects as ob
from xpushare.scheduling.quantity import QuantityError, memory_mib, parse_quantity

#: The domain of our driver names (node/dra/slices.py ``DOMAIN``).
DRIVER_SUFFIX = ".xpushare.io"

#: Requests of one claim: the API allows 32 (``DeviceRequestsMaxSize``); more is not a claim
#: the API server accepted.
MAX_REQUESTS = 32
#: Sub-requests of one ``firstAvailable`` list (``FirstAvailableDeviceRequestMaxSize``: 8).
MAX_SUBREQUESTS = 8
#: Results of one allocation (``AllocationResultsMaxSize``: 32 requests, each of at most
#: 1,024 devices would be more than any node has; the API caps the results at 32 x 128).
MAX_RESULTS = 4096
#: Devices read from one slice: 128 is the API's cap (64 with taints).
MAX_SLICE_DEVICES = 128
#: Claims one pod names: the API allows 32 (``ResourceClaimsMaxSize`` of a pod spec).
MAX_POD_CLAIMS = 32
#: Longest name, pool, driver or device string kept: DNS subdomains are at most 253.
MAX_NAME_CHARS = 253
#: Longest UUID attribute kept (slice string attributes are at most 64 characters).
MAX_UUID_CHARS = 64


def vendor_of_driver(driver: Any, vendors: frozenset[str]) -> str | None:
    """The vendor whose driver *driver* is, if it is ours and that vendor is installed."""
    if not isinstance(driver, str) or not driver.endswith(DRIVER_SUFFIX):
        return None
    vendor = driver[: -len(DRIVER_SUFFIX)]
    return vendor if vendor in vendors else None


def _who(obj: Any) -> str:
    return f"ResourceClaim {ob.namespace(obj)}/{ob.name(obj) or '?'}"


def _list(value: Any, limit: int, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, not {ob.json_kind(value)}")
    if len(value) > limit:
        raise ValueError(f"{where} has {len(value)} entries, more than the API allows ({limit})")
    return value


def _dict(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object, not {ob.json_kind(value)}")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{where} must be a non-empty string of at most {MAX_NAME_CHARS} chars")
    return value


def _mib(value: Any, where: str) -> int:
    """Bytes as a quantity ("8Gi", "8589934592") to MiB, rounded up."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise ValueError(f"{where} must be a quantity, not {ob.json_kind(value)}")
    try:
        mib = memory_mib(value)
    except QuantityError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not 0 <= mib <= MAX_DEVICE_MEMORY_MIB:
        raise ValueError(f"{where} is {mib} MiB, outside 0..{MAX_DEVICE_MEMORY_MIB} MiB")
    return mib


def _percent(value: Any, where: str) -> int:
    """Cores as a quantity ("30") to a whole percent of the device, 0..100."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise ValueError(f"{where} must be a quantity, not {ob.json_kind(value)}")
    try:
        number = parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not 0 <= number <= 100:
        raise ValueError(f"{where} is {number}, outside 0..100 (percent of the device)")
    return math.ceil(number)


# -- the claim's spec: what it asks for ---------------------------------------------------------


def _exactly(
    exact: dict[str, Any], vendors: frozenset[str], container: str, where: str
) -> ContainerRequest | None:
    cls = exact.get("deviceClassName")
    # Our chart's DeviceClasses are named after their driver (templates/deviceclasses.yaml).
    vendor = vendor_of_driver(cls, vendors)
    if vendor is None or exact.get("adminAccess") is True:
        return None  # another driver's devices, or monitoring access that books nothing
    mode = exact.get("allocationMode") or "ExactCount"
    if mode != "ExactCount":
        # "All" takes every matching device of the node, a count only the node knows.
        return None
    count = exact.get("count", 1)
    if count is None:
        count = 1
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_DEVICE_COUNT:
        raise ValueError(f"{where}.count must be an integer in 1..{MAX_DEVICE_COUNT}")
    requests = _dict(_dict(exact.get("capacity"), f"{where}.capacity").get("requests"), where)
    memory = requests.get("memory")
    cores = requests.get("cores")
    return ContainerRequest(
        vendor=vendor,
        container=container,
        count=count,
        # None: the request policy's default, the whole device's memory (node/dra/slices.py).
        memory_mib=_mib(memory, f"{where}.capacity.requests.memory")
        if memory is not None
        else None,
        compute_percent=_percent(cores, f"{where}.capacity.requests.cores")
        if cores is not None
        else 0,
    )


def claim_requests(obj: Any, vendors: frozenset[str]) -> tuple[ContainerRequest, ...]:
    """What an unallocated claim asks of our drivers, one request per device request.

    A ``firstAvailable`` list is read as its first sub-request of ours: kube-scheduler tries
    them in order, so the first is what a node with room gets. CEL selectors and constraints
    are kube-scheduler's to evaluate (its DRA filter has run before the extender's).
    """
    where = f"{_who(obj)}: spec.devices.requests"
    devices = _dict(ob.spec(obj).get("devices"), f"{_who(obj)}: spec.devices")
    out: list[ContainerRequest] = []
    for i, raw in enumerate(_list(devices.get("requests"), MAX_REQUESTS, where)):
        request = _dict(raw, f"{where}[{i}]")
        name = str(request.get("name") or i)[:MAX_NAME_CHARS]
        if request.get("exactly") is not None:
            found = _exactly(
                _dict(request["exactly"], f"{where}[{i}].exactly"), vendors, name, f"{where}[{i}]"
            )
            if found is not None:
                out.append(found)
            continue
        subs = _list(request.get("firstAvailable"), MAX_SUBREQUESTS, f"{where}[{i}].firstAvailable")
        for j, sub in enumerate(subs):
            sub_where = f"{where}[{i}].firstAvailable[{j}]"
            found = _exactly(_dict(sub, sub_where), vendors, name, sub_where)
            if found is not None:
                out.append(found)
                break
    return tuple(out)


# -- the claim's status: what kube-scheduler allocated ------------------------------------------


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of ours: a device of a pool, and what it consumes there."""

    request: str
    vendor: str
    driver: str
    pool: str
    device: str
    #: Consumed memory in MiB; ``None``: the whole device (no consumed capacity).
    memory_mib: int | None
    compute_percent: int
    #: No ``consumedCapacity`` at all: a device allocated whole, shared with nobody.
    exclusive: bool


@dataclass(frozen=True, slots=True)
class Allocation:
    """A claim's allocation results of our drivers, and the node the allocation names."""

    devices: tuple[AllocatedDevice, ...]
    #: From ``allocation.nodeSelector`` (``metadata.name`` match field), "" when absent.
    node: str


def _selector_node(allocation: dict[str, Any]) -> str:
    """The node named by an allocation's node selector (kube-scheduler writes one term with
    ``matchFields: [{key: metadata.name, operator: In, values: [<node>]}]``)."""
    selector = allocation.get("nodeSelector")
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], dict):
        return ""
    fields = terms[0].get("matchFields")
    if not isinstance(fields, list) or len(fields) != 1 or not isinstance(fields[0], dict):
        return ""
    field = fields[0]
    values = field.get("values")
    if (
        field.get("key") == "metadata.name"
        and field.get("operator") == "In"
        and isinstance(values, list)
        and len(values) == 1
        and isinstance(values[0], str)
        and 0 < len(values[0]) <= MAX_NAME_CHARS
    ):
        return values[0]
    return ""


def claim_allocation(obj: Any, vendors: frozenset[str]) -> Allocation | None:
    """The claim's allocation results of our drivers; ``None`` when it is not allocated or
    allocates nothing of ours. ``ValueError`` names the claim and field of a malformed one."""
    who = _who(obj)
    allocation = ob.status(obj).get("allocation")
    if allocation is None:
        return None
    allocation = _dict(allocation, f"{who}: status.allocation")
    devices = _dict(allocation.get("devices"), f"{who}: status.allocation.devices")
    where = f"{who}: status.allocation.devices.results"
    found: list[AllocatedDevice] = []
    for i, raw in enumerate(_list(devices.get("results"), MAX_RESULTS, where)):
        result = _dict(raw, f"{where}[{i}]")
        vendor = vendor_of_driver(result.get("driver"), vendors)
        if vendor is None or result.get("adminAccess") is True:
            continue
        at = f"{where}[{i}]"
        consumed = result.get("consumedCapacity")
        memory: int | None = None
        compute = 0
        if consumed is not None:
            consumed = _dict(consumed, f"{at}.consumedCapacity")
            if consumed.get("memory") is not None:
                memory = _mib(consumed["memory"], f"{at}.consumedCapacity.memory")
            if consumed.get("cores") is not None:
                compute = _percent(consumed["cores"], f"{at}.consumedCapacity.cores")
        found.append(
            AllocatedDevice(
                request=_name(result.get("request"), f"{at}.request"),
                vendor=vendor,
                driver=str(result["driver"]),
                pool=_name(result.get("pool"), f"{at}.pool"),
                device=_name(result.get("device"), f"{at}.device"),
                memory_mib=memory,
                compute_percent=100 if consumed is None else compute,
                exclusive=consumed is None,
            )
        )
    if not found:
        return None
    return Allocation(tuple(found), _selector_node(allocation))


# -- slices: which device a name in a pool is ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """A device of one of our slices: its node, the id our inventories use, its memory."""

    node: str
    uuid: str
    memory_mib: int | None


def slice_devices(
    obj: Any, vendors: frozenset[str]
) -> dict[tuple[str, str, str], SliceDevice] | None:
    """``(driver, pool, device name) -> SliceDevice`` for a slice of ours (``None``: not ours).

    The ``uuid`` attribute is the device id of the node's inventory annotation, which is
    what the ledger books by (node/dra/slices.py ``attributes``). Devices without one are
    left out; a malformed slice raises ``ValueError`` naming it.
    """
    spec = ob.spec(obj)
    driver = spec.get("driver")
    if vendor_of_driver(driver, vendors) is None:
        return None
    who = f"ResourceSlice {ob.name(obj) or '?'}"
    pool = _dict(spec.get("pool"), f"{who}: spec.pool")
    pool_name = _name(pool.get("name"), f"{who}: spec.pool.name")
    node = spec.get("nodeName")
    node = node if isinstance(node, str) and 0 < len(node) <= MAX_NAME_CHARS else ""
    out: dict[tuple[str, str, str], SliceDevice] = {}
    for i, raw in enumerate(_list(spec.get("devices"), MAX_SLICE_DEVICES, f"{who}: spec.devices")):
        device = _dict(raw, f"{who}: spec.devices[{i}]")
        name = _name(device.get("name"), f"{who}: spec.devices[{i}].name")
        attributes = _dict(device.get("attributes"), f"{who}: spec.devices[{i}].attributes")
        uuid = _dict(attributes.get("uuid"), f"{who}: spec.devices[{i}].attributes.uuid")
        value = uuid.get("string")
        if not isinstance(value, str) or not 0 < len(value) <= MAX_UUID_CHARS:
            continue
        capacity = _dict(device.get("capacity"), f"{who}: spec.devices[{i}].capacity")
        memory = _dict(capacity.get("memory"), f"{who}: spec.devices[{i}].capacity.memory")
        size = memory.get("value")
        out[(str(driver), pool_name, name)] = SliceDevice(
            node=node,
            uuid=value,
            memory_mib=(
                _mib(size, f"{who}: spec.devices[{i}].capacity.memory.value")
                if size is not None
                else None
            ),
        )
    return out


# -- the pod: which claims it names -------------------------------------------------------------


def pod_claim_names(pod: Any) -> list[str]:
    """The names of the ResourceClaims *pod* uses, in its namespace (bounded).

    A claim made from a template has the name kube-controller-manager generated, which the
    pod's ``status.resourceClaimStatuses`` carries; kube-scheduler does not schedule the pod
    before that claim exists.
    """
    entries = ob.spec(pod).get("resourceClaims")
    if not isinstance(entries, list):
        return []
    generated: dict[str, str] = {}
    statuses = ob.status(pod).get("resourceClaimStatuses")
    if isinstance(statuses, list):
        for status in statuses[:MAX_POD_CLAIMS]:
            if isinstance(status, dict):
                key, value = status.get("name"), status.get("resourceClaimName")
                if isinstance(key, str) and isinstance(value, str):
                    generated[key] = value
    names: list[str] = []
    for entry in entries[:MAX_POD_CLAIMS]:
        if not isinstance(entry, dict):
            continue
        claim = entry.get("resourceClaimName")
        if not isinstance(claim, str):
            key = entry.get("name")
            claim = generated.get(key) if isinstance(key, str) else None
        if isinstance(claim, str) and 0 < len(claim) <= MAX_NAME_CHARS and claim not in names:
            names.append(claim)
    return names


def is_dra_pod(pod: Any) -> bool:
    """Whether *pod* names any ResourceClaim (``spec.resourceClaims``)."""
    entries = ob.spec(pod).get("resourceClaims")
    return isinstance(entries, list) and bool(entries)
