#!/usr/bin/env python3
"""Check the NVIDIA plugin against a real GPU: detect and monitor versus nvidia-smi.

Why a script and not a test: it needs a machine with an NVIDIA GPU and driver, which CI and
development machines do not have, so it lives outside pytest's test paths and is run by hand
(or by a GPU job) whenever such a machine is available. It loads the plugin through the real
plugin host, exactly as the node agent does (library thread, pynvml bound to the loaded
NVML), runs startup, detect, monitor and one health check, and compares the result with
``nvidia-smi --query-gpu``:

* identity must match exactly: the set of UUIDs, and per GPU its name, total memory (MiB)
  and PCI bus id; the plugin's monitor must report the same total memory;
* readings that move (used memory, temperature, power) are compared with a tolerance and
  only flagged, since the two tools sample at different instants.

Exit status: 0 all identity checks passed, 1 a mismatch, 2 the check could not run (no
nvidia-smi, the vendor inactive). Usage, keeping the output beside the benchmarks::

    uv run python plugins/nvidia/scripts/gpu_check.py \\
        | tee benchmarks/results/gpu-check-nvidia-$(hostname).txt
"""

from __future__ import annotations

import argparse
import csv
import io
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

#: nvidia-smi fields, in the order of the query (``nvidia-smi --help-query-gpu``).
FIELDS = (
    "uuid",
    "name",
    "memory.total",
    "pci.bus_id",
    "memory.used",
    "temperature.gpu",
    "power.draw",
    "utilization.gpu",
    "driver_version",
)
#: Tolerances for readings that change between two samples taken a moment apart.
USED_MEMORY_TOLERANCE_MIB = 256
TEMPERATURE_TOLERANCE_C = 5.0
POWER_TOLERANCE = 0.25  # relative, plus 10 W for idle GPUs
POWER_FLOOR_W = 10.0


@dataclass
class Row:
    check: str
    gpu: str
    plugin: str
    smi: str
    ok: bool | None  # None: informational (a reading that may legitimately differ)

    @property
    def verdict(self) -> str:
        return {True: "ok", False: "MISMATCH", None: "~"}[self.ok]


def normalize_bus_id(bus_id: str) -> str:
    value = bus_id.strip().lower()
    domain, _, rest = value.partition(":")
    return f"{domain[-4:].rjust(4, '0')}:{rest}" if rest else value


