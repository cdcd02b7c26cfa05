"""Published results to compare a replay with: the FGD authors' per-seed table by default.

The table is a CSV with one row per (trace, policy, seed) and the GPU allocation (% of the
fleet) at some arrived demands, ``alloc_pct_at_arrived_<percent>`` (the authors' columns:
80, 90, 95, 100, 110 and 130). It ships inside the package (``data/``, from their
repository's ``experiments/analysis/expected_results``), so ``xpushare simulate --reference``
needs no download. A file given instead is read with bounded cost: it is input like any other.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xpushare.simulator.datasets import REFERENCE_RESULTS
from xpushare.simulator.trace import TraceError

#: Their policy names for ours that are the same algorithm. ``fgd`` reproduces their FGD
#: and ``best-fit`` their BestFit (docs/simulator.md); the rest of ours are compared with
#: their FGD only.
THEIR_NAMES = {"fgd": "FGD", "best-fit": "BestFit"}
#: The policy every row is also compared with: the paper's.
BASELINE = "FGD"

#: Bounds on a reference file: the authors' holds 1,020 rows in 64 KB; a table a hundred
#: times larger is still read, anything beyond is refused before it is parsed.
MAX_REFERENCE_BYTES = 8 * 1024 * 1024
MAX_REFERENCE_ROWS = 100_000
MAX_FIELD_CHARS = 64

_COLUMN = re.compile(r"alloc_pct_at_arrived_(\d{1,3})$")


@dataclass(frozen=True, slots=True)
class Reference:
    """Allocation (% of capacity) by (trace, their policy, seed, arrived %)."""

    source: str
    values: dict[tuple[str, str, int, int], float]

    @property
    def arrived_points(self) -> list[int]:
        return sorted({k[3] for k in self.values})

    def seeds(self, trace: str, policy: str, target: int) -> list[int]:
        return sorted(s for t, p, s, a in self.values if (t, p, a) == (trace, policy, target))

    def mean(self, trace: str, policy: str, target: int, seeds: Iterable[int]) -> float | None:
        """Their mean over *seeds* (those of them the table has), or None if it has none."""
        found = [v for s in seeds if (v := self.values.get((trace, policy, s, target))) is not None]
        return statistics.fmean(found) if found else None


def _read_text(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_REFERENCE_BYTES:
        raise TraceError(
            f"{path}: {size} bytes; a reference table may hold at most {MAX_REFERENCE_BYTES} bytes"
        )
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
            raw = fh.read(MAX_REFERENCE_BYTES + 1)
        if len(raw) > MAX_REFERENCE_BYTES:
            raise TraceError(f"{path}: more than {MAX_REFERENCE_BYTES} bytes uncompressed")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc})") from None


def load_reference(path: Path | None = None) -> Reference:
    """Read a reference table (the shipped authors' results when *path* is None)."""
    p = path or REFERENCE_RESULTS
    if not p.is_file():
        raise TraceError(f"{p}: no such reference file")
    reader = csv.reader(io.StringIO(_read_text(p)))
    header = next(reader, None)
    if header is None:
        raise TraceError(f"{p}: empty reference file")
    header = [h.strip() for h in header]
    missing = [k for k in ("trace", "policy", "seed") if k not in header]
    if missing:
        raise TraceError(
            f"{p}: the header lacks {', '.join(missing)} (trace, policy, seed, "
            "alloc_pct_at_arrived_<percent>...)"
        )
    points = {i: int(m.group(1)) for i, h in enumerate(header) if (m := _COLUMN.match(h))}
    if not points:
        raise TraceError(f"{p}: no alloc_pct_at_arrived_<percent> column")
    it, ip, iseed = header.index("trace"), header.index("policy"), header.index("seed")
    values: dict[tuple[str, str, int, int], float] = {}
    for n, row in enumerate(reader, start=2):
        if n > MAX_REFERENCE_ROWS + 1:
            raise TraceError(f"{p}: more than {MAX_REFERENCE_ROWS} rows")
        if not row:
            continue
        where = f"{p}:{n}"
        if len(row) != len(header):
            raise TraceError(f"{where}: {len(row)} fields, the header has {len(header)}")
        if any(len(f) > MAX_FIELD_CHARS for f in row):
            raise TraceError(f"{where}: a field is longer than {MAX_FIELD_CHARS} characters")
        trace, policy = row[it].strip(), row[ip].strip()
        try:
            seed = int(row[iseed])
        except ValueError:
            raise TraceError(f"{where}: 'seed' must be an integer, got {row[iseed]!r}") from None
        for i, arrived in points.items():
            if row[i].strip() == "":
                continue
            try:
                value = float(row[i])
            except ValueError:
                raise TraceError(
                    f"{where}: {header[i]!r} must be a number, got {row[i]!r}"
                ) from None
            if not math.isfinite(value) or not 0 <= value <= 100:
                raise TraceError(f"{where}: {header[i]!r} must be a percentage, got {row[i]!r}")
            values[(trace, policy, seed, arrived)] = value
    return Reference(source=str(p), values=values)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One of our policies on one trace beside the reference, over the same seeds."""

    trace: str
    policy: str
    seeds: tuple[int, ...]
    ours: float
    their_policy: str | None
    theirs: float | None
    their_fgd: float | None
    their_fgd_all: float | None
    their_fgd_seeds: int

    @property
    def delta(self) -> float | None:
        return None if self.theirs is None else self.ours - self.theirs

    @property
    def delta_fgd(self) -> float | None:
        return None if self.their_fgd is None else self.ours - self.their_fgd

    def to_json(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 3)

        return {
            "trace": self.trace,
            "policy": self.policy,
            "seeds": list(self.seeds),
            "ours": r(self.ours),
            "their_policy": self.their_policy,
            "theirs": r(self.theirs),
            "delta": r(self.delta),
            "their_fgd": r(self.their_fgd),
            "delta_fgd": r(self.delta_fgd),
            "their_fgd_all_seeds": r(self.their_fgd_all),
            "their_fgd_seed_count": self.their_fgd_seeds,
        }


def compare(
    reference: Reference,
    trace: str,
    ours: dict[str, dict[int, float]],
    target: int,
) -> list[Comparison]:
    """*ours*: policy -> seed -> allocation %; one row per policy, in that order."""
    out = []
    all_fgd = reference.seeds(trace, BASELINE, target)
    for policy, by_seed in ours.items():
        seeds = tuple(sorted(by_seed))
        theirs_name = THEIR_NAMES.get(policy)
        if theirs_name is None and reference.seeds(trace, policy, target):
            theirs_name = policy  # a reference of one's own, under our names
        out.append(
            Comparison(
                trace=trace,
                policy=policy,
                seeds=seeds,
                ours=statistics.fmean(by_seed.values()),
                their_policy=theirs_name,
                theirs=reference.mean(trace, theirs_name, target, seeds) if theirs_name else None,
                their_fgd=reference.mean(trace, BASELINE, target, seeds),
                their_fgd_all=reference.mean(trace, BASELINE, target, all_fgd),
                their_fgd_seeds=len(all_fgd),
            )
        )
    return out


def target_point(reference: Reference, target: float) -> int:
    """The reference column for ``--target`` percent; refuses a target the table lacks."""
    points = reference.arrived_points
    if target != int(target) or int(target) not in points:
        raise TraceError(
            f"{reference.source} has results at arrived demand "
            f"{', '.join(f'{p}%' for p in points)}; --target {target:g} is not one of them"
        )
    return int(target)


def seed_text(seeds: Sequence[int]) -> str:
    """42-51 for a run of seeds, else the list."""
    s = sorted(seeds)
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return ",".join(str(x) for x in s)
