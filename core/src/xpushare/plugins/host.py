"""The plugin host: finds vendor and extension plugins, loads each on its own, records why not.

pluggy's own entry-point loader stops at the first plugin that fails to import, so one broken
wheel would take every vendor down with it. This host loads entry points one at a time and
checks each plugin alone: it must import, implement only hooks that exist (a misspelled
``xpushare_detcet`` is caught here, not silently ignored), describe itself with a valid
:class:`~xpushare.models.VendorSpec` of the right API version, and not claim a resource name
another vendor already has. A plugin that fails any of these is unregistered and recorded
with the reason while the others load; strict mode re-raises instead (CI, plugin authors).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pluggy

from xpushare import hookspecs
from xpushare.errors import PluginError
from xpushare.models import API_VERSION, VendorSpec
from xpushare.plugins import validation
from xpushare.plugins.records import PluginKind, PluginRecord, PluginState
from xpushare.plugins.settings import HostSettings
from xpushare.plugins.vendor import VendorHandle

log = logging.getLogger(__name__)

#: Entry-point group of vendor plugins; the entry-point name is the vendor name.
VENDOR_GROUP = "xpushare.vendors"
#: Entry-point group of extension plugins (policies, tracing, audit): no vendor of their own.
EXTENSION_GROUP = "xpushare.extensions"


class PluginHost:
    """Loads plugins and hands out one :class:`VendorHandle` per loaded vendor."""

    def __init__(
        self,
        settings: HostSettings | None = None,
        *,
        core_plugins: Sequence[tuple[str, object]] = (),
        node_name: str | None = None,
        vendor_config: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.settings = settings or HostSettings()
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records: list[PluginRecord] = []
        self._vendors: dict[str, VendorHandle] = {}
        #: Each vendor's spec as it declared it, before request defaults were applied.
        self._original_specs: dict[str, VendorSpec] = {}
        self._vendor_plugins: dict[str, object] = {}
        self._resource_owner: dict[str, str] = {}
        self._node_name = node_name
        self._vendor_config = vendor_config or {}
        self._core_defaults: object | None = None
        if self.settings.trace:
            self._enable_tracing()
        for name, plugin in core_plugins:
            self._register_core(name, plugin)

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        core_plugins: Sequence[tuple[str, object]] | None = None,
        load: bool = True,
        node_name: str | None = None,
        vendor_config: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> PluginHost:
        """A host configured from ``XPUSHARE_*`` variables, with every entry point loaded."""
        if core_plugins is None:
            from xpushare.plugins.builtin import CORE_PLUGINS

            core_plugins = CORE_PLUGINS
        host = cls(
            HostSettings.from_environment(os.environ if environ is None else environ),
            core_plugins=core_plugins,
            node_name=node_name,
            vendor_config=vendor_config,
        )
        if load:
            host.load_entry_points()
        return host

    # -- queries ----------------------------------------------------------------------------

    @property
    def vendors(self) -> Mapping[str, VendorHandle]:
        return self._vendors

    def apply_request_defaults(self, defaults: Mapping[str, Any]) -> None:
        """Give each vendor its request defaults (per vendor, ``'*'`` for all): objects with
        ``default_memory_mib``, ``default_compute_percent`` and ``memory_factor`` (``None``:
        the vendor's own unit). The core's request parser reads them from the vendor's spec,
        so the webhook, the extender and ``xpushare fit`` parse alike. Idempotent."""
        for name, handle in self._vendors.items():
            found = defaults.get(name, defaults.get("*"))
            if found is None:
                continue
            original = self._original_specs.setdefault(name, handle.spec)
            update: dict[str, Any] = {
                "default_memory_mib": found.default_memory_mib,
                "default_compute_percent": found.default_compute_percent,
            }
            if found.memory_factor is not None:
                update["memory_unit_mib"] = found.memory_factor
            handle.spec = original.model_copy(update=update)

    def vendor(self, name: str) -> VendorHandle:
        try:
            return self._vendors[name]
        except KeyError:
            known = ", ".join(sorted(self._vendors)) or "none"
            failed = [r for r in self.records if r.name == name]
            why = f" ({failed[0].state.value}: {failed[0].error})" if failed else ""
            raise PluginError(
                name, f"not loaded{why}; loaded vendors: {known}. Run `xpushare plugins`."
            ) from None

    def vendor_for_resource(self, resource: str) -> VendorHandle | None:
        owner = self._resource_owner.get(resource)
        return self._vendors[owner] if owner else None

    def call_register_policies(self, register: Callable[[str, Any], None]) -> None:
        """Broadcast ``xpushare_register_policies``; a failing plugin is named in the error."""
        for impl in reversed(self.pm.hook.xpushare_register_policies.get_hookimpls()):
            name = self.pm.get_name(impl.plugin) or "?"
            try:
                impl.function(register=register)
            except Exception as exc:
                raise PluginError(name, f"xpushare_register_policies failed: {exc}") from exc

    # -- loading ----------------------------------------------------------------------------

    def load_entry_points(self) -> None:
        """Load every vendor and extension entry point, each on its own."""
        for group, kind in (
            (VENDOR_GROUP, PluginKind.VENDOR),
            (EXTENSION_GROUP, PluginKind.EXTENSION),
        ):
            for ep in sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name):
                self._load_entry_point(ep, kind)

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint, kind: PluginKind) -> None:
        dist = ep.dist.name if ep.dist else None
        version = ep.dist.version if ep.dist else None
        if any(r.name == ep.name for r in self.records):
            self._fail(
                PluginRecord(ep.name, kind, PluginState.FAILED, dist, version),
                f"another plugin named {ep.name!r} is already loaded; uninstall one of them",
            )
            return
        blocked = self.settings.blocked_reason(ep.name)
        if blocked:
            self.records.append(
                PluginRecord(ep.name, kind, PluginState.BLOCKED, dist, version, error=blocked)
            )
            return
        try:
            plugin = ep.load()
        except Exception as exc:
            self._fail(
                PluginRecord(ep.name, kind, PluginState.FAILED, dist, version),
                f"import of {ep.value} failed: {type(exc).__name__}: {exc}",
                exc,
            )
            return
        self.register(ep.name, plugin, kind=kind, distribution=dist, version=version)

    def register(
        self,
        name: str,
        plugin: object,
        *,
        kind: PluginKind = PluginKind.VENDOR,
        distribution: str | None = None,
        version: str | None = None,
    ) -> PluginRecord:
        """Register one plugin object and check it; tests and embedders call this directly."""
        record = PluginRecord(name, kind, PluginState.LOADED, distribution, version)
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:
            self._unregister(name)
            return self._fail(record, f"registration refused: {exc}", exc)
        record.hooks = tuple(sorted(h.name for h in self.pm.get_hookcallers(plugin) or ()))
        unknown = [h for h in (self.pm.get_hookcallers(plugin) or ()) if not h.has_spec()]
        if unknown:
            self._unregister(name)
            names = ", ".join(sorted(h.name for h in unknown))
            return self._fail(
                record,
                f"implements unknown hook(s) {names}: a typo, or a plugin written for another "
                "xpushare version; see xpushare.hookspecs for the hook names",
            )
        if kind is PluginKind.VENDOR:
            try:
                record.spec = self._vendor_spec(name, plugin)
            except (PluginError, ValueError) as exc:
                self._unregister(name)
                return self._fail(record, str(exc), exc)
            self._add_vendor(name, plugin, record, record.spec)
        self.records.append(record)
        self._rewire()
        return record

    def _vendor_spec(self, name: str, plugin: object) -> VendorSpec:
        impls = [i for i in self.pm.hook.xpushare_vendor.get_hookimpls() if i.plugin is plugin]
        if not impls:
            raise PluginError(name, "does not implement xpushare_vendor; a vendor plugin must")
        try:
            raw = impls[0].function()
        except Exception as exc:
            raise PluginError(name, f"xpushare_vendor raised {type(exc).__name__}: {exc}") from exc
        try:
            spec = validation.vendor_spec(raw)
        except ValueError as exc:
            raise PluginError(name, f"xpushare_vendor returned an invalid spec: {exc}") from exc
        if spec.name != name:
            raise PluginError(
                name, f"describes itself as {spec.name!r}; the entry-point name must match"
            )
        if spec.api_version != API_VERSION:
            raise PluginError(
                name,
                f"speaks vendor API version {spec.api_version}, this xpushare speaks "
                f"{API_VERSION}: install a plugin release built for API {API_VERSION}, "
                "or an xpushare that speaks its version",
            )
        for resource in spec.resource_names.all():
            owner = self._resource_owner.get(resource)
            if owner is not None:
                raise PluginError(
                    name,
                    f"resource name {resource} is already taken by vendor {owner!r}; "
                    "configure a different resource name for one of them",
                )
        return spec

    def _add_vendor(
        self, name: str, plugin: object, record: PluginRecord, spec: VendorSpec
    ) -> None:
        for resource in spec.resource_names.all():
            self._resource_owner[resource] = name
        self._vendor_plugins[name] = plugin
        self._vendors[name] = VendorHandle(
            pm=self.pm,
            plugin=plugin,
            record=record,
            spec=spec,
            node_name=self._node_name,
            config=self._vendor_config.get(name),
        )

    def _register_core(self, name: str, plugin: object) -> None:
        self.pm.register(plugin, name=name)
        self.records.append(
            PluginRecord(
                name,
                PluginKind.CORE,
                PluginState.LOADED,
                "xpushare",
                importlib.metadata.version("xpushare"),
                hooks=tuple(sorted(h.name for h in self.pm.get_hookcallers(plugin) or ())),
            )
        )
        if name == "xpushare-defaults":
            self._core_defaults = plugin
        self._rewire()

    def _rewire(self) -> None:
        others = list(self._vendor_plugins.values())
        for handle in self._vendors.values():
            handle.rewire(others, self._core_defaults)

    def _unregister(self, name: str) -> None:
        # register() can fail part-way and leave hooks behind; drop whatever got in.
        if self.pm.get_plugin(name) is not None:
            self.pm.unregister(name=name)

    def _fail(
        self, record: PluginRecord, reason: str, exc: BaseException | None = None
    ) -> PluginRecord:
        record.state = PluginState.FAILED
        record.error = reason
        self.records.append(record)
        log.warning("xpushare plugin %s failed to load: %s", record.name, reason)
        if self.settings.strict:
            raise PluginError(record.name, reason) from exc
        return record

    def _enable_tracing(self) -> None:
        def before(hook_name: str, impls: Iterable[Any], kwargs: Mapping[str, Any]) -> None:
            names = [self.pm.get_name(i.plugin) for i in impls]
            log.warning("hook %s -> %s args=%s", hook_name, names, dict(kwargs))

        def after(
            outcome: Any, hook_name: str, impls: Iterable[Any], kwargs: Mapping[str, Any]
        ) -> None:
            log.warning(
                "hook %s <- %r",
                hook_name,
                outcome.get_result() if outcome.exception is None else outcome.exception,
            )

        self.pm.add_hookcall_monitoring(before, after)
        self.pm.xpushare_traced = True  # type: ignore[attr-defined]

    def close(self) -> None:
        """Shut every vendor's library down (node side); safe to call twice."""
        for handle in self._vendors.values():
            handle.shutdown()