def query_smi(executable: str) -> list[dict[str, str]]:
    done = subprocess.run(
        [executable, f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"nvidia-smi failed ({done.returncode}): {done.stderr.strip()}")
    rows = []
    for record in csv.reader(io.StringIO(done.stdout)):
        if record:
            rows.append(dict(zip(FIELDS, (v.strip() for v in record), strict=False)))
    return rows


def number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def run_plugin(config: dict[str, Any]) -> tuple[list[Any], Any, Any, float]:
    from xpushare.plugins import HostSettings, PluginHost
    from xpushare.plugins.builtin import CORE_PLUGINS
    from xpushare_nvidia import plugin

    host = PluginHost(
        HostSettings(strict=True),
        core_plugins=CORE_PLUGINS,
        node_name=platform.node() or "gpu-check",
        vendor_config={"nvidia": config},
    )
    host.register("nvidia", plugin)
    handle = host.vendor("nvidia")
    try:
        started = time.perf_counter()
        handle.startup()
        devices = list(handle.detect())
        detect_s = time.perf_counter() - started
        snapshot = handle.monitor(devices)
        health = handle.check_health(devices, 0.5)
        return devices, snapshot, health, detect_s
    finally:
        host.close()


def compare(devices: list[Any], snapshot: Any, smi: list[dict[str, str]]) -> list[Row]:
    rows: list[Row] = []
    ours = {d.id: d for d in devices}
    theirs = {r["uuid"]: r for r in smi}
    rows.append(Row("gpu count", "-", str(len(ours)), str(len(theirs)), len(ours) == len(theirs)))
    samples = {s.device_id: s for s in snapshot.devices} if snapshot is not None else {}
    for uuid in sorted(set(ours) | set(theirs)):
        d, r = ours.get(uuid), theirs.get(uuid)
        short = uuid[:13]
        if d is None or r is None:
            rows.append(Row("present", short, str(d is not None), str(r is not None), False))
            continue
        rows.append(Row("name", short, d.model, r["name"], d.model == r["name"]))
        total = number(r["memory.total"])
        rows.append(
            Row(
                "memory.total MiB",
                short,
                str(d.memory_mib),
                r["memory.total"],
                total is not None and abs(d.memory_mib - total) <= 1,
            )
        )
        bus = normalize_bus_id(r["pci.bus_id"])
        rows.append(Row("pci.bus_id", short, d.pci_bus_id or "-", bus, d.pci_bus_id == bus))
        rows.append(Row("index", short, str(d.index), "-", None))
        rows.append(Row("mode / slots", short, f"{d.mode} / {d.share_slots}", "-", None))
        if d.links:
            links = ", ".join(f"{lk.kind.value}x{lk.count}->{lk.peer[:12]}" for lk in d.links)
            rows.append(Row("links", short, links, "-", None))
        s = samples.get(uuid)
        if s is None:
            rows.append(Row("monitor sample", short, "missing", "-", False))
            continue
        rows.append(
            Row(
                "monitor memory.total",
                short,
                str(s.memory_total_mib),
                r["memory.total"],
                s.memory_total_mib is not None
                and total is not None
                and abs(s.memory_total_mib - total) <= 1,
            )
        )
        used = number(r["memory.used"])
        temp = number(r["temperature.gpu"])
        power = number(r["power.draw"])
        rows += [
            Row("memory.used MiB", short, str(s.memory_used_mib), r["memory.used"], None),
            Row("temperature C", short, str(s.temperature_c), r["temperature.gpu"], None),
            Row("power W", short, str(s.power_w), r["power.draw"], None),
            Row("utilization %", short, str(s.utilization_percent), r["utilization.gpu"], None),
            Row("processes", short, str(s.process_count), "-", None),
            Row("healthy", short, str(s.healthy), "-", s.healthy),
        ]
        flagged = []
        if (
            s.memory_used_mib is not None
            and used is not None
            and (abs(s.memory_used_mib - used) > USED_MEMORY_TOLERANCE_MIB)
        ):
            flagged.append("memory.used")
        if (
            s.temperature_c is not None
            and temp is not None
            and (abs(s.temperature_c - temp) > TEMPERATURE_TOLERANCE_C)
        ):
            flagged.append("temperature")
        if (
            s.power_w is not None
            and power is not None
            and (abs(s.power_w - power) > POWER_TOLERANCE * power + POWER_FLOOR_W)
        ):
            flagged.append("power")
        if flagged:
            rows.append(Row("readings apart", short, ", ".join(flagged), "-", None))
    return rows


def print_table(rows: list[Row]) -> None:
    headers = ("check", "gpu", "plugin", "nvidia-smi", "verdict")
    cells = [(r.check, r.gpu, r.plugin, r.smi, r.verdict) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("-" * len(line))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--driver-root",
        action="append",
        default=[],
        help="where the host's driver is mounted (repeatable)",
    )
    parser.add_argument("--library-path", help="explicit path of libnvidia-ml.so.1")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi to compare with")
    args = parser.parse_args(argv)

    executable = shutil.which(args.nvidia_smi)
    if executable is None:
        print(
            f"gpu_check: {args.nvidia_smi} not found; run this on a machine with an NVIDIA driver",
            file=sys.stderr,
        )
        return 2
    config: dict[str, Any] = {"driver_roots": args.driver_root, "container_usage": False}
    if args.library_path:
        config["library_path"] = args.library_path
    from xpushare import VendorUnavailable

    try:
        devices, snapshot, health, detect_s = run_plugin(config)
    except VendorUnavailable as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    smi = query_smi(executable)

    print(
        f"xpushare NVIDIA plugin GPU check on {platform.node()} at "
        f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}"
    )
    driver = smi[0].get("driver_version", "?") if smi else "?"
    extra = devices[0].extra if devices else {}
    print(
        f"driver (nvidia-smi) {driver}; plugin saw driver {extra.get('driver_version', '?')}, "
        f"CUDA {extra.get('cuda_version', '?')}; startup+detect {detect_s * 1000:.0f} ms"
    )
    print(f"health check events: {list(health) if health is not None else 'none (disabled)'}")
    print()
    rows = compare(devices, snapshot, smi)
    print_table(rows)
    failed = [r for r in rows if r.ok is False]
    print()
    print(
        f"{'FAILED' if failed else 'PASSED'}: {len(failed)} mismatch(es) in "
        f"{sum(1 for r in rows if r.ok is not None)} checks"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
