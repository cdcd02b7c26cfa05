"""Turning trace rows into what the extender sees: mock-vendor devices and pod specs.

Nodes get devices of the built-in ``mock`` vendor whose model is the trace's GPU model. A
task becomes a pod spec with the mock vendor's resource names, as a user would write it:

* ``num_gpu`` whole GPUs: ``<count>: num_gpu`` and ``<compute>: 100`` (whole devices, used
  exclusively, as HAMi's webhook makes a bare whole-GPU request);
* a fractional ``gpu_milli`` on one GPU: ``<memory-percent>`` and ``<compute>`` both
  ``gpu_milli / 10``, since the trace gives only a share of the GPU;
* ``gpu_spec`` becomes the ``xpushare.io/use-model`` annotation;
* CPU and memory become the container's requests, checked as kube-scheduler would.

The fleet is registered in a seeded random order (:func:`seeded_order`), the order in which
the placement engine breaks ties.

A MIG fleet (``xpushare simulate --mig A100``) has the GPUs of the models named in dynamic
MIG mode, cut by their real geometry (:mod:`xpushare.simulator.migprofiles`), and is
driven through the NVIDIA vendor, whose fit places MIG instances (and, on the other GPUs,
leaves the decision to the core's, as for the mock vendor): the same workload then shows
what HAMi-core sharing and MIG each make of the fleet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

from xpushare.models import (
    ContainerView,
    Device,
    PartitionProfile,
    PodRef,
    PodView,
    ResourceNames,
)
from xpushare.plugins.builtin.defaults import USE_MODEL
from xpushare.scheduling import UsageLedger
from xpushare.simulator.trace import NodeSpec, TaskSpec

#: The vendor whose devices the simulated fleet has.
VENDOR = "mock"
#: The vendor of a MIG fleet: the one whose fit knows MIG geometry.
MIG_VENDOR = "nvidia"

#: MIG profiles per trace model, for the models a fleet has in MIG mode.
MigModels = dict[str, tuple[PartitionProfile, ...]]


def node_devices(
    node: NodeSpec, vendor: str = VENDOR, mig: MigModels | None = None
) -> list[Device]:
    per_numa = max(1, -(-node.gpus // node.numa_nodes))
    partitions = (mig or {}).get(node.model, ())
    return [
        Device(
            vendor=vendor,
            id=f"{node.name}-gpu{i}",
            index=i,
            model=node.model,
            memory_mib=node.device_memory_mib,
            share_slots=max(p.max_count for p in partitions) if partitions else node.share_slots,
            numa_node=i // per_numa if node.numa_nodes > 1 else None,
            mode="mig" if partitions else "shared",
            partitions=partitions,
        )
        for i in range(node.gpus)
    ]


#: How a replay orders the fleet: ``seeded`` (:func:`seeded_order`, the default), or
#: ``listed`` (as the fleet file lists the nodes).
NodeOrder = Literal["seeded", "listed"]
NODE_ORDERS: tuple[NodeOrder, ...] = ("seeded", "listed")


def seeded_order(nodes: Sequence[NodeSpec], seed: int) -> list[NodeSpec]:
    """*nodes* in a random order drawn from *seed*, the same in every process.

    The FGD authors' simulator names every node with a random prefix and kube-scheduler
    takes the first name among nodes of equal score, so ties go to a random node, but the
    same one for the whole run: the tasks that tie pack onto it. Sorting by a keyed hash of
    the name is that order (BLAKE2b, not ``hash()``, which Python salts per process).
    """
    key = str(seed).encode()

    def rank(node: NodeSpec) -> bytes:
        return hashlib.blake2b(node.name.encode(), digest_size=8, key=key).digest()

    return sorted(nodes, key=rank)


def populate(
    ledger: UsageLedger,
    nodes: Sequence[NodeSpec],
    vendor: str = VENDOR,
    mig: MigModels | None = None,
) -> None:
    """Register every node of the fleet, with its host resources, in *ledger*."""
    for node in nodes:
        ledger.set_node(
            node.name,
            node_devices(node, vendor, mig),
            cpu_milli=node.cpu_milli,
            memory_mib=node.memory_mib,
        )


def pod_view(task: TaskSpec, names: ResourceNames, namespace: str = "sim") -> PodView:
    """The pod spec a user would write for *task*."""
    limits: dict[str, str] = {}
    if task.num_gpu:
        limits[names.count] = str(task.num_gpu)
        if task.whole:
            if names.compute:
                limits[names.compute] = "100"
        else:
            percent = str(max(1, task.gpu_milli // 10))
            if names.memory_percent:
                limits[names.memory_percent] = percent
            if names.compute:
                limits[names.compute] = percent
    requests = {}
    if task.cpu_milli:
        requests["cpu"] = f"{task.cpu_milli}m"
    if task.memory_mib:
        requests["memory"] = f"{task.memory_mib}Mi"
    annotations = {USE_MODEL: ",".join(task.models)} if task.gpu_spec and task.num_gpu else {}
    return PodView(
        ref=PodRef(namespace=namespace, name=task.name),
        annotations=annotations,
        containers=(ContainerView(name="main", limits=limits, requests=requests),),
    )


def capacity_gpus(nodes: Sequence[NodeSpec]) -> int:
    return sum(n.gpus for n in nodes)
