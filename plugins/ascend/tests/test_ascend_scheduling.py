"""Request parsing, template rounding, fit and admission of the Ascend vendor (scheduler side)."""

from __future__ import annotations

import pytest
from ascend_fakes import chip_line

from xpushare.errors import AdmissionDenied
from xpushare.models import (
    ContainerAssignment,
    ContainerView,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    NodeView,
    PodAssignment,
    PodRef,
    PodView,
)


def pod(*containers: ContainerView, **annotations: str) -> PodView:
    return PodView(
        ref=PodRef(namespace="ml", name="p"), annotations=annotations, containers=containers
    )


def asks(name: str = "main", **limits: str) -> ContainerView:
    return ContainerView(name=name, limits=limits)


NPU = "huawei.com/Ascend910B3"
MEM = "huawei.com/Ascend910B3-memory"


@pytest.fixture
def handle(make_handle, table):
    table.chips()
    return make_handle()


def parse(handle, container: ContainerView, **annotations: str):
    return handle.resource_request(pod=pod(container, **annotations), container=container)


def test_vendor_spec_serves_hamis_resource_names(handle):
    names = handle.spec.resource_names
    assert (names.count, names.memory, names.compute) == (NPU, MEM, "huawei.com/Ascend910B3-core")


def test_whole_npus_are_exclusive_and_pinned_to_the_chip_family(handle):
    req = parse(handle, asks(**{NPU: "2"}))
    assert req.count == 2 and req.exclusive and req.compute_percent == 100
    assert req.models_include == ("Ascend910B3",)
    assert req.partition is None


@pytest.mark.parametrize(
    ("memory", "template", "mib", "percent"),
    [
        ("1", "vir05_1c_16g", 16384, 25),
        ("16384", "vir05_1c_16g", 16384, 25),
        ("16385", "vir10_3c_32g", 32768, 50),
    ],
)
def test_memory_rounds_up_to_the_smallest_template(handle, memory, template, mib, percent):
    req = parse(handle, asks(**{NPU: "1", MEM: memory}))
    assert (req.partition, req.memory_mib, req.compute_percent) == (template, mib, percent)
    assert not req.exclusive and req.count == 1


def test_memory_without_a_count_asks_for_one_npu(handle):
    assert parse(handle, asks(**{MEM: "8000"})).partition == "vir05_1c_16g"


def test_memory_above_every_template_but_within_a_chip_takes_the_whole_chip(handle):
    req = parse(handle, asks(**{NPU: "1", MEM: "40000"}))
    assert req.exclusive and req.partition is None and req.count == 1


def test_memory_no_chip_can_hold_is_refused_with_the_templates(handle):
    with pytest.raises(ValueError) as info:
        parse(handle, asks(**{NPU: "1", MEM: "70000"}))
    message = str(info.value)
    assert "70000 MiB" in message and "65536 MiB" in message
    assert "vir05_1c_16g (16384 MiB), vir10_3c_32g (32768 MiB)" in message


def test_several_npus_with_memory_are_refused(handle):
    with pytest.raises(ValueError, match="several NPUs takes whole NPUs"):
        parse(handle, asks(**{NPU: "2", MEM: "1000"}))


def test_soft_split_requests_are_refused_clearly(handle):
    with pytest.raises(ValueError, match="soft split"):
        parse(handle, asks(**{NPU: "1", "huawei.com/Ascend910B3-core": "20"}))
    with pytest.raises(ValueError, match="hami-core"):
        parse(handle, asks(**{NPU: "1"}), **{"huawei.com/vnpu-mode": "hami-core"})


def test_another_chip_familys_resources_are_refused_naming_the_served_one(handle):
    with pytest.raises(ValueError) as info:
        parse(handle, asks(**{"huawei.com/Ascend310P": "1"}))
    assert "huawei.com/Ascend310P" in str(info.value) and NPU in str(info.value)


def test_containers_without_ascend_resources_are_not_ours(handle):
    assert parse(handle, asks(**{"nvidia.com/gpu": "1"})) is None
    assert parse(handle, asks(**{NPU: "0"})) is None


def test_malformed_counts_are_explained(handle):
    with pytest.raises(ValueError, match="whole number of NPUs"):
        parse(handle, asks(**{NPU: "1.5"}))


def test_hamis_uuid_annotations_select_chips(handle):
    req = parse(
        handle,
        asks(**{NPU: "1"}),
        **{"hami.io/use-Ascend910B3-uuid": "NPU-a, NPU-b", "hami.io/no-use-Ascend910B3-uuid": "x"},
    )
    assert req.uuids_include == ("NPU-a", "NPU-b") and req.uuids_exclude == ("x",)


