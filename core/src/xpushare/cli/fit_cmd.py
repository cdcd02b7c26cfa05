"""``xpushare fit``: explain one placement decision, the command for a pod that stays Pending.

Input is one JSON (or YAML) document, from a file or stdin::

    {
      "node": {"name": "gpu-1", "cpu_milli": 64000, "memory_mib": 262144,
               "devices": [{"vendor": "nvidia", "id": "GPU-0", "index": 0,
                            "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960}]},
      "usage": [{"device_id": "GPU-0", "used_slots": 1, "used_memory_mib": 8000,
                 "used_compute_percent": 30}],
      "pod": {"ref": {"name": "train"}, "containers": [{"name": "main",
              "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"}}]},
      "placement": {"policy": "fgd", "memory_overcommit": {"nvidia": 1.5}}
    }

``pod`` may also be a Kubernetes Pod manifest (``kubectl get pod -o json``), or be replaced
by ``request``: one container request (or a list) in xpushare's own form. ``usage`` may be a
list or a mapping by device id; ``node.cpu_milli``/``memory_mib`` are optional (then not
checked). kubectl's own objects are read too (:mod:`xpushare.cli.kubectl_input`): ``node`` a
Node as ``kubectl get node N -o yaml`` prints it, ``usage`` (or ``pods``) the pods as
``kubectl get pods -A -o yaml`` prints them; ``--node`` and ``--pods`` take them from files,
and the document may then be the Pod alone. The answer: whether it fits, which devices with
how much memory and compute, and per reason how many devices were turned down. Exit status
0 when it fits, 1 when not.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from xpushare.cli.kubectl_input import (
    is_kube_object,
    is_list,
    node_document,
    pods_on_node,
)
from xpushare.models import (
    ContainerAssignment,
    ContainerRequest,
    ContainerView,
    Device,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    NodeFit,
    PodAssignment,
    PodRef,
    PodView,
)
from xpushare.models.fit import node_fit_json

_NODE_WIDE = frozenset(
    {
        FitReason.NOT_ENOUGH_FIT,
        FitReason.TOO_FEW_DEVICES,
        FitReason.NO_DEVICES,
        FitReason.NUMA_MISMATCH,
    }
)

if TYPE_CHECKING:
    from xpushare.placement import Placer
    from xpushare.scheduling import PodRequest, UsageLedger


class InputError(click.ClickException):
    """The input document is wrong; exit status 2 like other usage errors."""

    exit_code = 2


def _problem(exc: ValidationError, limit: int = 3) -> str:
    """A pydantic error in one line, the field first, without pydantic's help URLs."""
    errors = exc.errors(include_url=False, include_input=False)
    parts = []
    for err in errors[:limit]:
        where = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more problems")
    return "; ".join(parts)


def _parse(stream: Any) -> Any:
    text = stream.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(f"the input is neither JSON nor YAML: {exc}") from None
    return doc


def _load(stream: Any, node: Any, pods: Any) -> dict[str, Any]:
    doc = _parse(stream)
    if isinstance(doc, dict) and doc.get("kind") == "Pod" and "pod" not in doc:
        doc = {"pod": doc}  # a Pod alone, as kubectl prints it
    if isinstance(doc, dict) and node is not None:
        doc["node"] = _parse(node)
    if isinstance(doc, dict) and pods is not None:
        doc["usage"] = _parse(pods)
    if not isinstance(doc, dict):
        raise InputError("the input must be a JSON object with 'node' and 'pod' or 'request'")
    return doc


def _k8s_pod(manifest: Mapping[str, Any]) -> PodView:
    """A Kubernetes Pod manifest as the view the hooks read."""
    meta = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}

    def containers(key: str, init: bool) -> list[ContainerView]:
        out = []
        for c in spec.get(key) or []:
            res = c.get("resources") or {}
            env = {e["name"]: str(e.get("value", "")) for e in c.get("env") or [] if "name" in e}
            out.append(
                ContainerView(
                    name=c.get("name", ""),
                    limits={k: str(v) for k, v in (res.get("limits") or {}).items()},
                    requests={k: str(v) for k, v in (res.get("requests") or {}).items()},
                    env=env,
                    init=init,
                )
            )
        return out

    return PodView(
        ref=PodRef(
            namespace=meta.get("namespace") or "default",
            name=meta.get("name") or "pod",
            uid=meta.get("uid") or "",
        ),
        annotations=dict(meta.get("annotations") or {}),
        labels=dict(meta.get("labels") or {}),
        containers=tuple(containers("initContainers", True) + containers("containers", False)),
        scheduler_name=spec.get("schedulerName") or "",
    )


