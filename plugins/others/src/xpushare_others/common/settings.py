"""Where a vendor's settings come from, and how they are validated.

Why files named by environment variables: the same settings are read in two processes that
share nothing but the vendor spec. ``xpushare_vendor`` runs in the scheduler and in the node
agent and must return the same resource names in both, so it reads
``XPUSHARE_<VENDOR>_CONFIG`` (a YAML or JSON file, e.g. a mounted ConfigMap) and hands the
result on as ``VendorSpec.config``; the node side sees it merged with the agent's own section
as ``ctx.config``. Both sides validate it with the vendor's pydantic model, so a typo is an
error naming the field in either process.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from xpushare import vendorconfig
from xpushare.models import ResourceNames

#: HAMi's default number of containers that may share one device, ``deviceSplitCount``
#: (research/hami-protocol.md §9.2); vendors with their own ceiling override it.
DEFAULT_SHARE_SLOTS: Final = 10


class VendorConfig(BaseModel):
    """Options every vendor of this distribution has; each vendor's model adds its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: An explicit path of the management library, tried before anything else.
    library_path: str | None = None
    #: Where the host's (or a driver container's) root filesystem is mounted in the node
    #: agent's container, e.g. ``/host``: the library is searched under each.
    driver_roots: tuple[str, ...] = ()
    #: Also try the bare sonames through the dynamic loader's search (LD_LIBRARY_PATH,
    #: ld.so.cache): what works when a container runtime injected the library.
    search_loader_path: bool = True
    #: How many containers may share one device.
    share_slots: int = Field(default=DEFAULT_SHARE_SLOTS, ge=1)
    #: Override of HAMi's resource names for this vendor.
    resource_names: ResourceNames | None = None
    #: Where sysfs is mounted (NUMA node, DRM nodes, driver version).
    sysfs_root: str = "/sys"
    #: Where the node agent sees the host's ``/dev`` and other host paths ('' = as they are);
    #: used to leave out device nodes the host does not have.
    host_root: str = ""

    def on_host(self, path: str) -> Path:
        """Where a host path is seen from inside the node agent's container."""
        if not self.host_root:
            return Path(path)
        return Path(self.host_root) / path.lstrip("/")


class TwoModeVendorConfig(VendorConfig):
    """A vendor served by two entry points (:mod:`xpushare_others.common.two_mode_plugin`).

    Each vendor narrows ``mode`` to its two modes and gives it its default.
    """

    #: Which of the vendor's two entry points this node serves.
    mode: str = ""

    def names(self, vendor: str) -> ResourceNames:
        """The resource names of entry point *vendor*."""
        raise NotImplementedError


C = TypeVar("C", bound=VendorConfig)


def config_env(vendor: str) -> str:
    """``XPUSHARE_HYGON_CONFIG`` and so on: names the vendor's settings file."""
    return f"XPUSHARE_{vendor.upper()}_CONFIG"


def library_env(vendor: str) -> str:
    """``XPUSHARE_HYGON_LIBRARY`` and so on: overrides ``library_path`` (handy by hand)."""
    return f"XPUSHARE_{vendor.upper()}_LIBRARY"


def load_settings(vendor: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings in the file named by ``XPUSHARE_<VENDOR>_CONFIG`` ({} when unset).

    :raises ValueError: the file cannot be read or does not hold a mapping; names the file.
    """
    return vendorconfig.load_settings(vendor, config_env(vendor), library_env(vendor), environ)


def parse(model: type[C], vendor: str, settings: Mapping[str, Any]) -> C:
    """Validate *settings*; ``ValueError`` names each wrong field and where options are listed."""
    return vendorconfig.validate(
        model,
        settings,
        lambda exc: (
            f"invalid configuration of vendor {vendor!r}: {vendorconfig.describe_errors(exc)}. Fix "
            f"{config_env(vendor)} or the {vendor!r} section of the node agent's configuration "
            "(options: plugins/others/README.md)."
        ),
    )


# Scheduler-side hooks run thousands of times a second with the same VendorSpec.config dict:
# validate it once. The dict is kept in the entry so its id cannot be reused by another.
_CACHE: dict[tuple[type[VendorConfig], int], tuple[Mapping[str, Any], VendorConfig]] = {}
_CACHE_SIZE: Final = 32


def cached(model: type[C], vendor: str, settings: Mapping[str, Any]) -> C:
    """:func:`parse`, remembered per settings object (the vendor spec's config)."""
    key = (model, id(settings))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is settings and isinstance(hit[1], model):
        return hit[1]
    config = parse(model, vendor, settings)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    _CACHE[key] = (settings, config)
    return config
