"""Rendering the Helm chart with Helm's own engine and checking objects against Kubernetes' schemas.

Why these tools: no helm binary or cluster can run here, but ``helm-python-sdk`` binds Helm v4's
Go SDK (the engine ``helm template`` runs) through its C ABI, and ``kubernetes-validate`` ships
the Kubernetes OpenAPI schemas per release, so a chart that passes here renders and is accepted
as a real cluster would render and accept it (research/python-ecosystem.md §10).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "xpushare"
RELEASE = "xs"
NAMESPACE = "xpushare-system"

#: The oldest Kubernetes the chart supports (Chart.yaml kubeVersion: matchConditions and
#: ValidatingAdmissionPolicy v1 are GA in 1.30) and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.30.0", "1.37.0")

#: Kinds from CRDs, which have no schema in the Kubernetes OpenAPI document.
CRD_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")


def helm() -> Any:
    """The helm_python module, or a skip where its wheel does not exist (non-x86_64 Linux)."""
    import pytest

    return pytest.importorskip(
        "helm_python", reason="helm-python-sdk ships x86_64 Linux wheels only"
    )


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object the chart renders with *values*, as `helm install` would send them.

    Renders are cached per values (a test session renders each scenario once); callers get
    their own copy to change.
    """
    return copy.deepcopy(_render(json.dumps(values, sort_keys=True)))


def notes(values: dict[str, Any] | None = None) -> str:
    """The NOTES.txt `helm install` prints with *values*."""
    helm_python = helm()
    with helm_python.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


@cache
def _render(key: str) -> list[dict[str, Any]]:
    values = json.loads(key)
    helm_python = helm()
    with helm_python.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("__template", path)
                objects.append(doc)
    return objects


def strip(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without the template path this module records in it."""
    return copy.deepcopy({k: v for k, v in obj.items() if k != "__template"})


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def config_file(objects: list[dict[str, Any]], key: str) -> Any:
    """A file of the chart's main ConfigMap, parsed."""
    cm = one(objects, "ConfigMap", f"{RELEASE}-xpushare-config")
    return yaml.safe_load(cm["data"][key])


#: Values that turn on every vendor and every optional object, for the widest render.
EVERYTHING: dict[str, Any] = {
    "vendors": {
        name: {"enabled": True}
        for name in (
            "nvidia",
            "amd",
            "ascend",
            "cambricon",
            "hygon",
            "iluvatar",
            "metax",
            "mthreads",
            "mock",
        )
    },
    "nodeAgent": {"nodeScopedPolicy": {"enabled": True}},
    "metrics": {"serviceMonitor": {"enabled": True}, "grafanaDashboard": {"enabled": True}},
    "scheduler": {"web": {"enabled": True, "auth": {"mode": "token"}}},
}

#: Representative installations: name -> values.
SCENARIOS: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    "everything": EVERYTHING,
    "extender-beside-existing-scheduler": {
        "scheduler": {"mode": "extender"},
        "schedulerName": "default-scheduler",
        "webhook": {"failurePolicy": "Ignore", "allowedNamespaces": ["ml", "research"]},
    },
    "cert-manager-combined-amd-nvidia": {
        "webhook": {"tls": {"mode": "cert-manager"}},
        "nodeAgent": {"layout": "combined"},
        "vendors": {"amd": {"enabled": True}},
        "scheduler": {
            "placement": {
                "policy": "binpack",
                "devicePolicy": "spread",
                "memoryOvercommit": {"nvidia": 1.5},
            }
        },
    },
    "mock-only": {
        "vendors": {"nvidia": {"enabled": False}, "mock": {"enabled": True}},
        "hamiCore": {"enabled": False},
    },
}