def _pod(raw: Any) -> PodView:
    if not isinstance(raw, Mapping):
        raise InputError("'pod' must be an object")
    if "spec" in raw or "metadata" in raw:
        return _k8s_pod(raw)
    return PodView.model_validate(raw)


def _usage_assignment(node: str, vendor: str, u: DeviceUsage) -> PodAssignment:
    """Usage given per device, as the containers the ledger counts (one per slot)."""
    slots = max(1, u.used_slots)
    compute_left = u.used_compute_percent
    containers = []
    parts = list(u.partitions_in_use)
    for k in range(slots):
        compute = min(100, compute_left) if k < slots - 1 else compute_left
        compute_left -= compute
        while compute > 100:  # over-committed compute beyond one slice: spread it
            containers.append(
                ContainerAssignment(
                    container=f"usage-{k}-x",
                    vendor=vendor,
                    devices=(
                        DeviceSlice(device_id=u.device_id, memory_mib=0, compute_percent=100),
                    ),
                )
            )
            compute -= 100
        containers.append(
            ContainerAssignment(
                container=f"usage-{k}",
                vendor=vendor,
                devices=(
                    DeviceSlice(
                        device_id=u.device_id,
                        memory_mib=u.used_memory_mib if k == 0 else 0,
                        compute_percent=compute,
                        exclusive=u.exclusive and k == 0,
                        partition=parts[k] if k < len(parts) else None,
                    ),
                ),
            )
        )
    return PodAssignment(node=node, containers=tuple(containers))


def _ledger(doc: dict[str, Any], placement: Any) -> tuple[UsageLedger, str]:
    raw_node = doc.get("node")
    if is_kube_object(raw_node):
        raw_node = node_document(raw_node)
    if not isinstance(raw_node, Mapping) or "name" not in raw_node:
        raise InputError(
            "'node' must be a Node as `kubectl get node NAME -o yaml` prints it, or an "
            "object with a 'name' and its 'devices'"
        )
    name = str(raw_node["name"])
    devices = [Device.model_validate(d) for d in raw_node.get("devices") or []]
    vendor_of = {d.id: d.vendor for d in devices}
    ledger = placement.new_ledger()
    ledger.set_node(
        name,
        devices,
        cpu_milli=raw_node.get("cpu_milli"),
        memory_mib=raw_node.get("memory_mib"),
        labels=raw_node.get("labels") or {},
    )
    raw_usage = doc.get("usage") or []
    pods: list[Any] = []
    for field in ("usage", "pods"):
        raw = doc.get(field)
        if is_list(raw) and any(map(is_kube_object, _items(raw))):
            # kubectl's pods (`kubectl get pods -A -o yaml`): those bound to this node.
            pods += pods_on_node(raw, name)
            if field == "usage":
                raw_usage = []
        elif field == "pods":
            pods += list(raw or [])
    items = (
        list(raw_usage.items()) if isinstance(raw_usage, Mapping) else list(enumerate(raw_usage))
    )
    for key, value in items:
        fields = dict(value)
        if isinstance(key, str):
            fields.setdefault("device_id", key)
        usage = DeviceUsage.model_validate(fields)
        vendor = vendor_of.get(usage.device_id)
        if vendor is None:
            raise InputError(f"usage names device {usage.device_id!r}, which node {name} lacks")
        ledger.add(f"usage/{usage.device_id}", _usage_assignment(name, vendor, usage))
    for i, pod in enumerate(pods):
        assignment = PodAssignment.model_validate(pod["assignment"])
        ledger.add(
            str(pod.get("name") or f"pod-{i}"),
            assignment,
            cpu_milli=int(pod.get("cpu_milli") or 0),
            memory_mib=int(pod.get("memory_mib") or 0),
        )
    return ledger, name


def _items(raw: Any) -> list[Any]:
    return list(raw if isinstance(raw, list) else raw.get("items") or [])


def _request(doc: dict[str, Any], placer: Placer) -> tuple[PodRequest, str]:
    from xpushare.scheduling import PodRequest

    if "pod" in doc:
        view = _pod(doc["pod"])
        return placer.request(view), str(view.ref)
    raw = doc.get("request")
    if raw is None:
        raise InputError("give the 'pod' to place, or a container 'request'")
    items = raw if isinstance(raw, list) else [raw]
    requests = [ContainerRequest.model_validate(r) for r in items]
    return PodRequest.build(requests), "request"


