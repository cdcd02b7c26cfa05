"""Build the small openb sample that ships inside the core for ``xpushare simulate``.

Why a sample: the full trace (1,213 GPU nodes, 8,152 tasks) takes tens of seconds per policy,
too long for a first run or a test; a stratified sample keeps its mix of GPU models, node
shapes and task shapes, and its ratio of GPU demand to capacity, at about a sixth of the size.

Usage (from the repository root; the output is committed):

    uv run python benchmarks/make_openb_sample.py ../shared/data/openb \\
        core/src/xpushare/simulator/data
"""

from __future__ import annotations

import csv
import gzip
import io
import random
import sys
from collections import defaultdict
from pathlib import Path

#: One node in FRACTION of each (model, GPUs, CPU, memory) class, at least one per class.
FRACTION = 6
SEED = 2023


def main(src: Path, dst: Path) -> None:
    rng = random.Random(SEED)
    with (src / "openb_node_list_gpu_node.csv").open() as fh:
        nodes = list(csv.DictReader(fh))
    classes: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for n in nodes:
        classes[(n["model"], n["gpu"], n["cpu_milli"], n["memory_mib"])].append(n)
    picked: list[dict[str, str]] = []
    for members in classes.values():
        k = max(1, round(len(members) / FRACTION))
        picked.extend(rng.sample(members, k))
    picked.sort(key=lambda n: n["sn"])
    with (src / "openb_pod_list_default.csv").open() as fh:
        pods = list(csv.DictReader(fh))
    gpus = sum(int(n["gpu"]) for n in picked)
    full_gpus = sum(int(n["gpu"]) for n in nodes)
    share = gpus / full_gpus
    tasks = sorted(rng.sample(pods, round(len(pods) * share)), key=lambda p: p["name"])
    dst.mkdir(parents=True, exist_ok=True)
    _write(dst / "openb_sample_node_list.csv.gz", picked, list(nodes[0]))
    _write(dst / "openb_sample_pod_list.csv.gz", tasks, list(pods[0]))
    demand = sum(int(p["num_gpu"]) * int(p["gpu_milli"]) for p in tasks) / 1000
    print(f"{len(picked)} nodes, {gpus} GPUs; {len(tasks)} tasks asking {demand:.1f} GPUs")


def _write(path: Path, rows: list[dict[str, str]], fields: list[str]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    # mtime=0: the same input gives the same bytes, so the committed file only changes when
    # the sample does.
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(buf.getvalue().encode())


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
