"""A node's inventory of one vendor, as the node agent writes it to the Node.

Why a state next to the device list: "this node has no devices of the vendor" and "the node
agent could not find out" must lead to different scheduler behaviour (DESIGN.md §4), and an
empty list alone cannot tell them apart. One key per vendor lets each vendor's detection
fail or change without rewriting the others'.
"""

from collections.abc import Iterable
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from xpushare.codec import _safejson as sj
from xpushare.codec.keys import inventory_key, vendor_of_inventory_key
from xpushare.errors import CodecError
from xpushare.models import Device

#: ``ok``: devices were detected; ``no-devices``: detection worked and found none;
#: ``error``: detection failed (``message`` says why); devices, if any, are the last known.
InventoryState = Literal["ok", "no-devices", "error"]

_HINT = "the node agent rewrites it on its next inventory pass; check the node agent's logs"


class Inventory(BaseModel):
    """One vendor's devices on one node, with whether detection worked."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    vendor: str = Field(min_length=1)
    node: str = Field(min_length=1)
    devices: tuple[Device, ...] = ()
    state: InventoryState
    message: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.state == "ok" and not self.devices:
            raise ValueError("state 'ok' with no devices; use state 'no-devices'")
        if self.state == "no-devices" and self.devices:
            raise ValueError(f"state 'no-devices' with {len(self.devices)} devices")
        seen: set[str] = set()
        for position, device in enumerate(self.devices):
            if device.vendor != self.vendor:
                raise ValueError(
                    f"device {position} ({device.id!r}) belongs to vendor {device.vendor!r}, "
                    f"not {self.vendor!r}"
                )
            if device.id in seen:
                raise ValueError(f"device id {device.id!r} appears twice")
            seen.add(device.id)
        return self


def _wire(inventory: Inventory) -> dict[str, object]:
    devices = []
    for device in inventory.devices:
        fields = device.model_dump(mode="json")
        # A free map: sort it so equal devices always encode to the same text.
        fields["extra"] = dict(sorted(device.extra.items()))
        devices.append(fields)
    return {
        "v": sj.FORMAT_VERSION,
        "vendor": inventory.vendor,
        "node": inventory.node,
        "devices": devices,
        "state": inventory.state,
        "message": inventory.message,
    }


def encode_inventory(
    vendor: str,
    node: str,
    devices: Iterable[Device],
    state: InventoryState | None = None,
    message: str = "",
) -> str:
    """The value of ``xpushare.io/inventory-<vendor>`` on *node*.

    *state* defaults to ``ok`` when there are devices and ``no-devices`` when there are none;
    pass ``error`` (with a *message*) when detection failed.
    """
    key = inventory_key(vendor)
    what = sj.describe(key, node=node if isinstance(node, str) else None)
    devices = tuple(devices)
    if state is None:
        state = "ok" if devices else "no-devices"
    try:
        inventory = Inventory(
            vendor=vendor, node=node, devices=devices, state=state, message=message
        )
    except ValidationError as exc:
        sj.fail(
            what,
            f"refusing to write an invalid inventory: {sj.validation_problem(exc)}",
            "fix the vendor plugin's detect output",
        )
    hint = (
        f"the vendor plugin reported too much for {len(devices)} devices: trim the devices' "
        "extra facts or topology links"
    )
    return sj.write(_wire(inventory), what, hint)


def decode_inventory(key: str, value: str) -> Inventory:
    """Read one vendor's inventory annotation; *key* must be an inventory key."""
    vendor = vendor_of_inventory_key(key)
    if vendor is None:
        raise CodecError(
            f"annotation {sj.short(key)} is not an xpushare inventory key (expected "
            f"'{inventory_key('vendor')}' with a vendor name); pass the annotation's key"
        )
    what = sj.describe(key)
    data = sj.load_json(value, what, _HINT)
    fields = sj.split_version(data, what, _HINT)
    node = fields.get("node")
    if isinstance(node, str) and node:
        what = sj.describe(key, node=node)
    inventory = sj.validate(Inventory, fields, what, _HINT)
    if inventory.vendor != vendor:
        sj.fail(what, f"holds the inventory of vendor {inventory.vendor!r}", _HINT)
    return inventory
