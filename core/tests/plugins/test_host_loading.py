"""The host loads each plugin on its own and records why one did not load."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from xpushare import API_VERSION, PluginError, hookimpl
from xpushare.models import ResourceNames, VendorSpec
from xpushare.plugins import HostSettings, PluginHost, PluginKind, PluginState
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.testing.stubs import StubVendor as Vendor
from xpushare.testing.stubs import stub_spec as spec


def host(**settings: Any) -> PluginHost:
    return PluginHost(HostSettings(**settings), core_plugins=CORE_PLUGINS, node_name="n1")


def test_vendor_loads_and_is_callable_by_name() -> None:
    h = host()
    record = h.register("acme", Vendor("acme"))
    assert record.state is PluginState.LOADED
    assert "xpushare_vendor" in record.hooks
    assert h.vendor("acme").spec.resource_names.count == "acme.example.com/gpu"
    assert h.vendor_for_resource("acme.example.com/gpumem") is h.vendor("acme")


def test_misspelled_hook_fails_that_plugin_only() -> None:
    class Typo(Vendor):
        @hookimpl
        def xpushare_detcet(self) -> None:
            return None

    h = host()
    bad = h.register("typo", Typo("typo"))
    good = h.register("acme", Vendor("acme"))
    assert bad.state is PluginState.FAILED
    assert "xpushare_detcet" in (bad.error or "")
    assert good.state is PluginState.LOADED
    assert set(h.vendors) == {"acme"}
    assert h.pm.get_plugin("typo") is None


def test_wrong_api_version_is_refused_with_both_versions() -> None:
    h = host()
    record = h.register("old", Vendor("old", vendor_spec=spec("old", api_version=API_VERSION + 1)))
    assert record.state is PluginState.FAILED
    assert f"version {API_VERSION + 1}" in (record.error or "")
    assert f"speaks {API_VERSION}" in (record.error or "")


def test_resource_name_taken_names_the_owner() -> None:
    h = host()
    h.register("first", Vendor("first", vendor_spec=spec("first", domain="shared.io")))
    second = h.register("second", Vendor("second", vendor_spec=spec("second", domain="shared.io")))
    assert second.state is PluginState.FAILED
    assert "shared.io/gpu" in (second.error or "") and "'first'" in (second.error or "")
    assert set(h.vendors) == {"first"}


def test_spec_name_must_match_entry_point_name() -> None:
    record = host().register("alias", Vendor("real"))
    assert record.state is PluginState.FAILED
    assert "'real'" in (record.error or "")


def test_invalid_spec_is_a_load_failure() -> None:
    class Bad(Vendor):
        @hookimpl
        def xpushare_vendor(self) -> Any:
            return {"name": "bad", "api_version": API_VERSION, "resource_names": {"count": "nope"}}

    record = host().register("bad", Bad("bad"))
    assert record.state is PluginState.FAILED
    assert "not an extended resource name" in (record.error or "")


def test_vendor_without_description_fails() -> None:
    class Nameless:
        @hookimpl
        def xpushare_detect(self) -> None:
            return None

    record = host().register("nameless", Nameless())
    assert record.state is PluginState.FAILED
    assert "xpushare_vendor" in (record.error or "")


def test_extension_plugin_needs_no_vendor_spec() -> None:
    class Ext:
        @hookimpl
        def xpushare_register_policies(self, register: Any) -> None:
            register("ext-policy", object())

    h = host()
    record = h.register("ext", Ext(), kind=PluginKind.EXTENSION)
    assert record.state is PluginState.LOADED
    seen: dict[str, Any] = {}
    h.call_register_policies(lambda name, policy: seen.setdefault(name, policy))
    assert "ext-policy" in seen


def test_strict_mode_raises_the_reason() -> None:
    with pytest.raises(PluginError, match="unknown hook"):

        class Typo(Vendor):
            @hookimpl
            def xpushare_alocate(self) -> None:
                return None

        host(strict=True).register("typo", Typo("typo"))


def test_settings_from_environment() -> None:
    s = HostSettings.from_environment(
        {
            "XPUSHARE_PLUGINS": "a, b",
            "XPUSHARE_DISABLE_PLUGINS": "b",
            "XPUSHARE_STRICT_PLUGINS": "1",
            "XPUSHARE_TRACE_HOOKS": "yes",
        }
    )
    assert s.allow == {"a", "b"} and s.deny == {"b"} and s.strict and s.trace
    assert s.blocked_reason("a") is None
    assert "DISABLE" in (s.blocked_reason("b") or "")
    assert "XPUSHARE_PLUGINS" in (s.blocked_reason("c") or "")
    assert HostSettings.from_environment({}).allow is None


def test_entry_points_honour_deny_list() -> None:
    h = PluginHost.from_environment({"XPUSHARE_DISABLE_PLUGINS": "mock"})
    mock = [r for r in h.records if r.name == "mock"]
    assert mock and mock[0].state is PluginState.BLOCKED
    assert "mock" not in h.vendors


def test_trace_switch_logs_hook_calls(caplog: pytest.LogCaptureFixture) -> None:
    h = host(trace=True)
    h.register("acme", Vendor("acme"))
    with caplog.at_level(logging.WARNING):
        h.vendor("acme").score(request=_request("acme"), node=_node(), fit=_fit(), usage={})
    assert any("xpushare_score" in m for m in caplog.messages)


def test_unknown_vendor_error_lists_loaded_ones() -> None:
    h = host()
    h.register("acme", Vendor("acme"))
    with pytest.raises(PluginError, match="loaded vendors: acme"):
        h.vendor("nvidia")


def _request(vendor: str) -> Any:
    from xpushare.models import ContainerRequest

    return ContainerRequest(vendor=vendor)


def _node() -> Any:
    from xpushare.models import NodeView

    return NodeView(name="n1")


def _fit() -> Any:
    from xpushare.models import FitResult

    return FitResult(fits=True)


def test_spec_model_rejects_bad_vendor_names() -> None:
    with pytest.raises(ValueError, match="DNS label"):
        VendorSpec(name="Bad_Name", api_version=1, resource_names=ResourceNames(count="a.io/gpu"))
