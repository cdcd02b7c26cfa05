"""xpushare.testing.hosts: a host with one vendor in one call; a pool that closes its hosts."""

from __future__ import annotations

from typing import Any

import pytest

from xpushare import API_VERSION, hookimpl
from xpushare.models import ResourceNames, VendorSpec
from xpushare.testing.hosts import VendorHosts, vendor_host


class Recorder:
    """A vendor that records its node config and its startups and shutdowns."""

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = []
        self.shutdowns = 0

    @hookimpl
    def xpushare_vendor(self) -> VendorSpec:
        return VendorSpec(
            name="rec", api_version=API_VERSION, resource_names=ResourceNames(count="x.io/rec")
        )

    @hookimpl
    def xpushare_startup(self, ctx: Any) -> None:
        self.configs.append(dict(ctx.config))

    @hookimpl
    def xpushare_shutdown(self, ctx: Any) -> None:
        self.shutdowns += 1


def test_the_vendor_gets_its_node_config_and_the_cores_defaults() -> None:
    plugin = Recorder()
    host = vendor_host("rec", plugin, {"library_path": "/x"}, distribution="xpushare-rec")
    try:
        host.vendor("rec").startup()
        assert plugin.configs == [{"library_path": "/x"}]
        (record,) = [r for r in host.records if r.name == "rec"]
        assert record.distribution == "xpushare-rec"
        # The core's defaults are registered beside the vendor unless asked otherwise.
        alone = vendor_host("rec", Recorder(), core_plugins=False)
        assert [r.name for r in alone.records] == ["rec"]
        assert len(host.records) > 1
        alone.close()
    finally:
        host.close()


def test_a_refused_plugin_fails_naming_the_vendor_and_the_reason() -> None:
    class NotAVendor:
        pass

    with pytest.raises(
        AssertionError, match=r"vendor bad: the plugin was not registered.*xpushare_vendor"
    ):
        vendor_host("bad", NotAVendor())


def test_the_pool_closes_every_host_it_made() -> None:
    plugin = Recorder()
    with VendorHosts("rec", plugin) as hosts:
        first = hosts.handle({"n": 1}, start=True)
        hosts.handle({"n": 2}, start=True)
        hosts.host()  # never started: closing it calls no shutdown hook
        assert first.spec.name == "rec" and len(hosts.made) == 3
        assert plugin.shutdowns == 0
    assert plugin.configs == [{"n": 1}, {"n": 2}]
    assert plugin.shutdowns == 2
