"""FGD's search for the best devices, on many nodes at once.

The FGD policies place a pod on the devices of a node where fragmentation grows least. For
a pod with one device demand, the devices of a node that could take it fall into a few
kinds (equal device signatures); booking one moves the table from its state to a known
next state. This module collects, in one Python pass over the nodes, each node's table
state and its candidate moves, then measures every node before and after every move with
:mod:`xpushare.scheduling.fragarrays`. The answers equal the scalar search's
(:meth:`FragmentationPolicy._best <xpushare.scheduling.fragmentation.FragmentationPolicy>`)
bit for bit; a test holds the two together.

Which devices: for one device, the candidate with the least growth (ties: the lowest
signature). For ``count`` devices, candidates are ranked by that single-device growth and
devices taken from the best kinds first, as many of each as it has.

Not handled here (the caller measures these nodes one by one): pods with several demands
or an init container, demands naming device UUIDs or a partition, NUMA-bound multi-device
demands, and tables whose devices differ in size when the CPU-aware measure is asked.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpushare.scheduling.fragarrays import Floats, Ints, VendorArrays
    from xpushare.scheduling.request import Demand, PodRequest
    from xpushare.scheduling.state import NodeState
    from xpushare.scheduling.workload import Workload


class FragmentationMeter(Protocol):
    """What the search reads of a meter (``fragmeter.FragmentationMeter``, which calls
    this module: a protocol, so the two do not import each other)."""

    @property
    def workload(self) -> Workload: ...

    def arrays(self, vendor: str) -> VendorArrays: ...

    def table_raw(
        self,
        vendor: str,
        state: tuple[int, tuple[tuple[Any, ...], ...]],  # fragmeter.State
        cpu_free: int | None,
        memory_free: int | None,
    ) -> float: ...


class Growth(NamedTuple):
    """What the search found for one node."""

    #: Growth of FGD's fragmentation, in units; ``inf`` when the pod does not fit there.
    growth: float
    #: Growth of the CPU-aware fragmentation by the same placement, when asked.
    tie: float | None


#: The answer for a node none of whose devices (or not enough of them) could take the pod.
NO_FIT = Growth(math.inf, None)


def batch_demand(request: PodRequest) -> Demand | None:
    """The pod's one demand when the batch search handles this pod, else ``None``."""
    if len(request.demands) != 1:
        return None
    d = request.demands[0]
    if d.init or d.include_uuids or d.exclude_uuids or d.partition is not None:
        return None
    if d.count > 1 and d.numa_bind:
        return None
    return d


