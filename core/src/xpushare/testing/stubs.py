"""Stub plugins for tests of code that calls vendors (policies, extensions, the host itself).

A :class:`StubVendor` is a complete, valid vendor description with no behaviour; subclass it
and add ``@hookimpl`` methods for what a test needs.
"""

from __future__ import annotations

from typing import Any

from xpushare import API_VERSION, hookimpl
from xpushare.models import ResourceNames, VendorSpec


def stub_spec(
    name: str, *, api_version: int = API_VERSION, domain: str | None = None
) -> VendorSpec:
    """A valid spec whose resource names live under *domain* (``<name>.example.com``)."""
    domain = domain or f"{name}.example.com"
    return VendorSpec(
        name=name,
        api_version=api_version,
        resource_names=ResourceNames(count=f"{domain}/gpu", memory=f"{domain}/gpumem"),
    )


class StubVendor:
    """A vendor plugin object that only describes itself."""

    def __init__(self, name: str, *, vendor_spec: VendorSpec | None = None) -> None:
        self.name = name
        self._spec = vendor_spec or stub_spec(name)

    @hookimpl
    def xpushare_vendor(self) -> Any:
        return self._spec
