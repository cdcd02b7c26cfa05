"""The core's default request parser: a vendor's resource names, annotations, bad values."""

from __future__ import annotations

from typing import Any

import pytest

from xpushare.models import API_VERSION, ContainerView, PodRef, PodView, ResourceNames, VendorSpec
from xpushare.plugins.builtin.defaults import hami_leniencies, xpushare_resource_request
from xpushare.scheduling.quantity import cpu_millis, memory_mib

NVIDIA = VendorSpec(
    name="nvidia",
    api_version=API_VERSION,
    resource_names=ResourceNames(
        count="nvidia.com/gpu",
        memory="nvidia.com/gpumem",
        memory_percent="nvidia.com/gpumem-percentage",
        compute="nvidia.com/gpucores",
    ),
)


def parse(limits: dict[str, str], annotations: dict[str, str] | None = None, **kw: Any) -> Any:
    container = ContainerView(name="c", limits=limits, **kw)
    pod = PodView(
        ref=PodRef(namespace="ml", name="p"), annotations=annotations or {}, containers=(container,)
    )
    return xpushare_resource_request(vendor=NVIDIA, pod=pod, container=container)


def test_hami_pod_spec_keeps_its_meaning() -> None:
    req = parse({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"})
    assert (req.count, req.memory_mib, req.compute_percent, req.exclusive) == (2, 8000, 30, False)
    assert parse({"nvidia.com/gpumem-percentage": "25"}).count == 1  # HAMi's defaultGPUNum
    assert parse({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}).exclusive
    assert parse({"cpu": "1"}) is None
    assert parse({"nvidia.com/gpu": "0"}) is None


def test_requests_are_read_when_limits_are_absent_and_memory_units_apply() -> None:
    spec = NVIDIA.model_copy(update={"memory_unit_mib": 256})
    container = ContainerView(name="c", requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4"})
    pod = PodView(ref=PodRef(name="p"), containers=(container,))
    req = xpushare_resource_request(vendor=spec, pod=pod, container=container)
    assert req is not None and req.memory_mib == 1024


def test_constraint_annotations_ours_and_hamis() -> None:
    req = parse(
        {"nvidia.com/gpu": "1"},
        {
            "xpushare.io/use-model": "A100, H100",
            "nvidia.com/use-gputype": "A100,L40",
            "nvidia.com/nouse-gputype": "T4",
            "xpushare.io/use-uuid": "GPU-1",
            "nvidia.com/nouse-gpuuuid": "GPU-2,GPU-3",
            "nvidia.com/numa-bind": "true",
        },
    )
    assert req.models_include == ("A100", "H100", "L40")
    assert req.models_exclude == ("T4",)
    assert req.uuids_include == ("GPU-1",) and req.uuids_exclude == ("GPU-2", "GPU-3")
    assert req.numa_bind


@pytest.mark.parametrize(
    ("limits", "annotations", "message"),
    [
        ({"nvidia.com/gpu": "1.5"}, {}, "nvidia.com/gpu must be a whole number, got '1.5'"),
        ({"nvidia.com/gpumem": "8G!"}, {}, "nvidia.com/gpumem must be a whole number"),
        ({"nvidia.com/gpu": "-1"}, {}, "must be at least 1"),
        (
            {"nvidia.com/gpumem": "1000", "nvidia.com/gpumem-percentage": "10"},
            {},
            "keep one of them",
        ),
        ({"nvidia.com/gpu": "1"}, {"xpushare.io/numa-bind": "yes"}, "'true' or 'false', got 'yes'"),
    ],
)
def test_bad_values_say_what_is_wrong_and_where(
    limits: dict[str, str], annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match="pod ml/p, container 'c'") as err:
        parse(limits, annotations)
    assert message in str(err.value)


def test_quantities() -> None:
    assert (cpu_millis("500m"), cpu_millis("2"), cpu_millis("0.25")) == (500, 2000, 250)
    assert (memory_mib("1Gi"), memory_mib("512Mi"), memory_mib("1G")) == (1024, 512, 954)
    assert memory_mib("1.5Mi", round_up=False) == 1
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        cpu_millis("two")


def _leniencies(limits: dict[str, str], annotations: dict[str, str] | None = None) -> list[str]:
    container = ContainerView(name="c", limits=limits)
    pod = PodView(
        ref=PodRef(namespace="ml", name="p"), annotations=annotations or {}, containers=(container,)
    )
    return hami_leniencies(NVIDIA, pod, container)


def test_what_hami_clamps_or_ignores_is_taken_as_hami_takes_it_and_said() -> None:
    one = {"nvidia.com/gpu": "1"}
    clamped = parse({**one, "nvidia.com/gpucores": "101"})
    assert (clamped.compute_percent, clamped.exclusive) == (100, True)
    [said] = _leniencies({**one, "nvidia.com/gpucores": "101"})
    assert "pod ml/p, container 'c': nvidia.com/gpucores 101 is above a whole device" in said
    assert parse({**one, "nvidia.com/gpumem-percentage": "120"}).memory_percent == 100
    assert "taken as 100" in _leniencies({**one, "nvidia.com/gpumem-percentage": "120"})[0]
    assert parse({**one, "nvidia.com/gpumem-percentage": "0"}).memory_percent is None
    assert "0 is ignored" in _leniencies({**one, "nvidia.com/gpumem-percentage": "0"})[0]
    # numa-bind as Go's ParseBool reads it; anything else is false, and said so.
    for word in ("1", "t", "TRUE", "True"):
        assert parse(one, {"nvidia.com/numa-bind": word}).numa_bind
        assert _leniencies(one, {"nvidia.com/numa-bind": word}) == []
    assert not parse(one, {"nvidia.com/numa-bind": "F"}).numa_bind
    assert not parse(one, {"nvidia.com/numa-bind": "yes"}).numa_bind
    [said] = _leniencies(one, {"nvidia.com/numa-bind": "yes"})
    assert "annotation nvidia.com/numa-bind 'yes' is not a boolean; taken as false" in said
    # In range, nothing to say.
    assert (
        _leniencies({**one, "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "1"})
        == []
    )


def test_a_memory_of_zero_is_as_if_not_given() -> None:
    one = {"nvidia.com/gpu": "1"}
    # HAMi-core reads a 0 limit as none: booking 0 MiB would give the whole device unbooked.
    zero = parse({**one, "nvidia.com/gpumem": "0"})
    assert (zero.memory_mib, zero.memory_percent) == (None, None)
    [said] = _leniencies({**one, "nvidia.com/gpumem": "0"})
    assert "nvidia.com/gpumem 0 is taken as not given" in said
    assert _leniencies({**one, "nvidia.com/gpumem": "10"}) == []
