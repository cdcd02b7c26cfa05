"""The admission webhook over HTTP(S): patches applied with jsonpatch, denials, TLS reload."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import ssl

import jsonpatch
import pytest
from sched_helpers import CORES, GPU, MEM, PCT, add_nodes, make_certificates, start_scheduler

from xpushare.testing.apiserver import pod


def review(obj, *, namespace="default", operation="CREATE", uid="req-1", sub=None, old=None):
    request = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "alice"},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    if sub is not None:
        request["subResource"] = sub
        request["requestSubResource"] = sub
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


async def admit(sched, http, obj, **kwargs):
    async with http.post(f"{sched.url}/mutate?timeout=10s", json=review(obj, **kwargs)) as r:
        assert r.status == 200, await r.text()
        body = await r.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == kwargs.get("uid", "req-1")
    return body["response"]


def patched(obj, response):
    assert response["allowed"], response
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(obj, ops)


def gpu(**limits):
    names = {"gpu": GPU, "mem": MEM, "pct": PCT, "cores": CORES}
    return pod("p", limits={names[k]: v for k, v in limits.items()})


async def test_whole_device_request_becomes_exclusive_and_gets_our_scheduler(sched, http):
    obj = gpu(gpu="2")
    del obj["metadata"]["annotations"]  # the missing-parent case of JSON patch
    result = patched(obj, await admit(sched, http, obj))
    assert result["spec"]["schedulerName"] == "xpushare-scheduler"
    assert result["spec"]["containers"][0]["resources"]["limits"] == {GPU: "2", CORES: "100"}


async def test_memory_only_request_gets_a_device_count(sched, http):
    obj = pod(
        "p",
        containers=[
            {
                "name": "c",
                "image": "x",
                "resources": {"limits": {MEM: "4000"}, "requests": {MEM: "4000"}},
            }
        ],
    )
    result = patched(obj, await admit(sched, http, obj))
    resources = result["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {MEM: "4000", GPU: "1"}
    assert resources["requests"] == {MEM: "4000", GPU: "1"}


async def test_shared_request_and_other_schedulers_are_left_alone(sched, http):
    obj = gpu(gpu="1", mem="4000", cores="30")
    obj["spec"]["schedulerName"] = "volcano"
    response = await admit(sched, http, obj)
    assert response["allowed"] and "patch" not in response
    assert "volcano" in response["warnings"][0]
    plain = pod("plain", limits={"cpu": "1"})
    assert "patch" not in await admit(sched, http, plain)


async def test_a_copied_assignment_is_removed(sched, http):
    obj = gpu(gpu="1", mem="1000")
    obj["metadata"]["annotations"]["xpushare.io/assignment"] = '{"v":1}'
    result = patched(obj, await admit(sched, http, obj))
    assert "xpushare.io/assignment" not in result["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"gpu": "1", "mem": "-5"}, "negative"),
        ({"gpu": "one"}, "not a number"),
        ({"gpu": "1", "mem": "lots"}, "not a number"),
        ({"gpu": "1", "mem": "1000", "pct": "50"}, "keep one"),
        ({"gpu": "1", "mem": "900000"}, "largest mock device"),
        ({"gpu": "1.5"}, "whole number"),
        # The unit of the memory resource is MiB: a suffix is not multiplied in (16Gi would
        # be 17,179,869,184 MiB), the message says what was likely meant.
        (
            {"gpu": "1", "mem": "16Gi"},
            "'16Gi' read as bytes is 16384 MiB: write " + MEM + ": 16384",
        ),
        ({"gpu": "1", "mem": "1Ki"}, "'1Ki' read as bytes is 1 MiB"),
        # Too large to be a plain number of MiB: the user meant bytes.
        ({"gpu": "1", "mem": "16G"}, "'16G' read as bytes is 15259 MiB"),
    ],
)
async def test_invalid_requests_are_denied_precisely(api, sched, http, limits, words):
    add_nodes(api, 1)
    await sched.settle(api)
    response = await admit(sched, http, gpu(**limits))
    assert response["allowed"] is False
    assert words in response["status"]["message"]
    assert "container 'main'" in response["status"]["message"]


@pytest.mark.parametrize("stored", ["8k", "80k"])
async def test_a_plain_number_the_api_server_rewrote_with_a_suffix_is_admitted(
    api, sched, http, stored
):
    # kube-apiserver stores `mock-gpumem: 8000` in canonical form and sends the webhook "8k"
    # (seen on a real 1.36 API server, tests/realcluster): it is 8000 MiB, never 8000 bytes.
    add_nodes(api, 1)
    await sched.settle(api)
    response = await admit(sched, http, gpu(gpu="1", mem=stored))
    assert response["allowed"] is True, response


async def test_isolation_bypass_is_refused_unless_the_namespace_is_allowed(
    api, scheduler_factory, http
):
    sched = await scheduler_factory(**{"webhook.bypass_namespaces": "trusted"})
    obj = gpu(gpu="1", mem="1000")
    obj["spec"]["containers"][0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    denied = await admit(sched, http, obj)
    assert denied["allowed"] is False
    assert "CUDA_DISABLE_CONTROL" in denied["status"]["message"]
    assert "bypass_namespaces" in denied["status"]["message"]
    assert (await admit(sched, http, obj, namespace="trusted"))["allowed"] is True
    obj["spec"]["containers"][0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "false"}]
    assert (await admit(sched, http, obj))["allowed"] is True
    limit = gpu(gpu="1")
    limit["spec"]["containers"][0]["env"] = [{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "1g"}]
    assert (await admit(sched, http, limit))["allowed"] is False
    privileged = gpu(gpu="1")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    message = (await admit(sched, http, privileged))["status"]["message"]
    assert "privileged" in message


async def test_preset_node_name_is_denied(sched, http):
    obj = gpu(gpu="1")
    obj["spec"]["nodeName"] = "node-0"
    response = await admit(sched, http, obj)
    assert response["allowed"] is False and "spec.nodeName" in response["status"]["message"]


async def test_bad_reviews_are_answered_not_crashed(sched, http):
    async with http.post(f"{sched.url}/mutate", data=b"\x00garbage") as r:
        assert r.status == 400
        assert "not valid JSON" in (await r.json())["error"]
    async with http.post(f"{sched.url}/mutate", json={"kind": "AdmissionReview"}) as r:
        assert r.status == 400
    bad_pod = review({"spec": {"containers": "nope"}})
    async with http.post(f"{sched.url}/mutate", json=bad_pod) as r:
        body = await r.json()
    assert body["response"]["allowed"] is False
    assert "spec.containers" in body["response"]["status"]["message"]
    # Other operations pass untouched.
    assert (await admit(sched, http, gpu(gpu="1"), operation="UPDATE"))["allowed"] is True


async def served_name(sched, context):
    port = sched.scheduler.ports["main"]
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        peer = writer.get_extra_info("peercert")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    return dict(x[0] for x in peer["subject"])["commonName"]


async def test_tls_serves_and_reloads_a_rotated_certificate(api, http, tmp_path):
    ca, cert, key = make_certificates(tmp_path / "one", "first")
    live_cert = tmp_path / "tls.crt"
    live_key = tmp_path / "tls.key"
    live_cert.write_bytes(cert.read_bytes())
    live_key.write_bytes(key.read_bytes())
    sched = await start_scheduler(
        api,
        **{
            "tls.cert_file": str(live_cert),
            "tls.key_file": str(live_key),
            "tls.reload_interval_s": 0.05,
        },
    )
    try:
        context = ssl.create_default_context(cafile=str(ca))
        async with http.post(
            f"{sched.url}/mutate", json=review(gpu(gpu="1", mem="10")), ssl=context
        ) as r:
            assert r.status == 200
        assert await served_name(sched, context) == "first"
        # Rotate: a new CA and certificate replace the files (as a Secret update does).
        ca2, cert2, key2 = make_certificates(tmp_path / "two", "second")
        live_key.write_bytes(key2.read_bytes())
        live_cert.write_bytes(cert2.read_bytes())
        tls = sched.scheduler.tls
        loads = tls.loads
        await api.wait_for(lambda: tls.loads > loads)
        context2 = ssl.create_default_context(cafile=str(ca2))
        assert await served_name(sched, context2) == "second"
        with pytest.raises(ssl.SSLError):
            await served_name(sched, context)  # the old CA no longer matches
    finally:
        await sched.close()


async def test_limits_env_only_matters_for_device_pods_visibility_for_all(sched, http):
    plain = pod("plain", limits={"cpu": "1"})
    plain["spec"]["containers"][0]["env"] = [{"name": "CUDA_DEVICE_SM_LIMIT", "value": "5"}]
    assert (await admit(sched, http, plain))["allowed"] is True
    plain["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    response = await admit(sched, http, plain)
    assert response["allowed"] is False
    assert "NVIDIA_VISIBLE_DEVICES" in response["status"]["message"]


# -- what the webhook must also see: ephemeral containers, envFrom, privilege, paths ---------------
#
# The mock vendor declares the NVIDIA plugin's default guard (xpushare_admission_guard):
# /etc/ld.so.preload and /usr/local/vgpu in sharing containers, /usr/local/vgpu on the node,
# /dev/nvidia* device nodes.


def denied(response):
    assert response["allowed"] is False, response
    assert 400 <= response["status"]["code"] < 500
    message = response["status"]["message"]
    assert "webhook.bypass_namespaces" in message  # says how to allow it
    return message


def with_ephemeral(obj, *containers):
    obj = copy.deepcopy(obj)
    obj["spec"].setdefault("ephemeralContainers", []).extend(containers)
    return obj


def debugger(name="debugger-x", env=None, **extra):
    found = {"name": name, "image": "busybox", "targetContainerName": "main", **extra}
    if env is not None:
        found["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return found


async def debug(sched, http, old, *containers, namespace="default"):
    """kubectl debug: an UPDATE of pods/ephemeralcontainers carrying the whole pod."""
    new = with_ephemeral(old, *containers)
    return await admit(
        sched,
        http,
        new,
        operation="UPDATE",
        sub="ephemeralcontainers",
        old=old,
        namespace=namespace,
    )


async def test_ephemeral_containers_are_reviewed(scheduler_factory, http):
    sched = await scheduler_factory(**{"webhook.bypass_namespaces": "trusted"})
    plain = pod("plain", limits={"cpu": "1"})
    # NVIDIA_VISIBLE_DEVICES=all hands every GPU of the node to any pod, debugged or not.
    response = await debug(sched, http, plain, debugger(env={"NVIDIA_VISIBLE_DEVICES": "all"}))
    assert "spec.ephemeralContainers[0].env[NVIDIA_VISIBLE_DEVICES]" in denied(response)
    assert "ephemeral container 'debugger-x'" in response["status"]["message"]
    ok = await debug(
        sched, http, plain, debugger(env={"NVIDIA_VISIBLE_DEVICES": "all"}), namespace="trusted"
    )
    assert ok["allowed"] is True
    # Limit variables only matter where there are shares to limit.
    assert (await debug(sched, http, plain, debugger(env={"CUDA_DEVICE_SM_LIMIT": "100"})))[
        "allowed"
    ] is True
    # On a device pod the limit variables and a privileged debugger are refused too...
    shared = gpu(gpu="1", mem="1000")
    shared["spec"]["nodeName"] = "node-0"  # running: bound, assigned
    shared["metadata"]["annotations"]["xpushare.io/assignment"] = '{"v":1}'
    limit = await debug(sched, http, shared, debugger(env={"CUDA_DEVICE_MEMORY_LIMIT_0": "80g"}))
    assert "spec.ephemeralContainers[0].env[CUDA_DEVICE_MEMORY_LIMIT_0]" in denied(limit)
    sysadmin = debugger(securityContext={"privileged": True})  # kubectl debug --profile=sysadmin
    message = denied(await debug(sched, http, shared, sysadmin))
    assert "spec.ephemeralContainers[0].securityContext.privileged" in message
    caps = debugger(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})
    message = denied(await debug(sched, http, shared, caps))
    assert "spec.ephemeralContainers[0].securityContext.capabilities.add[SYS_ADMIN]" in message
    # ...and a clean debugger passes without a patch: nothing of a running pod is changed
    # (its assignment is real, its nodeName is set).
    clean = await debug(sched, http, shared, debugger())
    assert clean["allowed"] is True and "patch" not in clean


async def test_only_the_ephemeral_containers_an_update_adds_are_judged(scheduler_factory, http):
    sched = await scheduler_factory()
    # Added while the namespace was allowed (or before the webhook): not judged again.
    old = with_ephemeral(
        pod("plain", limits={"cpu": "1"}), debugger("first", env={"NVIDIA_VISIBLE_DEVICES": "all"})
    )
    assert (await debug(sched, http, old, debugger("second")))["allowed"] is True
    bad = debugger("third", env={"NVIDIA_VISIBLE_DEVICES": "all"})
    message = denied(await debug(sched, http, old, bad))
    assert "spec.ephemeralContainers[1].env[NVIDIA_VISIBLE_DEVICES]" in message
    assert "ephemeralContainers[0]" not in message
    # Other subresources and plain updates are still left alone.
    status = await admit(sched, http, old, operation="UPDATE", sub="status", old=old)
    assert status["allowed"] is True


@pytest.mark.parametrize(
    ("prefix", "device_pod", "refused"),
    [
        ("CUDA_DISABLE_", True, True),  # + key CONTROL
        ("CUDA_", True, True),
        ("C", True, True),
        ("CUDA_DEVICE_MEMORY_LIMIT_", True, True),  # extends into CUDA_DEVICE_MEMORY_LIMIT*
        ("CUDA_DEVICE_SM_LIMIT_0_", True, True),
        ("NVIDIA_VISIBLE_", False, True),  # visibility: on every pod
        ("NVIDIA_VISIBLE_DEVICE", False, True),  # + a key "S"
        ("N", False, True),
        ("CUDA_DISABLE_", False, False),  # no shares to unlimit
        ("APP_", True, False),
        ("NODE_", False, False),
        ("CUDA_VISIBLE_", True, False),
        ("", True, False),  # no prefix: the keys are the ConfigMap's, a documented limit
    ],
)
async def test_env_from_prefixes_that_can_form_a_guarded_variable_are_refused(
    sched, http, prefix, device_pod, refused
):
    obj = gpu(gpu="1") if device_pod else pod("plain", limits={"cpu": "1"})
    obj["spec"]["containers"].append(
        {
            "name": "side",
            "image": "x",
            "envFrom": [{"prefix": prefix, "configMapRef": {"name": "settings"}}],
        }
    )
    response = await admit(sched, http, obj)
    if refused:
        assert "spec.containers[1].envFrom[0].prefix" in denied(response)
    else:
        assert response["allowed"] is True


async def test_env_from_prefix_in_an_init_container_is_refused(sched, http):
    obj = gpu(gpu="1")
    obj["spec"]["initContainers"] = [
        {"name": "init", "image": "x", "envFrom": [{"secretRef": {"name": "s"}}]},
        {"name": "init2", "image": "x", "envFrom": [{"prefix": "x"}, {"prefix": "CUDA_DISABLE_"}]},
    ]
    message = denied(await admit(sched, http, obj))
    assert "spec.initContainers[1].envFrom[1].prefix 'CUDA_DISABLE_'" in message
    assert "init container 'init2'" in message


@pytest.mark.parametrize(
    "capability",
    ["CAP_SYS_ADMIN", "SYS_ADMIN", "sys_admin", "Cap_Sys_Admin", "ALL", "all", "SYS_MODULE"],
)
async def test_capabilities_that_undo_the_preload_are_refused_on_device_pods(
    sched, http, capability
):
    obj = gpu(gpu="1", mem="1000")
    obj["spec"]["containers"][0]["securityContext"] = {
        "capabilities": {"add": ["NET_ADMIN", capability], "drop": ["ALL"]}
    }
    message = denied(await admit(sched, http, obj))
    assert f"spec.containers[0].securityContext.capabilities.add[{capability}]" in message
    assert "NET_ADMIN" not in message


async def test_capabilities_in_a_sidecar_or_an_init_container_count_too(sched, http):
    obj = gpu(gpu="1")
    obj["spec"]["initContainers"] = [
        {"name": "setup", "image": "x", "securityContext": {"capabilities": {"add": ["ALL"]}}}
    ]
    message = denied(await admit(sched, http, obj))
    assert "spec.initContainers[0].securityContext.capabilities.add[ALL]" in message
    # Pods without devices: Pod Security's business, not ours.
    plain = pod("plain", limits={"cpu": "1"})
    plain["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}
    assert (await admit(sched, http, plain))["allowed"] is True
    net = gpu(gpu="1")
    net["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["NET_RAW"]}}
    assert (await admit(sched, http, net))["allowed"] is True


async def test_host_pid_is_refused_on_device_pods(sched, http):
    obj = gpu(gpu="1")
    obj["spec"]["hostPID"] = True
    assert "spec.hostPID" in denied(await admit(sched, http, obj))
    plain = pod("plain", limits={"cpu": "1"})
    plain["spec"]["hostPID"] = True
    assert (await admit(sched, http, plain))["allowed"] is True


def volumes_pod(path, mount_path="/host", **mount):
    obj = gpu(gpu="1", mem="1000")
    obj["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "conf", "configMap": {"name": "conf"}},
        {"name": "host", "hostPath": {"path": path}},
    ]
    obj["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "host", "mountPath": mount_path, **mount},
    ]
    return obj


@pytest.mark.parametrize(
    "path",
    [
        "/usr/local/vgpu",
        "/usr/local/vgpu/",
        "//usr/local/vgpu",
        "/usr/local/./vgpu",
        "/usr/local/vgpu/../vgpu",
        "/usr/local/vgpu/containers/other-pod_main",  # another pod's accounting
        "/usr/local/vgpu/ld.so.preload",
        "/usr/local",  # holds it (a subPath would reach in)
        "/usr",
        "/",
    ],
)
async def test_host_path_of_the_hami_core_directory_is_refused_on_device_pods(sched, http, path):
    message = denied(await admit(sched, http, volumes_pod(path, subPath="vgpu")))
    assert f"spec.volumes[2].hostPath.path {path!r}" in message
    assert "mounted by spec.containers[0].volumeMounts[1]" in message
    assert "/usr/local/vgpu" in message


@pytest.mark.parametrize("path", ["/usr/local/vgpu-old", "/usr/local/bin", "/var/log", "/data"])
async def test_other_host_paths_pass_the_webhook(sched, http, path):
    assert (await admit(sched, http, volumes_pod(path)))["allowed"] is True


async def test_an_unmounted_host_path_is_refused_too(sched, http):
    # An ephemeral container could mount it later.
    obj = volumes_pod("/usr/local/vgpu")
    obj["spec"]["containers"][0]["volumeMounts"].pop()
    message = denied(await admit(sched, http, obj))
    assert "spec.volumes[2].hostPath.path" in message and "mounted by" not in message


@pytest.mark.parametrize(
    ("mount_path", "volume"),
    [
        ("/etc", {"emptyDir": {}}),
        ("/etc/", {"emptyDir": {}}),
        ("//etc", {"emptyDir": {}}),
        ("/etc/../etc", {"emptyDir": {}}),
        ("/etc/.", {"configMap": {"name": "etc"}}),
        ("etc", {"emptyDir": {}}),  # the runtime takes a relative path from the root
        ("/etc/ld.so.preload", {"configMap": {"name": "empty"}}),
        ("/etc//ld.so.preload", {"hostPath": {"path": "/dev/null"}}),
        ("/etc/ld.so.preload", {"projected": {"sources": []}}),
        ("/usr/local/vgpu", {"emptyDir": {}}),
        ("/usr/local/vgpu/libvgpu.so", {"hostPath": {"path": "/tmp/noop.so"}}),
        ("/usr/local/vgpu/..", {"emptyDir": {}}),  # /usr/local: above the directory
        ("/usr", {"emptyDir": {}}),
        ("/", {"emptyDir": {}}),
    ],
)
async def test_mounts_over_the_preload_or_the_hami_core_directory_are_refused(
    sched, http, mount_path, volume
):
    obj = gpu(gpu="1", mem="1000")
    obj["spec"]["volumes"] = [{"name": "x", **volume}]
    obj["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "x", "mountPath": "/data"},
        {"name": "x", "mountPath": mount_path, "subPath": "ld.so.preload"},
    ]
    message = denied(await admit(sched, http, obj))
    assert f"spec.containers[0].volumeMounts[1].mountPath {mount_path!r}" in message
    assert "container 'main'" in message


async def test_mounts_in_an_init_container_with_devices_and_block_devices_are_refused(sched, http):
    obj = pod("p", limits={"cpu": "1"})
    obj["spec"]["volumes"] = [
        {"name": "x", "emptyDir": {}},
        {"name": "b", "persistentVolumeClaim": {"claimName": "b"}},
    ]
    obj["spec"]["initContainers"] = [
        {
            "name": "warmup",
            "image": "x",
            "resources": {"limits": {GPU: "1", MEM: "100"}},
            "volumeMounts": [{"name": "x", "mountPath": "/etc"}],
            "volumeDevices": [{"name": "b", "devicePath": "/usr/local/vgpu/libvgpu.so"}],
        }
    ]
    message = denied(await admit(sched, http, obj))
    assert "spec.initContainers[0].volumeMounts[0].mountPath '/etc'" in message
    assert "spec.initContainers[0].volumeDevices[0].devicePath" in message


@pytest.mark.parametrize(
    "mount_path",
    ["/etc/myapp", "/etc/ld.so.preload.d", "/etcd", "/usr/local/vgpux", "/tmp", "/data"],
)
async def test_ordinary_mounts_of_device_pods_pass(sched, http, mount_path):
    obj = gpu(gpu="1", mem="1000")
    obj["spec"]["volumes"] = [
        {"name": "x", "emptyDir": {}},
        {"name": "conf", "configMap": {"name": "conf"}},
    ]
    obj["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "x", "mountPath": mount_path},
        {"name": "conf", "mountPath": "/etc/myapp/conf.d", "readOnly": True},
    ]
    result = patched(obj, await admit(sched, http, obj))
    assert result["spec"]["schedulerName"] == "xpushare-scheduler"


async def test_a_sidecar_without_devices_may_mount_over_etc(sched, http):
    # No HAMi-core in it: nothing to undo (its environment and privileges are still judged).
    obj = gpu(gpu="1")
    obj["spec"]["volumes"] = [{"name": "x", "emptyDir": {}}]
    obj["spec"]["containers"].append(
        {"name": "side", "image": "x", "volumeMounts": [{"name": "x", "mountPath": "/etc"}]}
    )
    assert (await admit(sched, http, obj))["allowed"] is True


def device_pod(path, security):
    obj = pod("sneaky", limits={"cpu": "1"})
    obj["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": path}}]
    obj["spec"]["containers"][0]["securityContext"] = security
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "dev", "mountPath": "/dev/gpu"}]
    return obj


@pytest.mark.parametrize(
    "path",
    [
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-caps/nvidia-cap1",
        "/dev/../dev/nvidia0",
        "//dev/nvidia0",
        "/dev",
        "/dev/",
        "/",
    ],
)
async def test_privileged_pods_without_devices_may_not_mount_the_device_nodes(sched, http, path):
    response = await admit(sched, http, device_pod(path, {"privileged": True}))
    message = denied(response)
    assert f"spec.volumes[0].hostPath.path {path!r}" in message
    assert "spec.containers[0].volumeMounts[0]" in message
    assert "/dev/nvidia*" in message


async def test_the_device_rule_counts_capabilities_and_ephemeral_containers(sched, http):
    sys_admin = device_pod("/dev/nvidia0", {"capabilities": {"add": ["cap_sys_admin"]}})
    assert "spec.volumes[0].hostPath.path" in denied(await admit(sched, http, sys_admin))
    # Without privilege the device cgroup keeps the nodes closed: nothing to refuse.
    assert (await admit(sched, http, device_pod("/dev/nvidia0", {})))["allowed"] is True
    assert (await admit(sched, http, device_pod("/dev/shm", {"privileged": True})))["allowed"]
    # A privileged debugger that mounts the pod's /dev volume.
    plain = device_pod("/dev", {})
    sysadmin = debugger(
        securityContext={"privileged": True},
        volumeMounts=[{"name": "dev", "mountPath": "/host-dev"}],
    )
    message = denied(await debug(sched, http, plain, sysadmin))
    assert "spec.ephemeralContainers[0].volumeMounts[0]" in message


async def test_every_refused_field_is_listed_and_an_allowed_namespace_passes(
    scheduler_factory, http
):
    sched = await scheduler_factory(**{"webhook.bypass_namespaces": "gpu-operator,trusted"})
    obj = volumes_pod("/usr/local/vgpu", mount_path="/etc")
    obj["spec"]["hostPID"] = True
    obj["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    message = denied(await admit(sched, http, obj))
    for field in (
        "spec.containers[0].env[NVIDIA_VISIBLE_DEVICES]",
        "spec.containers[0].volumeMounts[1].mountPath '/etc'",
        "spec.hostPID",
        "spec.volumes[2].hostPath.path",
    ):
        assert field in message
    assert (await admit(sched, http, obj, namespace="trusted"))["allowed"] is True


async def test_ordinary_pods_pass_untouched(sched, http):
    obj = pod("web", limits={"cpu": "1"})
    obj["spec"]["volumes"] = [
        {"name": "x", "emptyDir": {}},
        {"name": "logs", "hostPath": {"path": "/var/log"}},
    ]
    obj["spec"]["containers"][0].update(
        {
            "envFrom": [{"configMapRef": {"name": "settings"}}, {"prefix": "APP_"}],
            "volumeMounts": [
                {"name": "x", "mountPath": "/etc"},
                {"name": "logs", "mountPath": "/var/log/host"},
            ],
            "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
        }
    )
    response = await admit(sched, http, obj)
    assert response["allowed"] is True and "patch" not in response


async def test_policy_annotations_hami_ignores_pass_with_a_warning(sched, http):
    obj = gpu(gpu="1", mem="1000")
    obj["metadata"]["annotations"] = {
        "hami.io/node-scheduler-policy": "fgd",
        "hami.io/gpu-scheduler-policy": "mutex,binpack,numa",
    }
    response = await admit(sched, http, obj)
    assert response["allowed"] is True and "warnings" not in response
    obj["metadata"]["annotations"] = {
        "hami.io/node-scheduler-policy": "tightest",
        "hami.io/gpu-scheduler-policy": "binpack,nearest",
    }
    response = await admit(sched, http, obj)
    assert response["allowed"] is True
    node, device = response["warnings"]
    assert "hami.io/node-scheduler-policy 'tightest'" in node and "fgd-cpu" in node
    assert "hami.io/gpu-scheduler-policy: 'nearest' ignored" in device


async def test_malformed_scoring_weights_are_refused_at_admission(sched, http):
    obj = gpu(gpu="1", mem="1000")
    obj["metadata"]["annotations"] = {"hami.io/device-scoring-weights": "slot=1,core=1"}
    response = await admit(sched, http, obj)
    assert response["allowed"] is False
    assert "hami.io/device-scoring-weights" in response["status"]["message"]
    assert "pod default/p" in response["status"]["message"]


async def test_what_hami_clamps_or_ignores_is_admitted_with_a_warning(sched, http):
    obj = gpu(gpu="1", cores="150")
    obj["spec"]["containers"][0]["resources"]["requests"] = {GPU: "1", CORES: "150"}
    response = await admit(sched, http, obj)
    result = patched(obj, response)
    [warning] = response["warnings"]
    assert f"{CORES} 150 is above a whole device (100)" in warning and "container 'main'" in warning
    resources = result["spec"]["containers"][0]["resources"]
    assert resources["limits"][CORES] == "100" and resources["requests"][CORES] == "100"
    for pct, words in (("150", f"{PCT} 150 is above 100 %"), ("0", f"{PCT} 0 is ignored")):
        response = await admit(sched, http, gpu(gpu="1", pct=pct))
        assert response["allowed"] is True
        assert any(words in w for w in response["warnings"]), response["warnings"]
    # Our own numa-bind key keeps its strict rule: a typo there is refused.
    numa = gpu(gpu="1", mem="1000")
    numa["metadata"]["annotations"] = {"xpushare.io/numa-bind": "yes"}
    assert (await admit(sched, http, numa))["allowed"] is False


async def test_a_memory_of_zero_shares_the_device_as_in_hami(sched, http):
    response = await admit(sched, http, gpu(gpu="1", mem="0"))
    result = patched(gpu(gpu="1", mem="0"), response)
    # Taken as not given (whole memory), yet not made exclusive: a memory resource was written.
    assert CORES not in result["spec"]["containers"][0]["resources"]["limits"]
    assert any(f"{MEM} 0 is taken as not given" in w for w in response["warnings"])


async def test_a_pod_past_its_namespaces_device_quota_is_denied_or_warned(api, sched, http):
    from sched_helpers import DevicePlugin, bind_args, create_pod, gpu_pod

    add_nodes(api, 1, "4x A100-80GB")
    api.put(
        "resourcequotas",
        {
            "metadata": {"name": "gpu", "namespace": "team"},
            "spec": {"hard": {f"limits.{MEM}": "30000", f"requests.{CORES}": "150"}},
        },
    )
    await sched.settle(api)

    def asking(name, **limits):
        obj = gpu(**limits)
        obj["metadata"].update(name=name, namespace="team")
        return obj

    # Alone past a cap: it could never be scheduled, so it is denied, the figures named.
    denied = await admit(sched, http, asking("huge", gpu="1", mem="40000", cores="10"),
                         namespace="team")  # fmt: skip
    assert not denied["allowed"]
    message = denied["status"]["message"]
    for part in ("pod team/huge", "namespace team", "ResourceQuota gpu", f"limits.{MEM}",
                 "40000 MiB", "30000"):  # fmt: skip
        assert part in message, (part, message)
    # A count-only request is made exclusive here (compute 100 per device): two are 200 %.
    whole = await admit(sched, http, asking("whole", gpu="2"), namespace="team")
    assert not whole["allowed"] and f"requests.{CORES}" in whole["status"]["message"]
    assert "200 % compute" in whole["status"]["message"]
    # Another namespace has no quota: nothing said.
    elsewhere = await admit(sched, http, gpu(gpu="1", mem="40000", cores="10"), namespace="lab")
    assert elsewhere["allowed"] and "warnings" not in elsewhere
    # Within the cap alone, but not beside what the namespace's pods book now: a warning.
    first = create_pod(api, gpu_pod("first", namespace="team", gpu="1", mem="20000", cores="10"))
    await sched.settle(api)
    with DevicePlugin(api):
        assert (await sched.post(http, "bind", bind_args(first, "node-0"))) == {"Error": ""}
    await sched.settle(api)
    later = await admit(sched, http, asking("later", gpu="1", mem="20000", cores="10"),
                        namespace="team")  # fmt: skip
    assert later["allowed"]
    (warning,) = [w for w in later["warnings"] if "ResourceQuota" in w]
    assert "its pods book 20000 MiB" in warning and "20000 MiB more" in warning
    assert "Pending" in warning and "namespace team" in warning
    fits = await admit(sched, http, asking("fits", gpu="1", mem="10000", cores="10"),
                       namespace="team")  # fmt: skip
    assert fits["allowed"] and not any("ResourceQuota" in w for w in fits.get("warnings", []))
