"""The steps every xpushare-others pod-flow test shares: a pod's share used, then given back.

Why: each vendor's pod-flow test must show the same life cycle around its own Allocate
assertions (the handoff served by Allocate, a second pod with the same request refused
by /filter while the first holds the device, and fitting again once the first is deleted);
written once here so the four tests differ only in what is vendor-specific.
"""

from __future__ import annotations

from typing import Any

from xpushare.testing.podflow import PodFlow

#: Bound of waits that end within milliseconds on working code (the scheduler's watch seeing
#: a pod admitted or deleted): only there so a broken test fails.
WAIT_S = 5.0


async def refused_then_fits_after_delete(
    flow: PodFlow, holder: dict[str, Any], again: dict[str, Any]
) -> dict[str, Any]:
    """*again* (the holder's request) does not fit while *holder* runs, fits once it is gone.

    Returns *again* bound to the node, the pod as the API server holds it.
    """
    created = flow.create(await flow.admit(again))
    await flow.api.wait_for(lambda: flow.scheduler.cluster.synced, WAIT_S)
    refused = await flow.filter(created)
    assert refused.get("NodeNames") in (None, []), refused
    assert flow.node_name in (refused.get("FailedNodes") or {}), refused

    await flow.delete(holder)
    ns, name = holder["metadata"].get("namespace", "default"), holder["metadata"]["name"]
    await flow.api.wait_for(lambda: flow.scheduler.cluster.pod_by_name(ns, name) is None, WAIT_S)
    fits = await flow.filter(created)
    assert fits.get("NodeNames") == [flow.node_name], fits
    bound = await flow.bind(created)
    assert not bound.get("Error"), bound
    meta = created["metadata"]
    stored = flow.api.get("pods", meta["name"], meta.get("namespace", "default"))
    assert stored is not None
    return stored
