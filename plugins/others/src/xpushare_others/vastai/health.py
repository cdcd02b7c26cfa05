"""Vastai health: VAML 1.0 has no health call, so a die is unhealthy while VAML cannot read its
memory (a die that stopped answering its driver), and a device is healthy when all its dies are
present and answer. A die that disappeared (fewer dies than at detection) is unhealthy too."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.vastai import detect
from xpushare_others.vastai.library import Vaml


def check(vaml: Vaml, devices: Sequence[Device]) -> list[HealthEvent]:
    by_node = {d.node: d for d in detect.dies(vaml)}
    events: list[HealthEvent] = []
    for device in devices:
        nodes = detect.node_numbers(device)
        missing = [n for n in nodes if n not in by_node]
        silent = [n for n in nodes if n in by_node and by_node[n].memory_mib is None]
        healthy = bool(nodes) and not missing and not silent
        if healthy == device.healthy:
            continue
        if healthy:
            reason = "VAML reads every die of the device again"
        elif missing:
            reason = f"VAML no longer lists die node(s) {', '.join(map(str, missing))}"
        else:
            reason = f"VAML cannot read the memory of die node(s) {', '.join(map(str, silent))}"
        events.append(HealthEvent(device_id=device.id, healthy=healthy, reason=reason))
    return events
