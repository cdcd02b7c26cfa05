"""``xpushare detect``: run every loaded vendor's detection on this machine and show it.

This is what an operator runs on a node that shows no devices: a vendor that is inactive says
why (library not found, with every path tried), one that failed says what failed.
"""

import json
from typing import Any

import click

from xpushare.errors import PluginError, VendorUnavailable
from xpushare.models import Device
from xpushare.native import NativeError
from xpushare.plugins import PluginHost


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


@click.command("detect")
@click.option("--json", "as_json", is_flag=True, help="Devices and vendor states as JSON.")
def command(as_json: bool) -> None:
    """Detect devices with every loaded vendor plugin.

    Each device is shown as the inventory the node agent would publish. A vendor without its
    library or hardware here is listed as inactive with the reason. The mock vendor shows
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

    console = Console(soft_wrap=False)
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
        console.print("no devices found")
    for v in vendors:
        if v["state"] == "active":
            console.print(f"{v['vendor']}: active, {v['devices']} device(s)")
        else:
            console.print(f"{v['vendor']}: {v['state']}: {v['reason']}", markup=False)
