"""Where the workloads ``xpushare simulate`` knows by name live.

The embedded sample ships inside the package (``data/``), so a fresh install can run a
simulation with no download; the full openb traces are read from a directory of the trace's
CSV files, given with ``--data-dir``, ``XPUSHARE_OPENB_DIR`` or found next to the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The trace variants the FGD authors published (openb_pod_list_<name>.csv), by file suffix.
TRACES = (
    "default",
    "cpu050",
    "cpu100",
    "cpu200",
    "cpu250",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpushare100",
    "gpuspec10",
    "gpuspec20",
    "gpuspec25",
    "gpuspec33",
    "multigpu20",
    "multigpu30",
    "multigpu40",
    "multigpu50",
)
NODE_FILE = "openb_node_list_gpu_node.csv"
DATA_ENV = "XPUSHARE_OPENB_DIR"

_DATA = Path(__file__).parent / "data"
SAMPLE_NODES = _DATA / "openb_sample_node_list.csv.gz"
SAMPLE_PODS = _DATA / "openb_sample_pod_list.csv.gz"
#: The FGD authors' published per-seed results for the 17 traces (``data/README.md``).
REFERENCE_RESULTS = _DATA / "fgd_reference_results.csv.gz"


def pod_file(trace: str) -> str:
    return f"openb_pod_list_{trace}.csv"


def find_data_dir(start: Path | None = None) -> Path | None:
    """The openb directory: $XPUSHARE_OPENB_DIR, else shared/data/openb near *start*."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for base in (here, *here.parents):
        for candidate in (base / "shared" / "data" / "openb", base / "data" / "openb"):
            if (candidate / NODE_FILE).is_file():
                return candidate
    return None


def trace_files(trace: str, data_dir: Path | None) -> tuple[Path, Path]:
    """(nodes, pods) of a named trace; ``FileNotFoundError`` says where it looked."""
    if trace not in TRACES:
        raise ValueError(f"unknown trace {trace!r}; known: {', '.join(TRACES)}")
    root = data_dir or find_data_dir()
    if root is None:
        raise FileNotFoundError(
            f"no openb data directory found: pass --data-dir, set {DATA_ENV}, or run from a "
            "checkout with shared/data/openb (files from alibaba/clusterdata, "
            "cluster-trace-gpu-v2023)"
        )
    nodes, pods = root / NODE_FILE, root / pod_file(trace)
    for path in (nodes, pods):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found; is {root} the openb directory?")
    return nodes, pods