def search(
    meter: FragmentationMeter,
    host: FragmentationMeter | None,
    nodes: Sequence[NodeState],
    request: PodRequest,
    demand: Demand,
    request_id: int,
) -> list[Growth | None]:
    """The best placement's growth on each node (``None``: measure that node one by one).

    A node whose devices cannot take the demand gets :data:`NO_FIT`: for the demands
    handled here the device signatures decide the fit, so the search answers it too.

    *host*, when given, is the CPU-aware meter: each answer then carries its growth for
    the placement FGD chose. *request_id* names the request in the caches.
    """
    vendor = demand.vendor
    arrays = meter.arrays(vendor)
    arrays.trim()
    out: list[Growth | None] = [None] * len(nodes)
    # One pass in Python: each node's table state and its kinds of devices.
    kept: list[int] = []
    base: list[int] = []
    cpu: list[float] = []
    mem: list[float] = []
    kinds: list[int] = []
    counts: list[int] = []
    lengths: list[int] = []
    others: list[Others] = []
    rcpu, rmem = request.cpu_milli, request.memory_mib
    entries = arrays.entries
    need_uniform = host is not None
    inf = math.inf
    for i, node in enumerate(nodes):
        tables = node.tables
        table = tables.get(vendor)
        if table is None or (need_uniform and not table.uniform_sizes):
            continue
        entry = entries.get(table.sig_id or 0) or arrays.table(table.state_id(), table.kinds())
        kept.append(i)
        base.append(entry[0])
        kinds.extend(entry[1])
        counts.extend(entry[2])
        lengths.append(len(entry[1]))
        cpu.append(inf if node.cpu_alloc is None else node.cpu_alloc - node.cpu_used)
        mem.append(inf if node.memory_alloc is None else node.memory_alloc - node.memory_used)
        others.append(
            None if len(tables) == 1 else _other_tables(meter, host, node, vendor, rcpu, rmem)
        )
    if not kept:
        return out

    # The candidates: every kind of device, on every node, that could take the demand.
    kind_a = np.array(kinds, dtype=np.intp)
    booked = arrays.booked(request_id, demand, kind_a)
    fits = booked >= 0
    owner_all = np.repeat(np.arange(len(kept)), lengths)
    per_node = np.bincount(owner_all[fits], minlength=len(kept))
    keep = per_node > 0
    if not keep.all():  # no device fits: a definite answer (the kinds decide the fit)
        for i, ok in zip(kept, keep.tolist(), strict=True):
            if not ok:
                out[i] = NO_FIT
        renumber = np.cumsum(keep) - 1
        kept = [k for k, ok in zip(kept, keep.tolist(), strict=True) if ok]
        others = [o for o, ok in zip(others, keep.tolist(), strict=True) if ok]
        base = [b for b, ok in zip(base, keep.tolist(), strict=True) if ok]
        cpu_k, mem_k = np.array(cpu)[keep], np.array(mem)[keep]
        owner = renumber[owner_all[fits]]
        per_node = per_node[keep]
    else:
        cpu_k, mem_k = np.array(cpu), np.array(mem)
        owner = owner_all[fits]
    if not kept:
        return out
    n = len(kept)
    src = kind_a[fits]
    dst = booked[fits]
    have = np.array(counts, dtype=np.intp)[fits]
    base_a = np.array(base, dtype=np.intp)
    scale = meter.workload.scale

    # Every node before, and after each of its candidates.
    rows_before = arrays.before(base_a)
    rows_after = arrays.after(rows_before[owner], [(src, dst, None)])
    cpu_after, mem_after = cpu_k - rcpu, mem_k - rmem
    raw_before = arrays.fgd(*arrays.split(rows_before), cpu_k, mem_k)
    raw_after = arrays.fgd(*arrays.split(rows_after), cpu_after[owner], mem_after[owner])
    before = raw_before + np.array([o[0] if o else 0.0 for o in others])
    after_other = np.array([o[1] if o else 0.0 for o in others])
    growth = (raw_after + after_other[owner]) / scale - (before / scale)[owner]

    starts = np.concatenate([[0], np.cumsum(per_node)[:-1]]).astype(np.intp)
    if demand.count == 1:
        least = np.minimum.reduceat(growth, starts)
        at_least = np.flatnonzero(growth == np.repeat(least, per_node))
        chosen = at_least[np.searchsorted(at_least, starts)]
        best: list[float | None] = growth[chosen].tolist()
        ties: list[float | None] = [None] * n
        if host is not None:
            ties = _ties(
                arrays,
                others,
                (rows_before, rows_after[chosen]),
                arrays.per_task(base_a),
                (cpu_k, mem_k, cpu_after, mem_after),
                scale,
            ).tolist()
    else:
        best, ties = _fill(
            arrays,
            host is not None,
            demand.count,
            base_a,
            (src.tolist(), dst.tolist(), have.tolist(), starts.tolist(), per_node.tolist()),
            growth.tolist(),
            (before, after_other, others),
            (cpu_k, mem_k, rcpu, rmem),
            scale,
        )
    for j, i in enumerate(kept):
        g = best[j]
        if g is not None:
            out[i] = Growth(g, ties[j])
    return out


#: Per node, the raw measures of its other vendors' tables: FGD before and after the pod
#: takes its CPU and memory, then the CPU-aware one before and after (``None``: no others).
Others = tuple[float, float, float, float] | None


