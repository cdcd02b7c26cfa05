"""Fleets and workloads to replay: the openb trace's CSV files, and our YAML/JSON format.

openb (Alibaba cluster-trace-gpu-v2023, the trace of the FGD paper, ATC'23):

* nodes: ``sn, cpu_milli, memory_mib, gpu, model``;
* pods: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]`` where
  ``gpu_milli`` is the share of one GPU in thousandths and ``gpu_spec`` an optional
  ``|``-separated list of the GPU models the task accepts.

Our format, for fleets and workloads of your own (YAML or JSON)::

    nodes:                      # a fleet
      - {name: a100-, count: 4, cpu_milli: 64000, memory_mib: 262144,
         gpus: 8, model: A100, gpu_memory_mib: 81920, share_slots: 10, numa_nodes: 2}
    tasks:                      # a workload
      - {name: infer, count: 100, cpu_milli: 4000, memory_mib: 16384,
         num_gpu: 1, gpu_milli: 250, gpu_spec: [A100, V100M32]}

``count`` repeats an entry (names get a numeric suffix). Files may be gzip-compressed
(``.gz``).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xpushare.simulator.gpus import gpu_memory_mib

#: Share slots of a simulated device: the trace has no limit on how many tasks share a GPU,
#: and its smallest share is 50 milli-GPU (20 per GPU); 100 slots never bind.
TRACE_SHARE_SLOTS = 100


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One simulated node."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    model: str = ""
    gpu_memory_mib: int | None = None
    share_slots: int = TRACE_SHARE_SLOTS
    numa_nodes: int = 1

    @property
    def device_memory_mib(self) -> int:
        return self.gpu_memory_mib or gpu_memory_mib(self.model)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task of a workload, in the trace's terms."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_spec: tuple[str, ...] = ()

    @property
    def gpus(self) -> float:
        """GPU demand in GPUs (a 460-milli task asks 0.46)."""
        return self.num_gpu * self.gpu_milli / 1000

    @property
    def whole(self) -> bool:
        return self.gpu_milli >= 1000

    @property
    def models(self) -> tuple[str, ...]:
        """The models the task accepts, each once, in the trace's order."""
        return tuple(dict.fromkeys(self.gpu_spec))


class TraceError(ValueError):
    """A trace or fleet file is malformed; the message names the file and the row."""


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return io.TextIOWrapper(path.open("rb"), encoding="utf-8")


def _stem(path: Path) -> str:
    name = path.name
    return name[: -len(".gz")] if name.endswith(".gz") else name


def _int(row: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    raw = row.get(key)
    if raw is None or raw == "":
        if default is not None:
            return default
        raise TraceError(f"{where}: missing {key!r}")
    try:
        return int(float(raw))
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {key!r} must be a number, got {raw!r}") from None


def _spec(raw: Any) -> tuple[str, ...]:
    """The model list as the trace writes it, repeats included (``V100M16|V100M32|V100M32``
    occurs in gpuspec33): the FGD authors count such a task as a shape of its own, so the
    workload keeps it apart (:meth:`TaskSpec.models` is the list a pod asks)."""
    if raw is None or raw == "":
        return ()
    items = raw if isinstance(raw, list | tuple) else str(raw).split("|")
    return tuple(item for item in (str(i).strip() for i in items) if item)


def _node(row: Mapping[str, Any], where: str, name: str | None = None) -> NodeSpec:
    gpus = _int(row, "gpu" if "gpu" in row else "gpus", where, 0)
    model = str(row.get("model") or "").strip()
    if gpus and not model:
        raise TraceError(f"{where}: a node with GPUs needs a 'model'")
    raw_mem = row.get("gpu_memory_mib")
    return NodeSpec(
        name=name or str(row.get("sn") or row.get("name") or "").strip(),
        cpu_milli=_int(row, "cpu_milli", where),
        memory_mib=_int(row, "memory_mib", where),
        gpus=gpus,
        model=model,
        gpu_memory_mib=int(raw_mem) if raw_mem not in (None, "") else None,
        share_slots=_int(row, "share_slots", where, TRACE_SHARE_SLOTS),
        numa_nodes=max(1, _int(row, "numa_nodes", where, 1)),
    )


def _task(row: Mapping[str, Any], where: str, name: str | None = None) -> TaskSpec:
    num_gpu = _int(row, "num_gpu", where, 0)
    gpu_milli = _int(row, "gpu_milli", where, 1000 if num_gpu else 0)
    if num_gpu < 0 or not 0 <= gpu_milli <= 1000:
        raise TraceError(f"{where}: num_gpu must be >= 0 and gpu_milli in 0..1000")
    if num_gpu and gpu_milli == 0:
        raise TraceError(f"{where}: a task with GPUs needs gpu_milli > 0")
    if num_gpu > 1 and gpu_milli < 1000:
        raise TraceError(f"{where}: a multi-GPU task must use whole GPUs (gpu_milli 1000)")
    return TaskSpec(
        name=name or str(row.get("name") or "").strip(),
        cpu_milli=_int(row, "cpu_milli", where, 0),
        memory_mib=_int(row, "memory_mib", where, 0),
        num_gpu=num_gpu if gpu_milli else 0,
        gpu_milli=gpu_milli if num_gpu else 0,
        gpu_spec=_spec(row.get("gpu_spec")),
    )


def _csv_rows(path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with _open_text(path) as fh:
        reader = csv.DictReader(fh)
        for i, row in enumerate(reader, start=2):
            yield f"{path}:{i}", row


def _document(path: Path) -> Any:
    with _open_text(path) as fh:
        text = fh.read()
    try:
        return json.loads(text) if ".json" in path.name else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise TraceError(
            f"{path}: not valid {'JSON' if '.json' in path.name else 'YAML'}: {exc}"
        ) from None


def _expand(
    items: Iterable[Any], path: Path, key: str
) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    for i, item in enumerate(items):
        where = f"{path}: {key}[{i}]"
        if not isinstance(item, Mapping):
            raise TraceError(f"{where}: expected a mapping, got {type(item).__name__}")
        count = _int(item, "count", where, 1)
        base = str(item.get("name") or f"{key[:-1]}-{i}")
        if count == 1:
            yield where, item, base
        else:
            for n in range(count):
                yield where, item, f"{base}{n}"


def read_nodes(path: str | Path) -> list[NodeSpec]:
    """A fleet from an openb node CSV or our YAML/JSON ``nodes:`` list."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such file")
    if _stem(p).endswith(".csv"):
        nodes = [_node(row, where) for where, row in _csv_rows(p)]
    else:
        doc = _document(p)
        items = doc.get("nodes") if isinstance(doc, Mapping) else doc
        if not isinstance(items, list):
            raise TraceError(f"{p}: expected a 'nodes:' list")
        nodes = [_node(item, where, name) for where, item, name in _expand(items, p, "nodes")]
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[:3]
        raise TraceError(f"{p}: node names must be unique; repeated: {', '.join(dup)}")
    return nodes


def read_tasks(path: str | Path) -> list[TaskSpec]:
    """A workload from an openb pod CSV or our YAML/JSON ``tasks:`` list."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such file")
    if _stem(p).endswith(".csv"):
        return [_task(row, where) for where, row in _csv_rows(p)]
    doc = _document(p)
    items = doc.get("tasks") if isinstance(doc, Mapping) else doc
    if not isinstance(items, list):
        raise TraceError(f"{p}: expected a 'tasks:' list")
    return [_task(item, where, name) for where, item, name in _expand(items, p, "tasks")]
