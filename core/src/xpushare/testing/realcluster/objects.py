"""Kubernetes objects for a test control plane: Ready nodes, and the chart's extender and
webhook configurations pointed at a local scheduler.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

Object = dict[str, Any]


def ready_node(
    name: str,
    annotations: dict[str, str] | None = None,
    capacity: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> Object:
    """A Node object as a healthy kubelet reports it: Ready, with *capacity* (extended
    resources such as ``nvidia.com/gpu`` included) as its allocatable too.

    The status must be written through the status subresource after the create (the API
    server drops ``status`` on create): :func:`create_ready_node` does both.
    """
    resources = {"cpu": "64", "memory": "256Gi", "pods": "250", **(capacity or {})}
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(annotations or {}),
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "a test node without a kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def create_ready_node(core: Any, node: Object) -> Object:
    """Create *node* (from :func:`ready_node`) and write its status; the stored object.

    kube-apiserver's TaintNodesByCondition admission gives every new Node the
    ``node.kubernetes.io/not-ready:NoSchedule`` taint, which the node lifecycle controller
    lifts once the kubelet reports Ready. Neither runs here (see :data:`CONTROLLERS`), so the
    taints are set to the node's own (none unless given), as that controller would leave them.
    """
    name = node["metadata"]["name"]
    core.create_node(node)
    core.patch_node_status(name, {"status": node["status"]})
    taints = (node.get("spec") or {}).get("taints")
    stored: Object = core.patch_node(name, {"spec": {"taints": taints}})
    return stored


#: The port of the chart's Service that reaches the filter workers (its 443 the leader).
FILTER_WORKERS_PORT = ":8444"


def extender_config(
    rendered: Object,
    url: str,
    ca_file: Path,
    *,
    leader_namespace: str | None = None,
    filter_url: str | None = None,
) -> Object:
    """The chart's KubeSchedulerConfiguration (*rendered*, parsed) with each extender pointed
    at *url* (the filter workers' entry at *filter_url*, when the chart renders one) and
    trusting *ca_file*; everything else (verbs, managed resources, timeouts, ``serverName``,
    profiles) as the chart renders it."""
    config = dict(rendered)
    extenders = []
    for extender in config.get("extenders") or []:
        tls = {k: v for k, v in (extender.get("tlsConfig") or {}).items() if k != "caData"}
        tls["caFile"] = str(ca_file)
        target = url
        if str(extender.get("urlPrefix", "")).endswith(FILTER_WORKERS_PORT):
            if filter_url is None:
                raise ValueError("the chart renders filter workers: give their filter_url")
            target = filter_url
        extenders.append({**extender, "urlPrefix": target, "tlsConfig": tls})
    config["extenders"] = extenders
    if leader_namespace is not None:
        election = dict(config.get("leaderElection") or {})
        election["resourceNamespace"] = leader_namespace
        config["leaderElection"] = election
    return config


def webhook_config(rendered: Object, url: str, ca_pem: bytes) -> Object:
    """The chart's MutatingWebhookConfiguration (*rendered*) with each webhook calling *url*
    (instead of the in-cluster Service) and trusting *ca_pem*; rules, selectors, match
    conditions and failure policy as the chart renders them."""
    import base64

    config = {k: v for k, v in rendered.items() if not k.startswith("__")}
    webhooks = []
    for hook in config.get("webhooks") or []:
        client_config = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
        webhooks.append({**hook, "clientConfig": client_config})
    config["webhooks"] = webhooks
    metadata = dict(config.get("metadata") or {})
    # cert-manager's injection annotation would mean nothing here.
    metadata.pop("annotations", None)
    config["metadata"] = metadata
    return config