def _other_tables(
    meter: FragmentationMeter,
    host: FragmentationMeter | None,
    node: NodeState,
    vendor: str,
    cpu_milli: int,
    memory_mib: int,
) -> Others:
    """Other vendors' tables do not move, but the CPU the pod takes changes their measure."""
    if len(node.tables) == 1:
        return None
    cpu, mem = node.cpu_free, node.memory_free
    cpu_after = None if cpu is None else cpu - cpu_milli
    mem_after = None if mem is None else mem - memory_mib
    sums = [0.0, 0.0, 0.0, 0.0]
    for name, table in node.tables.items():
        if name == vendor:
            continue
        state = (table.state_id(), table.state_signature())
        sums[0] += meter.table_raw(name, state, cpu, mem)
        sums[1] += meter.table_raw(name, state, cpu_after, mem_after)
        if host is not None:
            sums[2] += host.table_raw(name, state, cpu, mem)
            sums[3] += host.table_raw(name, state, cpu_after, mem_after)
    return (sums[0], sums[1], sums[2], sums[3])


def _ties(
    arrays: VendorArrays,
    others: list[Others],
    rows: tuple[Floats, Floats],
    per_task: Floats,
    free: tuple[Floats, Floats, Floats, Floats],
    scale: float,
) -> Floats:
    """CPU-aware growth of each node from *rows* (before, after) and CPU and memory
    free (before, before, after, after)."""
    cpu, mem, cpu_after, mem_after = free
    raw_before = arrays.host_aware(*arrays.split(rows[0]), per_task, cpu, mem)
    raw_after = arrays.host_aware(*arrays.split(rows[1]), per_task, cpu_after, mem_after)
    before = raw_before + np.array([o[2] if o else 0.0 for o in others])
    after = raw_after + np.array([o[3] if o else 0.0 for o in others])
    # numpy's stubs give arithmetic on arrays as Any: the annotation says what it is.
    growth: Floats = after / scale - before / scale
    return growth


def _fill(
    arrays: VendorArrays,
    with_ties: bool,
    count: int,
    base: Ints,
    candidates: tuple[list[int], list[int], list[int], list[int], list[int]],
    growth: list[float],
    measured: tuple[Floats, Floats, list[Others]],
    host_free: tuple[Floats, Floats, int, int],
    scale: float,
) -> tuple[list[float | None], list[float | None]]:
    """Growth of a *count*-device placement per node: devices taken from the candidate
    kinds in order of their single-device growth (ties: signature order)."""
    src, dst, have, starts, lengths = candidates
    before, after_other, others = measured
    cpu, mem, rcpu, rmem = host_free
    n = len(starts)
    picked: list[list[tuple[int, int, int]]] = []
    fits: list[bool] = []
    for j in range(n):
        s = starts[j]
        ranked = sorted(range(s, s + lengths[j]), key=growth.__getitem__)
        left = count
        take: list[tuple[int, int, int]] = []
        for k in ranked:
            m = min(have[k], left)
            take.append((src[k], dst[k], m))
            left -= m
            if not left:
                break
        picked.append(take)
        fits.append(left == 0)
    width = max(len(t) for t in picked)
    src_a = np.zeros((n, width), dtype=np.intp)
    dst_a = np.zeros((n, width), dtype=np.intp)
    num_a = np.zeros((n, width))
    for j, take in enumerate(picked):
        for k, (a, b, m) in enumerate(take):
            src_a[j, k], dst_a[j, k], num_a[j, k] = a, b, m
    rows_before = arrays.before(base)
    rows_after = arrays.after(
        rows_before, [(src_a[:, k], dst_a[:, k], num_a[:, k]) for k in range(width)]
    )
    raw = arrays.fgd(*arrays.split(rows_after), cpu - rcpu, mem - rmem)
    growth_n = ((raw + after_other) / scale - before / scale).tolist()
    best: list[float | None] = [g if ok else math.inf for g, ok in zip(growth_n, fits, strict=True)]
    ties: list[float | None] = [None] * n
    if with_ties:
        tie_a = _ties(
            arrays,
            others,
            (rows_before, rows_after),
            arrays.per_task(base),
            (cpu, mem, cpu - rcpu, mem - rmem),
            scale,
        )
        ties = [t if ok else None for t, ok in zip(tie_a.tolist(), fits, strict=True)]
    return best, ties
