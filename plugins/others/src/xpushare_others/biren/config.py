"""The Biren vendor's settings (``XPUSHARE_BIREN_CONFIG`` and the agent's ``biren`` section).

HAMi serves Biren under one resource, ``birentech.com/gpu``, with no memory or compute resource
(hami-protocol.md §8.1, §9.2 ``resourceCountName``); its device plugin (Project-HAMi's
biren-device-plugin) registers each GPU, or each SVI instance of a split GPU, as a device
``card_<node id>`` with ``count: 1``.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from xpushare.models import ResourceNames
from xpushare_others.common.settings import VendorConfig

VENDOR: Final = "biren"
NAMES: Final = ResourceNames(count="birentech.com/gpu")
#: Containers per device HAMi's Biren device plugin registers (``Count: 1``, register.go).
DEFAULT_SHARE_SLOTS: Final = 1


class BirenConfig(VendorConfig):
    share_slots: int = Field(default=DEFAULT_SHARE_SLOTS, ge=1)
    #: Where Biren's device plugin finds libbiren-ml.so (its DaemonSet mounts), relative to
    #: ``/`` or to each driver root.
    library_dirs: tuple[str, ...] = ("usr/lib", "usr/local/birensupa/driver/biren-smi/lib")
    #: Variable naming a container's cards, as Biren's device plugin sets it.
    visible_devices_env: str = "BR_PHY_CARDS"
    #: Where the driver creates one node per card, ``<dir>/card_<node id>``.
    device_dir: str = "/dev/biren"
    #: Also give ``/dev/dri/renderD128`` (Biren's ``--mount-dri-device``; needs vgem loaded).
    dri_device: bool = False
    #: Serve each SVI instance of a split GPU as a device (as Biren's plugin does).
    svi_instances: bool = True

    def names(self) -> ResourceNames:
        return self.resource_names if self.resource_names is not None else NAMES