def test_another_family_is_served_by_configuring_its_chip(make_handle, table, cluster_config):
    table.chips()
    cluster_config(chip="310P3")
    handle = make_handle()
    assert handle.spec.resource_names.count == "huawei.com/Ascend310P"
    req = parse(
        handle, asks(**{"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "4000"})
    )
    assert (req.partition, req.memory_mib, req.compute_percent) == ("vir02", 6144, 25)


def test_the_memory_factor_scales_the_memory_resource(make_handle, table, cluster_config):
    table.chips()
    cluster_config(memory_factor=1024)
    handle = make_handle()
    assert handle.spec.memory_unit_mib == 1024
    assert parse(handle, asks(**{NPU: "1", MEM: "20"})).partition == "vir10_3c_32g"


def test_910c_super_pod_npus_come_in_module_pairs(make_handle, table, cluster_config):
    table.chips()
    cluster_config(chip="Ascend910")
    handle = make_handle()
    npu = "huawei.com/Ascend910C"
    assert parse(handle, asks(**{npu: "1"})).count == 2
    assert parse(handle, asks(**{npu: "4"})).count == 4
    with pytest.raises(ValueError, match="even number"):
        parse(handle, asks(**{npu: "3"}))


# --- fit -----------------------------------------------------------------------------------


@pytest.fixture
def node(make_handle, fake_lib, table):
    table.chips(chip_line(0), chip_line(1), chip_line(2, name="910B4", hbm=32768))
    handle = make_handle(fake_lib)
    handle.startup()
    return handle, NodeView(name="n1", devices=handle.detect())


def fit(handle, view, req, usage=None, order=None):
    return handle.fit(
        request=req,
        node=view,
        usage=usage or {},
        device_order=order if order is not None else [d.id for d in view.devices],
    )


def used(device_id: str, *templates: str, whole: bool = False) -> DeviceUsage:
    memory = {"vir05_1c_16g": 16384, "vir10_3c_32g": 32768}
    percent = {"vir05_1c_16g": 25, "vir10_3c_32g": 50}
    return DeviceUsage(
        device_id=device_id,
        used_slots=len(templates) + int(whole),
        used_memory_mib=sum(memory[t] for t in templates) + (65536 if whole else 0),
        used_compute_percent=sum(percent[t] for t in templates) + (100 if whole else 0),
        exclusive=whole,
        partitions_in_use=templates,
    )


def test_a_template_lands_on_the_first_chip_in_the_policys_order(node):
    handle, view = node
    req = parse(handle, asks(**{NPU: "1", MEM: "16000"}))
    order = [view.devices[1].id, view.devices[0].id]
    result = fit(handle, view, req, order=order)
    assert result.fits
    (piece,) = result.devices
    assert piece.device_id == view.devices[1].id
    assert (piece.partition, piece.memory_mib, piece.compute_percent) == ("vir05_1c_16g", 16384, 25)
    # The 910B4 is another family: never a candidate for a 910B3 request.
    assert result.reasons == {FitReason.MODEL_MISMATCH: 1}


def test_templates_mix_on_a_chip_until_its_ai_cores_are_booked(node):
    handle, view = node
    a, b = view.devices[0].id, view.devices[1].id
    small = parse(handle, asks(**{NPU: "1", MEM: "1"}))
    big = parse(handle, asks(**{NPU: "1", MEM: "32768"}))
    # 10 + 5 of 20 AI cores used on a: another small fits there, a big one does not.
    usage = {a: used(a, "vir10_3c_32g", "vir05_1c_16g"), b: used(b, whole=True)}
    assert fit(handle, view, small, usage).devices[0].device_id == a
    result = fit(handle, view, big, usage)
    assert not result.fits
    assert result.reasons[FitReason.INSUFFICIENT_COMPUTE] == 1
    assert result.reasons[FitReason.HELD_EXCLUSIVELY] == 1


def test_a_template_count_is_capped_by_its_profile(node):
    handle, view = node
    a = view.devices[0].id
    big = parse(handle, asks(**{NPU: "1", MEM: "32768"}))
    usage = {a: used(a, "vir10_3c_32g", "vir10_3c_32g")}
    result = fit(handle, view, big, usage, order=[a])
    assert result.devices[0].device_id == view.devices[1].id
    assert result.reasons[FitReason.PARTITION_UNAVAILABLE] == 1


def test_compute_booked_without_a_template_name_counts_as_ai_cores(node):
    # Earlier containers of the same pod are booked by percent only.
    handle, view = node
    a = view.devices[0].id
    small = parse(handle, asks(**{NPU: "1", MEM: "1"}))
    three_small = DeviceUsage(
        device_id=a, used_slots=3, used_memory_mib=3 * 16384, used_compute_percent=75
    )
    assert fit(handle, view, small, {a: three_small}, order=[a]).devices[0].device_id == a
    four = three_small.model_copy(update={"used_slots": 4, "used_compute_percent": 100})
    assert fit(handle, view, small, {a: four}, order=[a]).devices[0].device_id != a


def test_whole_npus_need_idle_chips(node):
    handle, view = node
    a, b = view.devices[0].id, view.devices[1].id
    two = parse(handle, asks(**{NPU: "2"}))
    result = fit(handle, view, two, {a: used(a, "vir05_1c_16g")})
    assert not result.fits
    assert result.reasons[FitReason.EXCLUSIVE_CONFLICT] == 1
    one = parse(handle, asks(**{NPU: "1"}))
    (piece,) = fit(handle, view, one, {a: used(a, "vir05_1c_16g")}).devices
    assert piece.device_id == b and piece.exclusive and piece.memory_mib == 65536


def test_unhealthy_and_excluded_chips_are_skipped(node):
    handle, view = node
    sick = view.model_copy(
        update={
            "devices": (view.devices[0].model_copy(update={"healthy": False}), *view.devices[1:])
        }
    )
    req = parse(
        handle, asks(**{NPU: "1"}), **{"hami.io/no-use-Ascend910B3-uuid": view.devices[1].id}
    )
    result = fit(handle, sick, req)
    assert not result.fits
    assert result.reasons[FitReason.UNHEALTHY] == 1
    assert result.reasons[FitReason.UUID_MISMATCH] == 1


def test_super_pod_modules_are_taken_whole(make_handle, fake_lib, table, cluster_config):
    cluster_config(chip="Ascend910")
    table.chips(
        chip_line(0, card=0, device=0, logic=0, name="Ascend910"),
        chip_line(1, card=0, device=1, logic=1, name="Ascend910"),
        chip_line(2, card=1, device=0, logic=2, name="Ascend910"),
        chip_line(3, card=1, device=1, logic=3, name="Ascend910"),
    )
    handle = make_handle(fake_lib)
    handle.startup()
    view = NodeView(name="n", devices=handle.detect())
    req = parse(handle, asks(**{"huawei.com/Ascend910C": "1"}))
    d = view.devices
    # One die of module 0 is busy: the pair must come from module 1.
    result = fit(handle, view, req, {d[0].id: used(d[0].id, "vir05_1c_16g")})
    assert sorted(s.device_id for s in result.devices) == sorted([d[2].id, d[3].id])


def test_a_node_without_npus_says_so(handle):
    req = parse(handle, asks(**{NPU: "1"}))
    result = fit(handle, NodeView(name="empty"), req)
    assert not result.fits and result.reasons == {FitReason.NO_DEVICES: 1}


# --- admission and bind ----------------------------------------------------------------------


def test_admission_writes_the_template_size_into_the_pod(handle):
    container = ContainerView(name="main", limits={NPU: "1", MEM: "10000"}, requests={MEM: "10000"})
    req = parse(handle, container)
    patches = handle.mutate_admission(pod=pod(container), container=container, index=0, request=req)
    assert [(p.op, p.path, p.value) for p in patches] == [
        ("replace", "/spec/containers/0/resources/limits/huawei.com~1Ascend910B3-memory", "16384"),
        (
            "replace",
            "/spec/containers/0/resources/requests/huawei.com~1Ascend910B3-memory",
            "16384",
        ),
    ]


def test_admission_leaves_an_exact_template_size_alone(handle):
    container = asks(**{NPU: "1", MEM: "16384"})
    req = parse(handle, container)
    assert (
        handle.mutate_admission(pod=pod(container), container=container, index=0, request=req) == ()
    )


def test_admission_sets_the_runtime_class_once_per_pod(make_handle, table, cluster_config):
    cluster_config(runtime_class_name="ascend")
    table.chips()
    handle = make_handle()
    init = ContainerView(name="setup", limits={NPU: "1"}, init=True)
    main = asks(**{NPU: "1"})
    whole = pod(init, main)
    first = handle.mutate_admission(pod=whole, container=init, index=0, request=parse(handle, init))
    second = handle.mutate_admission(
        pod=whole, container=main, index=0, request=parse(handle, main)
    )
    assert [(p.op, p.path, p.value) for p in first] == [("add", "/spec/runtimeClassName", "ascend")]
    assert second == ()


def test_admission_refuses_vnpus_when_the_nodes_cannot_cut_them(make_handle, table, cluster_config):
    cluster_config(vnpu=False)
    table.chips()
    handle = make_handle()
    container = asks(**{NPU: "1", MEM: "100"})
    with pytest.raises(AdmissionDenied, match="Ascend Docker Runtime"):
        handle.mutate_admission(
            pod=pod(container), container=container, index=0, request=parse(handle, container)
        )


def test_a_broken_config_file_fails_the_plugin_with_the_reason(table, monkeypatch, tmp_path):
    import xpushare_ascend.plugin as ascend_plugin
    from xpushare.plugins import PluginHost

    config = tmp_path / "ascend.yaml"
    config.write_text("chip: 123X\n")
    monkeypatch.setenv("XPUSHARE_ASCEND_CONFIG", str(config))
    record = PluginHost().register("ascend", ascend_plugin)
    assert record.state.value == "failed"
    assert "chip '123X' is not in the chips table" in (record.error or "")


def test_bind_annotates_the_templates_each_container_got(handle):
    assignment = PodAssignment(
        node="n1",
        containers=(
            ContainerAssignment(
                container="main",
                vendor="ascend",
                devices=(
                    DeviceSlice(
                        device_id="NPU-1",
                        memory_mib=16384,
                        compute_percent=25,
                        partition="vir05_1c_16g",
                    ),
                ),
            ),
        ),
    )
    assert handle.patch_annotations(pod=pod(), assignment=assignment) == {
        "ascend.xpushare.io/vnpu-templates": "main=vir05_1c_16g"
    }
