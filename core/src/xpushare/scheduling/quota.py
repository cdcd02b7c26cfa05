"""Namespace quotas on device memory and compute, read from ResourceQuota objects.

HAMi's rule (research/hami-protocol.md §3.9): a ResourceQuota whose ``spec.hard`` names a
vendor's memory or compute resource (``limits.nvidia.com/gpumem: 20000``,
``requests.nvidia.com/gpucores: 200``) caps what the namespace's pods book of it, summed
over every device they hold; memory limits count the resource's units (HAMi multiplies by
``memoryFactor``, here the vendor's ``memory_unit_mib``). A pod is refused where its own
booking would take the namespace past a limit. HAMi reads the ``limits.`` keys; xpushare
reads ``requests.`` too (the prefix Kubernetes documents for extended resources), and when
several quotas (or both prefixes) cap one resource, the lowest cap applies, as Kubernetes
enforces every quota of a namespace.

What counts is the usage ledger's (``UsageLedger.namespace_usage``): bound pods and
decisions in flight, rebuilt from the pods' annotations after a restart like the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from xpushare.scheduling.quantity import QuantityError, parse_quantity, shown

if TYPE_CHECKING:
    from xpushare.scheduling.request import PodRequest
    from xpushare.scheduling.state import DeviceTable

#: The ``spec.hard`` prefixes read (HAMi reads ``limits.``).
PREFIXES: Final = ("limits.", "requests.")
#: ResourceQuota objects kept at most: far more than namespaces in a cluster; past it new
#: ones are reported and not enforced (never a crash, never unbounded memory).
MAX_QUOTAS: Final = 50_000
#: ``spec.hard`` entries read per quota (Kubernetes' own resources are a few dozen).
MAX_HARD_KEYS: Final = 256

Kind = Literal["memory", "compute"]


@dataclass(frozen=True, slots=True)
class QuotaResource:
    """What one device resource name counts: a vendor's memory (in units of ``unit_mib``
    MiB) or its compute (percent of a device)."""

    vendor: str
    kind: Kind
    unit_mib: int = 1


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    """One cap: ``key`` of ResourceQuota ``quota`` in ``namespace``, as MiB or percent."""

    namespace: str
    quota: str
    key: str
    vendor: str
    kind: Kind
    #: The cap in MiB (memory) or percent (compute).
    limit: int
    #: The value as written in ``spec.hard`` (for messages and metrics).
    written: str


class QuotaBook:
    """The device quotas of every namespace, kept from a ResourceQuota watch."""

    def __init__(self, resources: Mapping[str, QuotaResource]) -> None:
        self.resources = dict(resources)
        #: Per namespace, per quota name, its caps (only quotas with a device cap).
        self._quotas: dict[str, dict[str, tuple[QuotaLimit, ...]]] = {}
        #: Per namespace, every cap of its quotas (what a decision reads).
        self._by_namespace: dict[str, tuple[QuotaLimit, ...]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def set(self, namespace: str, name: str, hard: Any) -> list[str]:
        """A quota was added or changed; what could not be read, one sentence each (the
        quota's other caps still apply)."""
        problems: list[str] = []
        known = self._quotas.get(namespace) or {}
        if name not in known and self._count >= MAX_QUOTAS:
            return [
                f"ResourceQuota {namespace}/{name}: more than {MAX_QUOTAS:,} quotas are "
                "watched; its device caps are not enforced"
            ]
        limits: list[QuotaLimit] = []
        items = list(hard.items()) if isinstance(hard, Mapping) else []
        for hard_key, raw in items[:MAX_HARD_KEYS]:
            if not isinstance(hard_key, str):
                continue
            resource = next(
                (hard_key[len(p) :] for p in PREFIXES if hard_key.startswith(p)), hard_key
            )
            what = self.resources.get(resource) if resource != hard_key else None
            if what is None:
                continue
            text = str(raw)
            try:
                value = parse_quantity(text)
            except QuantityError as exc:
                problems.append(
                    f"ResourceQuota {namespace}/{name}: {hard_key} {shown(text)} {exc.reason}; "
                    "this cap is not enforced"
                )
                continue
            except ValueError:
                problems.append(
                    f"ResourceQuota {namespace}/{name}: {hard_key} {shown(text)} is not a "
                    "quantity; this cap is not enforced"
                )
                continue
            units = int(value) if value >= 0 else 0
            limit = units * what.unit_mib if what.kind == "memory" else units
            limits.append(
                QuotaLimit(namespace, name, hard_key, what.vendor, what.kind, limit, text)
            )
        if limits:
            self._count += name not in known
            known[name] = tuple(limits)
            self._quotas[namespace] = known
        elif known.pop(name, None) is not None:
            self._count -= 1
        self._index(namespace)
        return problems

    def remove(self, namespace: str, name: str) -> None:
        known = self._quotas.get(namespace)
        if known is not None and known.pop(name, None) is not None:
            self._count -= 1
            self._index(namespace)

    def replace(self, items: Iterable[tuple[str, str, Any]]) -> list[str]:
        """Every quota, as a fresh list (a relist); what could not be read."""
        self._quotas.clear()
        self._by_namespace.clear()
        self._count = 0
        problems: list[str] = []
        for namespace, name, hard in items:
            problems.extend(self.set(namespace, name, hard))
        return problems

    def _index(self, namespace: str) -> None:
        """Rebuild *namespace*'s caps from its quotas (a few: O(caps of the namespace))."""
        known = self._quotas.get(namespace, {})
        found = tuple(limit for limits in known.values() for limit in limits)
        if found:
            self._by_namespace[namespace] = found
        else:
            self._by_namespace.pop(namespace, None)
            self._quotas.pop(namespace, None)

    def limits(self, namespace: str) -> tuple[QuotaLimit, ...]:
        return self._by_namespace.get(namespace, ())

    def all_limits(self) -> list[QuotaLimit]:
        return [limit for limits in self._by_namespace.values() for limit in limits]

    def refusal(
        self,
        request: PodRequest,
        namespace: str,
        used: Mapping[str, tuple[int, int]],
        table_of: Mapping[str, DeviceTable | None] | None = None,
    ) -> str | None:
        """Why *request* would take *namespace* past a cap (``None``: it does not).

        *used*: the namespace's booking per vendor (``UsageLedger.namespace_usage``);
        *table_of*: the candidate node's table per vendor, for what a percent or whole-device
        request books there (``None``: none known, such a request counts nothing, as HAMi's
        webhook counts it).
        """
        for limit, now, more in self._over(request, namespace, used, table_of):
            unit = _unit(limit)
            return (
                f"namespace {namespace}: ResourceQuota {limit.quota} caps {limit.key} at "
                f"{limit.written} ({limit.limit} {unit}); its pods book {now} {unit} and "
                f"this pod asks {more} {unit} more"
            )
        return None

    def admission(
        self, request: PodRequest, namespace: str, used: Mapping[str, tuple[int, int]]
    ) -> tuple[str | None, list[str]]:
        """What the webhook says of *request*: why it is denied (its own booking alone is past
        a cap, so it could never be scheduled), or warnings (the namespace's pods book enough
        now that it will wait Pending until some of them end).

        Without a node, a percent or whole-device request counts no memory, as HAMi's
        webhook counts it; /filter, which knows the node, still refuses it there.
        """
        warnings: list[str] = []
        for limit, _, more in self._over(request, namespace, {}, None):
            unit = _unit(limit)
            return (
                f"namespace {namespace}: this pod asks {more} {unit} of {limit.vendor} "
                f"{limit.kind} ({limit.key}), above the {limit.written} ({limit.limit} {unit}) "
                f"ResourceQuota {limit.quota} allows the whole namespace, so it could never be "
                "scheduled; ask for less or raise the quota"
            ), warnings
        for limit, now, more in self._over(request, namespace, used, None):
            unit = _unit(limit)
            warnings.append(
                f"namespace {namespace}: its pods book {now} {unit} of {limit.key} and this "
                f"pod asks {more} {unit} more, past the {limit.written} ({limit.limit} {unit}) "
                f"of ResourceQuota {limit.quota}; the pod stays Pending until enough of the "
                "namespace's pods end"
            )
        return None, warnings

    def _over(
        self,
        request: PodRequest,
        namespace: str,
        used: Mapping[str, tuple[int, int]],
        table_of: Mapping[str, DeviceTable | None] | None,
    ) -> Iterator[tuple[QuotaLimit, int, int]]:
        """Each cap *request* would take *namespace* past: (cap, booked now, asked)."""
        limits = self._by_namespace.get(namespace)
        if not limits:
            return
        wants: dict[str, tuple[int, int]] = {}
        for limit in limits:
            if limit.vendor not in request.vendors:
                continue
            asked = wants.get(limit.vendor)
            if asked is None:
                table = table_of.get(limit.vendor) if table_of is not None else None
                asked = wants[limit.vendor] = pod_booking(request, limit.vendor, table)
            more = asked[0] if limit.kind == "memory" else asked[1]
            if more <= 0:
                continue
            booked = used.get(limit.vendor, (0, 0))
            now = booked[0] if limit.kind == "memory" else booked[1]
            if now + more > limit.limit:
                yield limit, now, more

    def needs_node(self, request: PodRequest, namespace: str) -> bool:
        """Whether :meth:`refusal` depends on the node (a capped vendor's memory asked as a
        percent, a whole device or a partition)."""
        capped = {limit.vendor for limit in self._by_namespace.get(namespace, ())}
        return any(
            d.vendor in capped and (d.memory_mib is None or d.partition is not None)
            for d in request.demands
        )


def _unit(limit: QuotaLimit) -> str:
    return "MiB" if limit.kind == "memory" else "% compute"


def pod_booking(request: PodRequest, vendor: str, table: DeviceTable | None) -> tuple[int, int]:
    """(MiB, compute percent) *request* books of *vendor* in all, as the ledger counts it:
    the larger of the app containers' sum and the largest init container.

    A percent or whole-device request books a share of the device's memory: the node's
    (its largest device, when they differ); without a table it counts no memory.
    """
    physical = 0
    if table is not None and table.devices:
        physical = (
            table.uniform_memory
            if table.uniform_memory is not None
            else max(d.memory_mib for d in table.devices)
        )
    app_memory = app_compute = init_memory = init_compute = 0
    for d in request.demands:
        if d.vendor != vendor:
            continue
        compute = d.compute
        if d.partition is not None:
            profile = None
            if table is not None:
                profile = next(
                    (
                        x.partitions[d.partition]
                        for x in table.devices
                        if d.partition in x.partitions
                    ),
                    None,
                )
            memory, compute = (profile[0], profile[1]) if profile else (0, compute)
        elif d.memory_mib is not None:
            memory = d.memory_mib
        else:
            memory = d.memory_for(physical)
        if d.init:
            init_memory = max(init_memory, d.count * memory)
            init_compute = max(init_compute, d.count * compute)
        else:
            app_memory += d.count * memory
            app_compute += d.count * compute
    return max(app_memory, init_memory), max(app_compute, init_compute)
