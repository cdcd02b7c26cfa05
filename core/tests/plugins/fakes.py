"""Small vendor plugins built in code for the host's tests."""

from __future__ import annotations

from typing import Any

from xpushare import API_VERSION, hookimpl
from xpushare.models import ResourceNames, VendorSpec


def spec(name: str, *, api_version: int = API_VERSION, prefix: str | None = None) -> VendorSpec:
    domain = prefix or f"{name}.example.com"
    return VendorSpec(
        name=name,
        api_version=api_version,
        resource_names=ResourceNames(count=f"{domain}/gpu", memory=f"{domain}/gpumem"),
    )


class Vendor:
    """A vendor plugin object whose behaviour each test sets through attributes."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        self._spec = kwargs.pop("vendor_spec", None) or spec(name)

    @hookimpl
    def xpushare_vendor(self) -> Any:
        return self._spec
