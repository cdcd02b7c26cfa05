"""Plugin hosts with one vendor registered, for tests: made in one call, closed together.

Why: a plugin's tests call it the real way, through :class:`~xpushare.plugins.PluginHost`
(node-side hooks on the vendor's own library thread, the core's defaults beside it), so
nearly every test makes a host with the vendor's node configuration, registers the plugin,
checks that it registered, and closes the host at the end so the library thread stops. Those
steps are the same for every vendor and live here::

    from xpushare.testing.hosts import VendorHosts, vendor_host

    host = vendor_host("acme", xpushare_acme.plugin, {"library_path": str(lib)})

    @pytest.fixture
    def acme(lib):
        with VendorHosts("acme", xpushare_acme.plugin) as hosts:
            yield lambda **config: hosts.handle({"library_path": str(lib), **config}, start=True)
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from xpushare.plugins import VendorHandle

__all__ = ["VendorHosts", "vendor_host"]

#: The node name a test host serves unless told otherwise (the fake API server's and
#: :class:`~xpushare.testing.kube.InMemoryKube`'s usual node).
NODE_NAME = "node-a"


def vendor_host(
    vendor: str,
    plugin: object,
    config: Mapping[str, Any] | None = None,
    *,
    node_name: str | None = NODE_NAME,
    strict: bool = False,
    core_plugins: bool = True,
    distribution: str | None = None,
) -> PluginHost:
    """A plugin host with *plugin* registered as *vendor*, given *config* as its node config.

    :param node_name: the node the host serves (``None``: a scheduler-side host).
    :param strict: the host's strict mode (``XPUSHARE_STRICT_PLUGINS``): a misbehaving hook
        raises instead of being logged.
    :param core_plugins: register the core's defaults (the default fit, request parser, ...)
        beside the vendor, as a real process does; ``False`` for the vendor's hooks alone.
    :param distribution: the distribution name to record, as an entry point would.
    :raises AssertionError: the plugin was refused (the host's reason in the message).
    """
    host = PluginHost(
        HostSettings(strict=True) if strict else None,
        core_plugins=CORE_PLUGINS if core_plugins else (),
        node_name=node_name,
        vendor_config={vendor: dict(config or {})},
    )
    record = host.register(vendor, plugin, distribution=distribution)
    if record.error is not None:
        host.close()
        raise AssertionError(f"vendor {vendor}: the plugin was not registered: {record.error}")
    return host


class VendorHosts:
    """Makes hosts like :func:`vendor_host` (one vendor, the same options) and closes every
    one of them on :meth:`close` or when its ``with`` block ends."""

    def __init__(self, vendor: str, plugin: object, **options: Any) -> None:
        self.vendor = vendor
        self.plugin = plugin
        self.options = options
        #: Every host made so far, oldest first.
        self.made: list[PluginHost] = []

    def host(self, config: Mapping[str, Any] | None = None) -> PluginHost:
        """A new host with *config* as the vendor's node configuration."""
        host = vendor_host(self.vendor, self.plugin, config, **self.options)
        self.made.append(host)
        return host

    def handle(
        self, config: Mapping[str, Any] | None = None, *, start: bool = False
    ) -> VendorHandle:
        """The vendor's handle on a new host; started (``xpushare_startup``) if *start*."""
        handle = self.host(config).vendor(self.vendor)
        if start:
            handle.startup()
        return handle

    def close(self) -> None:
        """Close every host made (each vendor library shut down, its thread ended)."""
        for host in self.made:
            host.close()

    def __enter__(self) -> VendorHosts:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
