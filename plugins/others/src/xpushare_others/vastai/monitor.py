"""Vastai monitoring: each die's memory and AI (VDSP) utilisation, summed per card."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.vastai import detect
from xpushare_others.vastai.library import Vaml


def sample(vaml: Vaml, devices: Sequence[Device]) -> MonitorSnapshot:
    by_node = {d.node: d for d in detect.dies(vaml)}
    samples = []
    for device in devices:
        parts = [by_node[n] for n in detect.node_numbers(device) if n in by_node]
        used = 0
        utils: list[float] = []
        healthy = bool(parts)
        for die in parts:
            if die.memory_mib is None:  # VAML did not answer for this die just now
                healthy = False
                continue
            where = f"die {die.index} of card {die.card}"
            used += vaml.memory(die.handle, where).used // detect.MIB
            util = vaml.utilization(die.handle, where)
            if util is not None:
                utils.append(util)
        samples.append(
            DeviceSample(
                device_id=device.id,
                utilization_percent=sum(utils) / len(utils) if utils else None,
                memory_used_mib=used,
                memory_total_mib=device.memory_mib,
                healthy=healthy,
            )
        )
    return MonitorSnapshot(devices=tuple(samples))
