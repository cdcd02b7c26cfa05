"""One pod on one node, explained container by container (``xpushare fit``, the web view).

The engine's verdicts say only whether a pod fits and why not in one line; an explanation
walks the pod's containers in order, as the fit does, and says for each which devices it
would get or why none would do, with the vendor's own message where it has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.models import FitReason, FitResult
from xpushare.scheduling import fit_demand, summarize
from xpushare.scheduling.fit import add_extra, slices

if TYPE_CHECKING:
    from collections.abc import Mapping

    from xpushare.scheduling import PodRequest
    from xpushare.scheduling.fit import DemandFitter, DeviceOrder, Extra
    from xpushare.scheduling.state import NodeState


def walk_containers(
    state: NodeState,
    request: PodRequest,
    order: DeviceOrder,
    fitters: Mapping[str, DemandFitter],
) -> tuple[list[FitResult], str]:
    """Each container's result on *state* up to the first that does not fit, and that
    one's message ("" when every container fits)."""
    results: list[FitResult] = []
    extra: Extra = {}
    for demand in request.demands:
        table = state.tables.get(demand.vendor)
        if table is None or not table.devices:
            reason = f"node has no {demand.vendor} devices"
            results.append(FitResult(fits=False, reasons={FitReason.NO_DEVICES: 1}, message=reason))
            return results, reason
        use = None if demand.init else extra
        devices = order(state, table, demand)
        fitter = fitters.get(demand.vendor)
        answer = fitter(state, table, demand, devices, use, True) if fitter else None
        note = ""
        if answer is None:
            picks, reasons = fit_demand(table, demand, devices, use, full=True)
        else:
            picks, reasons, note = answer
        if picks is None:
            message = summarize(reasons, len(table.devices), demand, note)
            results.append(FitResult(fits=False, reasons=dict(reasons), message=message))
            return results, message
        results.append(FitResult(fits=True, devices=slices(picks), reasons=dict(reasons)))
        if not demand.init:
            add_extra(extra, picks)
    return results, ""


__all__ = ["walk_containers"]
