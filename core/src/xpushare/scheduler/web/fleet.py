"""The fleet as the web view shows it: every device's allocation, free capacity, fragmentation.

Why a digest per node: the fleet page of 5,000 nodes x 8 GPUs must answer in under 100 ms
from the scheduler's loop, where a Python statement per device costs milliseconds. Each
node's part of the answer (its JSON text and its sums) is computed once per state of the
node and reused until the ledger changes the node (``NodeState.version``) or the FGD policy
changes its workload (``generation``): a request then only joins cached strings and adds a
few numbers per node. The cache holds one digest per node the ledger has, no more.

Fragmentation is the measure the FGD placement itself uses (:class:`FragmentationMeter` of
the running :class:`FragmentationPolicy`), in GPU-equivalents: a node's fragmentation is the
free capacity that the workload's tasks, weighted by frequency, could not use. Placement
policies other than FGD have no workload, so no fragmentation is shown for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xpushare.scheduling import UNITS, FragmentationPolicy, NodeState, Policy, UsageLedger
from xpushare.scheduling.fragmentation import table_state
from xpushare.scheduling.workload import TaskShape

#: The columns of a device row in the fleet answer, in order (documented in the OpenAPI).
DEVICE_COLUMNS = (
    "index",
    "healthy",
    "memory_cap_mib",
    "memory_used_mib",
    "compute_cap_percent",
    "compute_used_percent",
    "slots",
    "slots_used",
    "exclusive",
    "free_units",
)

#: Sums kept per (vendor, model), in order.
SUM_FIELDS = (
    "devices",
    "healthy",
    "memory_cap_mib",
    "memory_used_mib",
    "compute_cap_percent",
    "compute_used_percent",
    "free_units",
    "idle",
)

#: Shapes of the measured workload the answer lists, most frequent first: the page says what
#: the fragmentation figure is measured against, and the head of the list is what it shows.
WORKLOAD_SHAPES_SHOWN = 8

#: Longest label selector or name filter accepted (a Kubernetes label is at most 63 + 253
#: characters for the key and 63 for the value).
MAX_FILTER_CHARS = 400
#: Label filters in one request at most.
MAX_LABEL_FILTERS = 16


class FilterError(ValueError):
    """A fleet filter that is not well formed; the message names the parameter."""


@dataclass(frozen=True, slots=True)
class FleetFilter:
    vendor: str = ""
    model: str = ""
    #: (key, value or None for "has the key")
    labels: tuple[tuple[str, str | None], ...] = ()
    node: str = ""

    @classmethod
    def parse(cls, query: Mapping[str, Any], labels: Iterable[str]) -> FleetFilter:
        def one(name: str) -> str:
            value = str(query.get(name) or "")
            if len(value) > MAX_FILTER_CHARS:
                raise FilterError(f"{name}: longer than {MAX_FILTER_CHARS} characters")
            return value

        parsed: list[tuple[str, str | None]] = []
        items = list(labels)
        if len(items) > MAX_LABEL_FILTERS:
            raise FilterError(f"label: at most {MAX_LABEL_FILTERS} label filters")
        for item in items:
            if len(item) > MAX_FILTER_CHARS:
                raise FilterError(f"label: longer than {MAX_FILTER_CHARS} characters")
            key, eq, value = item.partition("=")
            if not key:
                raise FilterError(f"label: {item!r} is not KEY or KEY=VALUE")
            parsed.append((key, value if eq else None))
        return cls(one("vendor"), one("model"), tuple(parsed), one("node"))

    def node_matches(self, state: NodeState) -> bool:
        if self.node and self.node not in state.name:
            return False
        labels = state.labels
        for key, value in self.labels:
            have = labels.get(key)
            if have is None or (value is not None and have != value):
                return False
        return True

    def group_matches(self, vendor: str, model: str) -> bool:
        return (not self.vendor or vendor == self.vendor) and (
            not self.model or model == self.model
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "model": self.model,
            "node": self.node,
            "labels": [k if v is None else f"{k}={v}" for k, v in self.labels],
        }


@dataclass(slots=True)
class _Group:
    """One (vendor, model) of one node: its device rows as JSON text and its sums."""

    vendor: str
    model: str
    text: str
    sums: list[int]
    frag_units: float


@dataclass(slots=True)
class _Digest:
    state: NodeState
    version: int
    generation: int
    groups: list[_Group] = field(default_factory=list)
    #: The node's whole entry (every group) as JSON text.
    text: str = ""


def _fragmentation(policy: Policy) -> FragmentationPolicy | None:
    return policy if isinstance(policy, FragmentationPolicy) else None


def _digest(state: NodeState, policy: FragmentationPolicy | None) -> _Digest:
    generation = policy.generation if policy is not None else 0
    digest = _Digest(state, state.version, generation)
    cpu, mem = state.cpu_free, state.memory_free
    for vendor in sorted(state.tables):
        table = state.tables[vendor]
        by_model: dict[str, list[list[int]]] = {}
        for d in table.devices:
            by_model.setdefault(d.model, []).append(
                [
                    d.index,
                    1 if d.healthy else 0,
                    d.memory_cap,
                    d.used_memory,
                    d.compute_cap,
                    d.used_compute,
                    d.slots,
                    d.used_slots,
                    1 if d.exclusive else 0,
                    d.free_units(),
                ]
            )
        frag = 0.0
        if policy is not None and table.devices:
            meter = policy.meter
            frag = meter.table_raw(vendor, table_state(table), cpu, mem) / meter.workload.scale
        free_total = sum(r[9] for rows in by_model.values() for r in rows)
        for model, rows in by_model.items():
            sums = [
                len(rows),
                sum(r[1] for r in rows),
                sum(r[2] for r in rows),
                sum(r[3] for r in rows),
                sum(r[4] for r in rows),
                sum(r[5] for r in rows),
                sum(r[9] for r in rows),
                # Whole GPUs free: healthy and nothing booked on them.
                sum(1 for r in rows if r[1] and not (r[3] or r[5] or r[7])),
            ]
            # A table mixing models is measured as one: its fragmentation is shared out by
            # each model's part of the free capacity.
            share = (sums[6] / free_total) if free_total else 1.0 / len(by_model)
            digest.groups.append(
                _Group(
                    vendor,
                    model,
                    json.dumps(rows, separators=(",", ":")),
                    sums,
                    frag * share if len(by_model) > 1 else frag,
                )
            )
    digest.text = _node_text(state, digest.groups)
    return digest


def _node_text(state: NodeState, groups: list[_Group]) -> str:
    parts = []
    for g in groups:
        head = json.dumps([g.vendor, g.model, round(g.frag_units / UNITS, 4)])
        parts.append(head[:-1] + "," + g.text + "]")
    return (
        '{"name":'
        + json.dumps(state.name)
        + ',"pods":'
        + str(len(state.pods))
        + ',"groups":['
        + ",".join(parts)
        + "]}"
    )


def workload_json(policy: Policy) -> dict[str, Any] | None:
    """What the fragmentation figure is measured against: the policy's workload, whether
    learnt (from how many pods) or given, and its most frequent shapes with their weights."""
    frag = _fragmentation(policy)
    if frag is None:
        return None
    workload = frag.workload
    ranked = sorted(zip(workload.shapes, workload.weights, strict=True), key=lambda sw: -sw[1])
    return {
        "learnt": frag.learns,
        "pods": frag.learnt.seen - frag.learnt.skipped if frag.learns else None,
        "shapes": len(workload),
        "top": [[_shape_text(s), round(w, 4)] for s, w in ranked[:WORKLOAD_SHAPES_SHOWN]],
    }


def _shape_text(shape: TaskShape) -> str:
    """A task shape in an operator's units: "2 x 20 GiB, 30% compute (mock), 4 CPU"."""
    d = shape.demand
    cpu = f", {shape.cpu_milli / 1000:g} CPU" if shape.cpu_milli else ""
    if d is None:
        return f"no devices{cpu}"
    if d.exclusive:
        return f"{d.count} whole {d.vendor}{cpu}"
    if d.memory_percent:
        memory = f"{d.memory_percent}% memory"
    elif d.memory_mib:
        memory = f"{d.memory_mib / 1024:.3g} GiB"
    else:
        memory = "any memory"
    compute = f", {d.compute}% compute" if d.compute else ""
    return f"{d.count} x {memory}{compute} ({d.vendor}){cpu}"


