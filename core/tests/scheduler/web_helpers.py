"""Helpers of the web view's tests: a scheduler with the view on, and what the ledger says,
computed here from the ledger's own public reads (not from the view's code)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from click.testing import CliRunner

from xpushare.cli.main import main as cli
from xpushare.scheduling import UNITS, UsageLedger
from xpushare.testing.localhttp import serve_local

WEB = {"web.enabled": True, "web.port": 0}


def web_url(running: Any) -> str:
    return f"http://127.0.0.1:{running.scheduler.ports['web']}"


async def fake_prometheus(path: str, handler: Any) -> tuple[web.AppRunner, str]:
    """A Prometheus on a free local port that answers GET *path* with *handler*: its runner
    (clean it up) and its URL."""
    return await serve_local({path: handler})


def ledger_sums(ledger: UsageLedger) -> dict[tuple[str, str], dict[str, int]]:
    """Per (vendor, model): devices, healthy, memory and compute booked and bookable."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for name in ledger.nodes:
        for device in ledger.devices(name):
            usage = ledger.device_usage(name, device.vendor)[device.id]
            acc = out.setdefault(
                (device.vendor, device.model),
                dict.fromkeys(
                    (
                        "devices",
                        "healthy",
                        "memory_used_mib",
                        "memory_cap_mib",
                        "compute_used_percent",
                        "compute_cap_percent",
                    ),
                    0,
                ),
            )
            acc["devices"] += 1
            acc["healthy"] += int(device.healthy)
            acc["memory_used_mib"] += usage.used_memory_mib
            acc["memory_cap_mib"] += int(
                device.memory_mib * ledger.memory_overcommit(device.vendor)
            )
            acc["compute_used_percent"] += usage.used_compute_percent
            acc["compute_cap_percent"] += int(100 * ledger.compute_overcommit(device.vendor))
    return out


def policy_fragmentation(scheduler: Any) -> float:
    """The fleet's fragmentation as the placement policy itself measures it, in GPUs."""
    policy = scheduler.placer.policy
    return sum(policy.node_frag(s) for s in scheduler.ledger.nodes.values()) / UNITS


def fit_document(ledger: UsageLedger, node: str, pod: dict[str, Any], policy: str) -> str:
    """The input of ``xpushare fit`` for *pod* on *node* as the ledger has the node now."""
    state = ledger.nodes[node]
    devices = list(ledger.devices(node))
    usage = []
    for vendor in {d.vendor for d in devices}:
        for u in ledger.device_usage(node, vendor).values():
            if u.used_slots or u.used_memory_mib or u.used_compute_percent:
                usage.append(u.model_dump(mode="json"))
    doc = {
        "node": {
            "name": node,
            "cpu_milli": None if state.cpu_free is None else state.cpu_free,
            "memory_mib": None if state.memory_free is None else state.memory_free,
            "devices": [d.model_dump(mode="json") for d in devices],
        },
        "usage": usage,
        "pod": pod,
        "placement": {"policy": policy},
    }
    return json.dumps(doc)


def fit_cli(document: str) -> dict[str, Any]:
    """``xpushare fit --json`` run on *document*: its JSON answer."""
    result = CliRunner().invoke(cli, ["fit", "--json", "-"], input=document)
    assert result.exit_code in (0, 1), result.output
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer
