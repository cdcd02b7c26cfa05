"""The fragmentation measures of many device-table states at once, on numpy arrays.

Why: the first time the engine meets a pod shape, or after many nodes changed, the FGD
policies must measure every distinct node state among the candidates (about 500 in the
benchmark fleet) and, on each, every device the pod could take. Measured one state at a
time in Python that is ~40 µs a state, 20 ms a decision at 500 nodes; here the Python part
per state is a few dictionary lookups and the sums over task shapes run as array operations
over all rows together.

The model. For one vendor's device table and the workload's task shapes ``i`` (weight
``W[i]``, devices per task ``K[i]``, CPU and memory per task), every device signature ``a``
(:func:`~xpushare.scheduling.state.device_signature`) has a row: ``H[a, i]`` is 1 when a
device in that state could hold one part of shape ``i``, ``U[a]`` its free units (a dynamic
MIG GPU's signature holds its geometry and instances, so both are its geometry's answers:
:mod:`~xpushare.scheduling.fragmentation`). A table is a multiset of signatures, so its
sums are sums of rows:

* ``C[i]`` devices that could hold a part of shape ``i``: the sum of ``H``;
* ``X[i]`` free units on devices that could not (stuck for shape ``i``): the sum of
  ``(1 - H) U``;
* ``T`` free units of the table: the sum of ``U``.

Booking a device moves one count from its signature ``a`` to its booked signature ``a'``,
so a table after a placement is its row plus ``H[a'] - H[a]`` (and the same for ``X``, ``T``).
Then, with ``ok[i]`` = ``C[i] >= K[i]`` and the node has the shape's CPU and memory:

* FGD (:class:`~xpushare.scheduling.fragmeter.FragmentationMeter`):
  ``sum_i W[i] (X[i] if ok[i] else T)``;
* CPU-aware (:class:`~xpushare.scheduling.hostaware.HostAwareMeter`):
  ``sum_i W[i] T - sum_i W[i] ok[i] min(T - X[i], copies[i] P[i])``, where ``copies[i]`` is
  how many tasks of shape ``i`` the free CPU runs and ``P[i]`` the units one task takes.

Exactness: the weights are the workload's raw weights (task counts, integers) and capacity
is in integer units, so every sum is an integer, held exactly in float64 whatever the order
of summation. The scalar meters sum the same integers, so both give bit-identical answers
and the engine may mix them (one state alone is measured faster in Python).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from xpushare.scheduling.fit import sig_booked
from xpushare.scheduling.state import SIG_UNITS, UNITS
from xpushare.scheduling.units import demand_units

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from xpushare.scheduling.request import Demand
    from xpushare.scheduling.workload import Workload

    Floats = NDArray[np.float64]
    Ints = NDArray[np.intp]

#: Table states kept per vendor before the store is emptied and refilled. A row is 3S+1
#: floats for S task shapes: at the learnt workload's 64 shapes 1.5 KiB, 12 MiB at the
#: bound. The full openb replay meets ~1,500 states, a 5,000-node fleet at most its nodes'.
MAX_STATES = 8_192
#: Device signatures kept per vendor before the store is emptied: the same rows, 6 MiB at
#: the bound. A fleet has hundreds (the openb replay ~400), but each request of a new size
#: adds the states its booking would leave, so a stream of distinct sizes refills it.
MAX_SIGNATURES = 4_096
#: Requests whose per-signature answers are kept (a map of one int per signature each).
MAX_REQUESTS = 1_000
#: Entries of those maps kept in all, 8 bytes each (16 MiB); past it they are emptied. The
#: openb replay keeps ~56,000; without it 1,000 maps of a full store would take 160 MiB.
MAX_BOOKED_ENTRIES = 2_000_000
_INITIAL_ROWS = 64
#: Entries of a request's booked-row map: a device in that state cannot take the request,
#: or the state was not looked at yet for it.
UNFIT = -1
UNKNOWN = -2
#: Free CPU standing for "unknown" in a division: more millicores than any node has, and
#: exact in float64.
_UNBOUNDED = float(2**52)


class _Rows:
    """A growable 2-D float array with one row per key (signatures, or table states)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.index: dict[Any, int] = {}
        self.keys: list[Any] = []
        self.data: Floats = np.zeros((_INITIAL_ROWS, width))
        self.n = 0

    def add(self, key: Any, row: Floats) -> int:
        if self.n == len(self.data):
            grown = np.zeros((2 * len(self.data), self.width))
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.data[self.n] = row
        self.index[key] = self.n
        self.keys.append(key)
        self.n += 1
        return self.n - 1

    def clear(self) -> None:
        self.index.clear()
        self.keys.clear()
        self.n = 0