class FleetView:
    """Digests of every node of a ledger, kept current lazily (see the module's docstring)."""

    def __init__(self, ledger: UsageLedger, policy: Policy) -> None:
        self.ledger = ledger
        self.policy = policy
        self._digests: dict[str, _Digest] = {}

    def refresh(self) -> None:
        """Build every node's digest now (the scheduler calls it after its first sync), so
        the first page asked for does not pay for the whole fleet (160 ms at 5,000 nodes)."""
        self._current()

    def _current(self) -> list[_Digest]:
        frag = _fragmentation(self.policy)
        generation = frag.generation if frag is not None else 0
        nodes = self.ledger.nodes
        old = self._digests
        fresh: dict[str, _Digest] = {}
        for name, state in nodes.items():
            digest = old.get(name)
            if (
                digest is None
                or digest.state is not state
                or digest.version != state.version
                or digest.generation != generation
            ):
                digest = _digest(state, frag)
            fresh[name] = digest
        # Rebuilt per call so removed nodes leave the cache: bounded by the ledger's nodes.
        self._digests = fresh
        return list(fresh.values())

    def answer(self, flt: FleetFilter) -> str:
        """The fleet answer (JSON text) for *flt*: nodes, their devices, sums per model."""
        digests = self._current()
        whole = not flt.vendor and not flt.model
        texts: list[str] = []
        sums: dict[tuple[str, str], list[float]] = {}
        vendors: set[str] = set()
        models: set[tuple[str, str]] = set()
        for digest in digests:
            for g in digest.groups:
                vendors.add(g.vendor)
                models.add((g.vendor, g.model))
            if not flt.node_matches(digest.state):
                continue
            if whole:
                chosen = digest.groups
                texts.append(digest.text)
            else:
                chosen = [g for g in digest.groups if flt.group_matches(g.vendor, g.model)]
                if not chosen:
                    continue
                texts.append(_node_text(digest.state, chosen))
            for g in chosen:
                acc = sums.get((g.vendor, g.model))
                if acc is None:
                    acc = sums[(g.vendor, g.model)] = [0.0] * (len(SUM_FIELDS) + 2)
                for i, v in enumerate(g.sums):
                    acc[i] += v
                acc[-2] += g.frag_units
                acc[-1] += 1
        summary = [
            {
                "vendor": vendor,
                "model": model,
                **{name: int(acc[i]) for i, name in enumerate(SUM_FIELDS)},
                "nodes": int(acc[-1]),
                "free_gpus": round(acc[SUM_FIELDS.index("free_units")] / UNITS, 3),
                "fragmentation_gpus": round(acc[-2] / UNITS, 3),
            }
            for (vendor, model), acc in sorted(sums.items())
        ]
        frag = _fragmentation(self.policy)
        head = {
            "policy": getattr(self.policy, "name", type(self.policy).__name__),
            "fragmentation_measured": frag is not None,
            "workload": workload_json(self.policy),
            "device_columns": list(DEVICE_COLUMNS),
            "filter": flt.as_json(),
            "total_nodes": len(digests),
            "shown_nodes": len(texts),
            "vendors": sorted(vendors),
            "models": [{"vendor": v, "model": m} for v, m in sorted(models)],
            "summary": summary,
        }
        return json.dumps(head, separators=(",", ":"))[:-1] + ',"nodes":[' + ",".join(texts) + "]}"