@click.command("fit")
@click.argument("document", type=click.File("r"), default="-")
@click.option(
    "--node",
    "node_file",
    type=click.File("r"),
    help="The node as `kubectl get node NAME -o yaml` prints it (replaces the document's).",
)
@click.option(
    "--pods",
    "pods_file",
    type=click.File("r"),
    help="The usage: the pods as `kubectl get pods -A -o yaml` prints them.",
)
@click.option("--policy", help="Placement policy (default: the document's, else the default).")
@click.option("--json", "as_json", is_flag=True, help="The answer as JSON on stdout.")
def command(
    document: Any, node_file: Any, pods_file: Any, policy: str | None, as_json: bool
) -> None:
    """Explain whether a pod fits a node: which devices it would get, or why not.

    DOCUMENT is a JSON or YAML file with the node's inventory, its usage and the pod (or
    one container request); "-" (the default) reads stdin. Exit status: 0 fits, 1 does not
    fit, 2 bad input. With kubectl's objects:

    \b
    xpushare fit --node <(kubectl get node N -o yaml) \\
        --pods <(kubectl get pods -A -o yaml) <(kubectl get pod -n NS P -o yaml)

    \b
    {"node": {"name": "gpu-1", "cpu_milli": 64000, "memory_mib": 262144,
              "devices": [{"vendor": "nvidia", "id": "GPU-0", "index": 0,
                           "model": "A100", "memory_mib": 40960}]},
     "usage": [{"device_id": "GPU-0", "used_slots": 1, "used_memory_mib": 8000,
                "used_compute_percent": 30}],
     "pod": <a Pod (kubectl get pod -o json) or {"ref": ..., "containers": ...}>,
     "request": <instead of "pod": {"vendor": "nvidia", "memory_mib": 8000, ...}>,
     "placement": {"policy": "fgd-cpu", "memory_overcommit": {"nvidia": 1.5}}}
    """
    from xpushare.placement import PlacementConfig, Placer
    from xpushare.plugins import PluginHost

    doc = _load(document, node_file, pods_file)
    try:
        placement = PlacementConfig.model_validate(doc.get("placement") or {})
        if policy:
            placement = placement.model_copy(update={"policy": policy})
        ledger, node = _ledger(doc, placement)
        host = PluginHost.from_environment()
        placer = Placer(ledger, host=host, config=placement)
        request, who = _request(doc, placer)
    except ValidationError as exc:
        raise InputError(f"invalid input: {_problem(exc)}") from None
    except ValueError as exc:
        raise InputError(str(exc)) from None
    fit = placer.explain(request, node)
    if as_json:
        click.echo(json.dumps(node_fit_json(fit, who, placement.policy), indent=2))
    else:
        _print(fit, who, request.describe(), placement.policy, ledger, node)
    sys.exit(0 if fit.fits else 1)


def _print(fit: NodeFit, who: str, asked: str, policy: str, ledger: UsageLedger, node: str) -> None:
    console = Console(highlight=False, soft_wrap=True)
    verdict = "[bold green]FITS[/]" if fit.fits else "[bold red]DOES NOT FIT[/]"
    console.print(f"{who} on node {fit.node}: {verdict}  (policy {policy})")
    console.print(f"  asks: {asked}")
    if fit.reason:
        console.print(f"  why: {fit.reason}")
    devices = {d.id: d for d in ledger.devices(node)}
    for r in fit.containers:
        for s in r.devices:
            d = devices.get(s.device_id)
            what = f"{d.vendor} {d.model}, index {d.index}" if d else "?"
            share = "exclusive" if s.exclusive else f"{s.compute_percent}% compute"
            part = f", partition {s.partition}" if s.partition else ""
            console.print(f"  -> {s.device_id} ({what}): {s.memory_mib} MiB, {share}{part}")
    tally: dict[str, int] = {}
    for r in fit.containers:
        for reason, n in r.reasons.items():
            if reason not in _NODE_WIDE:
                tally[reason.value] = tally.get(reason.value, 0) + n
    if tally:
        table = Table("devices turned down, by reason", "count")
        for text, n in sorted(tally.items(), key=lambda kv: -kv[1]):
            table.add_row(text, str(n))
        console.print(table)