class VendorArrays:
    """The rows of one vendor's device signatures and table states, for one workload.

    Columns are the workload's shapes; shapes of other vendors (and CPU-only ones) get
    ``K = inf``: no device of this vendor serves them, so they see the whole table as stuck.
    """

    def __init__(self, workload: Workload, vendor: str, host_mask: Any) -> None:
        self.vendor = vendor
        self._host_mask = host_mask  # (vendor, signature) -> bit i set when it hosts shape i
        shapes = workload.shapes
        self.shapes = shapes
        self.S = len(shapes)
        #: Columns the measures sum: C (or H), X, T (or U).
        self.width = 2 * self.S + 1
        self.W: Floats = np.array(workload.raw, dtype=np.float64)
        self.wsum = float(sum(workload.raw))
        self.K: Floats = np.array(
            [
                s.demand.count if s.demand is not None and s.vendor == vendor else math.inf
                for s in shapes
            ],
            dtype=np.float64,
        )
        self.cpu: Floats = np.array([s.cpu_milli for s in shapes], dtype=np.float64)
        self.mem: Floats = np.array([s.memory_mib for s in shapes], dtype=np.float64)
        #: Shapes that ask for CPU or memory: FGD counts them out on a node that lacks either.
        self.hosted = (self.cpu > 0) | (self.mem > 0)
        self.any_hosted = bool(self.hosted.any())
        self.cpu_asked = self.cpu > 0
        self.any_cpu = bool(self.cpu_asked.any())
        self.mem_asked = self.mem > 0
        self.any_mem = bool(self.mem_asked.any())
        self.cpu_div: Floats = np.where(self.cpu_asked, self.cpu, 1.0)
        # Signature rows: H (S), X = (1 - H) U (S), U (1), then P per-task units (S), kept
        # apart from the sums (only the CPU-aware measure reads it). Row 0 is the zero row:
        # "no device", for moves that change nothing.
        self._sigs = _Rows(self.width + self.S)
        self._sigs.add(None, np.zeros(self.width + self.S))
        # Table-state rows: C (S), X (S), T (1), then P (S).
        self._states = _Rows(self.width + self.S)
        #: Per request id: the booked signature row of each signature row for that request
        #: (``UNFIT`` where a device in that state cannot take it, ``UNKNOWN`` not yet seen).
        self._booked: dict[int, Ints] = {}
        self._booked_entries = 0  # sum of the maps' lengths (MAX_BOOKED_ENTRIES)
        #: Per table state id: (state row, signature rows, devices of each), kinds in order
        #: (read directly by the batch search's loop; :meth:`table` fills it).
        self.entries: dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]] = {}

    # -- rows ----------------------------------------------------------------------------------

    def sig(self, sig: tuple[Any, ...]) -> int:
        """The row of a device signature, added on first sight."""
        found = self._sigs.index.get(sig)
        if found is not None:
            return found
        S, width = self.S, self.width
        row = np.zeros(width + S)
        mask = self._host_mask(self.vendor, sig)
        units = sig[SIG_UNITS]
        for i in range(S):
            hosts = (mask >> i) & 1
            row[i] = hosts
            row[S + i] = 0 if hosts else units
            d = self.shapes[i].demand
            if d is not None and self.shapes[i].vendor == self.vendor:
                row[width + i] = d.count * demand_units(d, sig[1], sig[7], sig[8]) or UNITS
            else:
                row[width + i] = UNITS
        row[2 * S] = units
        return self._sigs.add(sig, row)

    def table(
        self, state_id: int, kinds: tuple[tuple[tuple[Any, ...], int], ...]
    ) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """A table state's row, and its distinct device signatures' rows with their counts
        (signature order), added on first sight; *kinds* is ``DeviceTable.kinds()``.

        ``P`` is taken from the first device: the engine sends only tables whose devices
        all have the same sizes here, where every device gives the same per-task units.
        """
        found = self.entries.get(state_id)
        if found is not None:
            return found
        rows = [self.sig(sig) for sig, _ in kinds]
        counts = [n for _, n in kinds]
        width = self.width
        sigs = self._sigs.data  # read after adding: adding may reallocate the store
        total = np.zeros(width + self.S)
        if rows:
            # One product, not two array operations per kind: every table met for the first
            # time comes here (a fleet's first decision meets hundreds). Integers, so the
            # sum is exact in any order.
            total[:width] = np.array(counts, dtype=np.float64) @ sigs[rows, :width]
            total[width:] = sigs[rows[0], width:]
        found = self.entries[state_id] = (
            self._states.add(state_id, total),
            tuple(rows),
            tuple(counts),
        )
        return found

    def booked(self, request_id: int, demand: Demand, rows: Ints) -> Ints:
        """For each signature row in *rows*, its booked row under *demand*, or ``UNFIT``."""
        booked = self._booked.get(request_id)
        if booked is None or len(booked) < self._sigs.n:
            grown = np.full(
                max(self._sigs.n, 2 * len(booked) if booked is not None else 0),
                UNKNOWN,
                dtype=np.intp,
            )
            if booked is not None:
                grown[: len(booked)] = booked
            booked = self._keep_booked(request_id, grown)
        found = booked[rows]
        unknown = found == UNKNOWN
        if unknown.any():
            keys = self._sigs.keys
            for row in sorted(set(rows[unknown].tolist())):  # (np.unique imports numpy.ma)
                after = sig_booked(keys[row], demand)
                booked_row = UNFIT if after is None else self.sig(after)
                if booked_row >= len(booked):  # the store grew: so does the map
                    grown = np.full(2 * booked_row + 1, UNKNOWN, dtype=np.intp)
                    grown[: len(booked)] = booked
                    booked = self._keep_booked(request_id, grown)
                booked[row] = booked_row
            found = booked[rows]
        return found

    def _keep_booked(self, request_id: int, booked: Ints) -> Ints:
        """Keep *booked* as the map of *request_id*, within the bounds on the maps."""
        old = self._booked.pop(request_id, None)
        if old is not None:
            self._booked_entries -= len(old)
        if (
            len(self._booked) >= MAX_REQUESTS
            or self._booked_entries + len(booked) > MAX_BOOKED_ENTRIES
        ):
            self._booked.clear()
            self._booked_entries = 0
        self._booked[request_id] = booked
        self._booked_entries += len(booked)
        return booked

    def trim(self) -> None:
        """Empty the stores past their bounds; call only between batches (rows move)."""
        if self._states.n >= MAX_STATES:
            self._states.clear()
            self.entries.clear()
        if self._sigs.n >= MAX_SIGNATURES:
            self._booked.clear()
            self._booked_entries = 0
            self.entries.clear()
            self._states.clear()
            self._sigs.clear()
            self._sigs.add(None, np.zeros(self.width + self.S))

    # -- measures ------------------------------------------------------------------------------

    def before(self, base: Ints) -> Floats:
        """C, X, T of the table states ``base``, one row each (columns: see ``split``)."""
        return self._states.data[base, : self.width]

    def after(self, rows: Floats, moves: list[tuple[Ints, Ints, Floats | None]]) -> Floats:
        """*rows* (from :meth:`before`) with each move (from, to, how many) applied."""
        width = self.width
        sigs = self._sigs.data
        out = rows.copy()
        for src, dst, count in moves:
            delta = sigs[dst, :width] - sigs[src, :width]
            if count is not None:
                delta *= count[:, None]
            out += delta
        return out

    def per_task(self, base: Ints) -> Floats:
        """P of the table states ``base``: units one task of each shape takes."""
        return self._states.data[base, self.width :]

    def split(self, rows: Floats) -> tuple[Floats, Floats, Floats]:
        """C, X and T of rows from :meth:`before` or :meth:`after`."""
        S = self.S
        return rows[:, :S], rows[:, S : 2 * S], rows[:, 2 * S]

    def fgd(self, C: Floats, X: Floats, T: Floats, cpu: Floats, mem: Floats) -> Floats:
        """Raw FGD fragmentation (times the weights' sum) of each row."""
        ok = self.K <= C
        if self.any_hosted:
            short = (self.cpu > cpu[:, None]) | (self.mem > mem[:, None])
            ok &= ~(self.hosted & short)
        usable: Floats = (T[:, None] - X) * ok
        return T * self.wsum - usable @ self.W

    def host_aware(
        self, C: Floats, X: Floats, T: Floats, P: Floats, cpu: Floats, mem: Floats
    ) -> Floats:
        """Raw CPU-aware fragmentation (times the weights' sum) of each row."""
        ok = self.K <= C
        if self.any_mem:
            ok &= ~(self.mem_asked & (self.mem > mem[:, None]))
        units: Floats = T[:, None] - X
        if self.any_cpu:
            # Unknown CPU (inf) as a bound no node reaches: inf // x would be NaN.
            copies = np.floor_divide(np.minimum(cpu, _UNBOUNDED)[:, None], self.cpu_div)
            ok &= ~(self.cpu_asked & (copies <= 0))
            units = np.where(self.cpu_asked, np.minimum(units, copies * P), units)
        return T * self.wsum - (units * ok) @ self.W
