"""The fake kubelet refuses what kubelet refuses, with kubelet's messages."""

import shutil
import tempfile
from pathlib import Path

import grpc
import pytest

from xpushare.node.deviceplugin.proto import pb, pb_grpc
from xpushare.testing.kubelet import FakeKubelet, valid_extended_resource_name


@pytest.fixture
def short_dir():
    path = Path(tempfile.mkdtemp(prefix="xpk", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def register(kubelet, **fields):
    request = pb.RegisterRequest(
        version=fields.get("version", "v1beta1"),
        endpoint=fields.get("endpoint", "nobody.sock"),
        resource_name=fields.get("resource_name", "example.com/gpu"),
    )
    async with grpc.aio.insecure_channel(f"unix://{kubelet.socket}") as channel:
        await pb_grpc.RegistrationStub(channel).Register(request, timeout=5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"version": "v1alpha1"}, 'requested API version "v1alpha1" is not supported by kubelet'),
        ({"resource_name": "gpu"}, 'the ResourceName "gpu" is invalid'),
        ({"resource_name": "kubernetes.io/gpu"}, 'the ResourceName "kubernetes.io/gpu" is invalid'),
        ({"endpoint": "absent.sock"}, "failed to dial device plugin"),
    ],
)
async def test_register_refusals(short_dir, fields, message):
    async with FakeKubelet(short_dir, dial_timeout_s=0.2) as kubelet:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await register(kubelet, **fields)
        assert message in info.value.details()
        assert kubelet.registrations == []


async def test_start_wipes_sockets_but_not_other_files(short_dir):
    import socket

    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(short_dir / "old-plugin.sock"))
    stale.close()
    (short_dir / "kubelet_internal_checkpoint").write_text("{}")
    (short_dir / "DEPRECATION").write_text("")
    async with FakeKubelet(short_dir):
        names = sorted(p.name for p in short_dir.iterdir())
    assert names == ["DEPRECATION", "kubelet.sock", "kubelet_internal_checkpoint"]


def test_extended_resource_names():
    assert valid_extended_resource_name("nvidia.com/gpu")
    assert valid_extended_resource_name("xpushare.io/mock-gpu")
    assert not valid_extended_resource_name("nvidia.com/")
    assert not valid_extended_resource_name("a/b/c")
    assert not valid_extended_resource_name("Upper.com/gpu")
    assert not valid_extended_resource_name("x.kubernetes.io/gpu")
    assert not valid_extended_resource_name("nvidia.com/" + "g" * 64)
