"""The committed gRPC stubs are what scripts/gen-proto generates from the committed .proto."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTO_DIR = ROOT / "core/src/xpushare/node/_proto"
GENERATED = tuple(
    f"{proto}{suffix}"
    for proto in (
        "deviceplugin_v1beta1",
        "podresources_v1",
        "dra_v1",
        "drahealth_v1alpha1",
        "pluginregistration_v1",
    )
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
)


def test_committed_stubs_are_current(tmp_path):
    subprocess.run(
        [str(ROOT / "scripts/gen-proto"), str(tmp_path)], check=True, cwd=ROOT, timeout=120
    )
    fresh = tmp_path / "xpushare/node/_proto"
    for name in GENERATED:
        assert (fresh / name).read_text() == (PROTO_DIR / name).read_text(), (
            f"{name} is stale: run scripts/gen-proto and commit the result"
        )


def test_wire_names_are_kubelets():
    from xpushare.node.deviceplugin.proto import pb

    services = pb.DESCRIPTOR.services_by_name
    assert pb.DESCRIPTOR.package == "v1beta1"
    assert [m.full_name for m in services["Registration"].methods] == [
        "v1beta1.Registration.Register"
    ]
    assert [m.name for m in services["DevicePlugin"].methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
    fields = {f.name: f.number for f in pb.ContainerPreferredAllocationRequest.DESCRIPTOR.fields}
    assert fields == {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}
    fields = {f.name: f.number for f in pb.ContainerAllocateResponse.DESCRIPTOR.fields}
    assert fields == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}


def test_pod_resources_wire_names_are_kubelets():
    from xpushare.node.podresources import pr

    service = pr.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert pr.DESCRIPTOR.package == "v1"
    assert [m.full_name for m in service.methods] == ["v1.PodResourcesLister.List"]
    fields = {f.name: f.number for f in pr.PodResources.DESCRIPTOR.fields}
    assert fields == {"name": 1, "namespace": 2, "containers": 3}
    fields = {f.name: f.number for f in pr.ContainerDevices.DESCRIPTOR.fields}
    assert fields == {"resource_name": 1, "device_ids": 2}


def test_dra_health_wire_names_are_kubelets():
    from xpushare.node.dra.health import health

    service = health.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert health.DESCRIPTOR.package == "v1alpha1"
    methods = [m.full_name for m in service.methods]
    assert methods == ["v1alpha1.DRAResourceHealth.NodeWatchResources"]
    fields = {f.name: f.number for f in health.DeviceHealth.DESCRIPTOR.fields}
    assert fields == {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    }
    fields = {f.name: f.number for f in health.DeviceIdentifier.DESCRIPTOR.fields}
    assert fields == {"pool_name": 1, "device_name": 2}
    assert [(v.name, v.number) for v in health.HealthStatus.DESCRIPTOR.values] == [
        ("UNKNOWN", 0),
        ("HEALTHY", 1),
        ("UNHEALTHY", 2),
    ]
