"""The conformance checks fail for plugins that break the promises they check."""

import itertools

import pytest

from xpushare import API_VERSION, hookimpl
from xpushare.models import Device, ResourceNames, VendorSpec
from xpushare.testing.conformance import VendorConformance


class Drifting:
    """Detect gives new ids on every call; startup fails with a plain error."""

    def __init__(self) -> None:
        self.counter = itertools.count()

    @hookimpl
    def xpushare_vendor(self):
        return VendorSpec(
            name="drift", api_version=API_VERSION, resource_names=ResourceNames(count="d.io/gpu")
        )

    @hookimpl
    def xpushare_startup(self, ctx):
        if ctx.config.get("broken"):
            raise RuntimeError("libdrift.so: cannot open shared object file")

    @hookimpl
    def xpushare_detect(self, ctx):
        n = next(self.counter)
        return [Device(vendor="drift", id=f"D-{n}", index=0, model="D", memory_mib=1)]


class DriftConformance(VendorConformance):
    vendor = "drift"
    plugin = Drifting()

    def available(self, tmp_path, monkeypatch):
        return {}

    def unavailable(self, tmp_path, monkeypatch):
        return {"broken": True}


def test_a_detect_that_changes_between_calls_fails(tmp_path, monkeypatch):
    suite = DriftConformance()
    host = suite.make_host(suite.available(tmp_path, monkeypatch))
    try:
        handle = host.vendor("drift")
        handle.startup()
        devices = handle.detect()
        with pytest.raises(AssertionError, match="must say the same"):
            suite.test_detect_is_idempotent_and_well_formed(handle, devices)
    finally:
        host.close()


def test_a_missing_library_reported_as_a_crash_fails(tmp_path, monkeypatch):
    suite = DriftConformance()
    with pytest.raises(pytest.fail.Exception, match="raised PluginError"):
        suite.test_missing_library_makes_the_vendor_inactive_with_a_reason(tmp_path, monkeypatch)
