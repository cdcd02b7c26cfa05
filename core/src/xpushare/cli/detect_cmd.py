"""``xpushare detect``: run every loaded vendor's detection on this machine and show it.

This is what an operator runs on a node that shows no devices. By default each vendor is one
line, in the same form for every vendor: its state, its devices, and the one thing to do
(most machines lack most vendors, so seven absent vendors must not print sixty lines);
``--verbose`` adds each vendor's whole message (every path tried, the loader's errors).
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

import click

from xpushare.errors import PluginError, VendorUnavailable
from xpushare.models import Device
from xpushare.native import NativeError
from xpushare.plugins import PluginHost

#: A vendor library's file name in a message (libnvidia-ml.so.1, libamd_smi.so, ...).
_LIBRARY = re.compile(r"\blib[\w+.-]*?\.so(?:\.\d+)*\b")
#: How vendors' messages say a library is absent.
_MISSING = re.compile(
    r"not found|could not be loaded|cannot open shared object|no such file", re.IGNORECASE
)
#: Sentences (or clauses after ';') that tell the operator what to do begin with one of
#: these verbs, capitalised or not ("...; set XPUSHARE_MOCK_DEVICES=...").
_ACTION = re.compile(
    r"(?:^|(?<=[.;:]\s))((?i:Install|Set|Mount|Point|Load|Check|Run|Add|Give|Enable|Start|Use|"
    r"Upgrade|Update)\b[^.;]*)",
)


def _probe(host: PluginHost) -> tuple[list[Device], list[dict[str, Any]]]:
    devices: list[Device] = []
    vendors: list[dict[str, Any]] = []
    for name, handle in sorted(host.vendors.items()):
        try:
            handle.startup()
            found = handle.detect()
        except VendorUnavailable as exc:
            vendors.append({"vendor": name, "state": "inactive", "reason": exc.reason})
        except (PluginError, NativeError) as exc:
            vendors.append({"vendor": name, "state": "error", "reason": str(exc)})
        else:
            devices.extend(found)
            vendors.append({"vendor": name, "state": "active", "devices": len(found)})
    return devices, vendors


def next_steps(vendor: str, reason: str) -> list[str]:
    """A vendor's message as short clauses (what is wrong: the one thing to do), best first:
    the vendor's own advice, then a shorter one, then the cause alone."""
    flat = " ".join(reason.split())
    library = _LIBRARY.search(flat)
    if library and _MISSING.search(flat):
        # Every vendor's loader says it its own way; the advice is the same for all.
        cause = f"no {library.group(0)}"
        # Shorter and shorter, so a long library name still gets a next step in 80 columns
        # (`no libnvidia-ml.so.1` alone used to be all nvidia's line said).
        actions = [
            f"install its driver or set vendors.{vendor}.library_path",
            "install the driver or set library_path",
            "install the driver",
        ]
    else:
        cause = re.split(r"(?<=[.;])\s|: (?=/)", flat, maxsplit=1)[0].rstrip(".;")
        found = _ACTION.search(flat)
        actions = [found.group(1).strip()] if found else []
        if found:
            # Its head alone when the whole does not fit: "set XPUSHARE_MOCK_DEVICES".
            head = re.split(r"=| or | to |'", actions[0], maxsplit=1)[0].strip()
            if head != actions[0]:
                actions.append(head)
    out = [f"{cause}: {a[0].lower()}{a[1:]}" for a in actions if a.lower() not in cause.lower()]
    out.append(cause)
    return out


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _lines(vendors: list[dict[str, Any]], width: int) -> list[str]:
    name_w = max([len("vendor"), *(len(v["vendor"]) for v in vendors)])
    out = [f"{'vendor':<{name_w}}  {'state':<8} next step"]
    for v in vendors:
        prefix = f"{v['vendor']:<{name_w}}  {v['state']:<8} "
        if v["state"] == "active":
            out.append(f"{prefix}{v['devices']} device(s)")
            continue
        steps = next_steps(v["vendor"], v["reason"])
        fitting = [s for s in steps if len(prefix) + len(s) <= width]
        out.append(
            _fit(prefix + (fitting[0] if fitting else steps[-2 if len(steps) > 1 else -1]), width)
        )
    return out


@click.command("detect")
@click.option("--json", "as_json", is_flag=True, help="Devices and vendor states as JSON.")
@click.option(
    "-v", "--verbose", is_flag=True, help="Each vendor's whole message (every path tried)."
)
def command(as_json: bool, verbose: bool) -> None:
    """Detect devices with every loaded vendor plugin.

    Each device is shown as the inventory the node agent would publish; each vendor as one
    line: active with its devices, or inactive (library or hardware absent) or error, with
    the one thing to do. --verbose shows the vendors' whole messages. The mock vendor shows
    devices only when XPUSHARE_MOCK_DEVICES is set (e.g. '8x A100-80GB').
    """
    host = PluginHost.from_environment()
    try:
        devices, vendors = _probe(host)
    finally:
        host.close()
    if as_json:
        payload = {
            "devices": [d.model_dump(mode="json") for d in devices],
            "vendors": vendors,
        }
        click.echo(json.dumps(payload, indent=2))
        return
    # rich (~4 MiB) only for this command's table: `xpushare node` imports this module too.
    from rich.console import Console
    from rich.table import Table

    width = shutil.get_terminal_size((100, 24)).columns
    console = Console(soft_wrap=False, width=width)
    if devices:
        table = Table("vendor", "index", "id", "model", "memory MiB", "NUMA", "health", "slots")
        for d in devices:
            table.add_row(
                d.vendor,
                str(d.index),
                d.id,
                d.model,
                str(d.memory_mib),
                "" if d.numa_node is None else str(d.numa_node),
                "healthy" if d.healthy else "[red]unhealthy[/]",
                str(d.share_slots),
            )
        console.print(table)
    else:
        click.echo("no devices found")
    for line in _lines(vendors, width):
        click.echo(line)
    absent = [v for v in vendors if v["state"] != "active"]
    if verbose:
        for v in absent:
            click.echo(f"\n{v['vendor']}: {v['state']}: {v['reason']}")
    elif absent:
        click.echo("(xpushare detect --verbose: each vendor's whole message, every path tried)")
