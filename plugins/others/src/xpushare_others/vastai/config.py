"""The Vastai vendor's settings (``XPUSHARE_VASTAI_CONFIG`` and the agent's ``vastai`` section).

HAMi serves Vastai under one resource, ``vastaitech.com/va``, with no memory or compute
resource (hami-protocol.md §8.1, §9.2 ``resourceCountName``). Its device plugin registers either
whole cards or, with ``--device-strategy=die``, each die of a card as a device of its own
(HAMi's ``DeviceStrategy: die`` with the card as ``AIC``); ``device_strategy`` chooses the same.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from xpushare.models import ResourceNames
from xpushare_others.common.settings import VendorConfig

VENDOR: Final = "vastai"
#: HAMi's device type for Vastai, also the model when VAML names none (device.go).
HAMI_TYPE: Final = "Vastai"
NAMES: Final = ResourceNames(count="vastaitech.com/va")
#: Containers per device HAMi's Vastai device plugin registers (``count: 1`` in HAMi's vectors).
DEFAULT_SHARE_SLOTS: Final = 1


class VastaiConfig(VendorConfig):
    #: ``card``: one device per card; ``die``: one device per die (HAMi's die mode).
    device_strategy: Literal["card", "die"] = "card"
    share_slots: int = Field(default=DEFAULT_SHARE_SLOTS, ge=1)
    #: Where HAMi's Vastai device plugin mounts libvaml.so (vastai-support.md), relative to
    #: ``/`` or to each driver root.
    library_dirs: tuple[str, ...] = ("usr/lib", "usr/lib64", "opt/vastai/vaststream/lib")
    #: Variable naming a container's dies for Vastai's container runtime (``--runtime=vastai``).
    visible_devices_env: str = "VASTAI_VISIBLE_DEVICES"
    #: Give the dies' device nodes too (a container without Vastai's runtime needs them).
    device_nodes: bool = True
    #: Node-wide nodes every Vastai container gets when the host has them.
    control_nodes: tuple[str, ...] = ("/dev/vatools", "/dev/va_sync")

    def names(self) -> ResourceNames:
        return self.resource_names if self.resource_names is not None else NAMES
