"""A core request above a whole device, from every vendor HAMi clamps it for.

HAMi takes ``<vendor cores> > 100`` as the device's total in its fit for Cambricon, Hygon,
MetaX (sGPU), Moore Threads and AMD (NVIDIA too): a spec such as ``gpucores: 150`` runs
there, so it must be admitted here, booked as the whole device's compute, with a warning
that says so. The vendors are loaded from their entry points, as the scheduler's image
loads them, so a vendor's own request parser cannot refuse it unnoticed.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points

import pytest

from xpushare.models import ContainerView, PodRef, PodView
from xpushare.plugins import HostSettings, PluginHost, VendorHandle
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.plugins.builtin.defaults import hami_leniencies

#: Vendor, its core resource, a value above a whole device, and the device's total there
#: (Moore Threads counts sixteenths of a GPU; the others a percent).
CASES = [
    ("cambricon", "cambricon.com/mlu.smlu.vcore", "150", 100),
    ("hygon", "hygon.com/dcucores", "150", 100),
    ("metax", "metax-tech.com/vcore", "150", 100),
    ("mthreads", "mthreads.com/sgpu-core", "20", 16),
    ("amd", "amd.com/gpucores", "150", 100),
]


@pytest.fixture(scope="module")
def host() -> Iterator[PluginHost]:
    """A scheduler-side host with the vendors registered from their entry points."""
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    wanted = {vendor for vendor, *_ in CASES}
    for ep in entry_points(group="xpushare.vendors"):
        if ep.name in wanted:
            host.register(ep.name, ep.load())
    yield host
    host.close()


@pytest.mark.parametrize(("vendor", "resource", "value", "total"), CASES, ids=[c[0] for c in CASES])
def test_a_core_request_above_a_whole_device_is_clamped_with_a_warning(
    host: PluginHost, vendor: str, resource: str, value: str, total: int
) -> None:
    handle: VendorHandle = host.vendor(vendor)
    names = handle.spec.resource_names
    assert names.compute == resource
    limits = {names.count: "1", resource: value}
    if names.memory is not None:
        limits[names.memory] = "4"
    container = ContainerView(name="main", limits=limits)
    pod = PodView(ref=PodRef(namespace="ml", name="train"), containers=(container,))

    request = handle.resource_request(pod=pod, container=container)

    assert request is not None
    assert (request.compute_percent, request.exclusive) == (100, True)
    assert handle.spec.compute_total == total
    [warning] = hami_leniencies(handle.spec, pod, container)
    assert f"pod ml/train, container 'main': {resource} {value} is above a whole device" in warning
    assert f"taken as {total}" in warning and "HAMi clamps it" in warning
