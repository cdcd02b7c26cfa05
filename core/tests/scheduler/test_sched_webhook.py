"""The admission webhook over HTTP(S): patches applied with jsonpatch, denials, TLS reload."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl

import jsonpatch
import pytest
from sched_helpers import CORES, GPU, MEM, PCT, add_nodes, make_certificates, start_scheduler

from xpushare.testing.apiserver import pod


def review(obj, *, namespace="default", operation="CREATE", uid="req-1"):
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }


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
        ({"gpu": "1", "cores": "150"}, "at most 100"),
        ({"gpu": "1", "mem": "900000"}, "largest mock device"),
        ({"gpu": "1.5"}, "whole number"),
    ],
)
async def test_invalid_requests_are_denied_precisely(api, sched, http, limits, words):
    add_nodes(api, 1)
    await sched.settle(api)
    response = await admit(sched, http, gpu(**limits))
    assert response["allowed"] is False
    assert words in response["status"]["message"]
    assert "container 'main'" in response["status"]["message"]


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
