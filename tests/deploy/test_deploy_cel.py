"""The CEL the chart ships decides as intended: evaluated on real-shaped requests.

The webhook's matchCondition decides which pods the API server sends to xpushare; the
node-scoped ValidatingAdmissionPolicy decides which node writes the agent may make; the
allocation-record policy decides who may write the annotations that say which devices a pod
holds. All are
evaluated here with a CEL implementation (cel-rust through ``common-expression-language``) on
the objects the API server would bind to ``object``, ``oldObject`` and ``request``.
"""

from __future__ import annotations

import copy

import cel
import pytest
from chartkit import EVERYTHING, NAMESPACE, RELEASE, find, one, render

AGENT = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-xpushare-node"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"


def evaluate(expression: str, **variables) -> object:
    context = cel.Context()
    for name, value in variables.items():
        context.add_variable(name, value)
    return cel.evaluate(expression, context)


def pod(
    containers=None, init_containers=None, ephemeral=None, volumes=None, annotations=None
) -> dict:
    spec: dict = {"containers": containers or [{"name": "main", "image": "busybox"}]}
    if init_containers is not None:
        spec["initContainers"] = init_containers
    if ephemeral is not None:
        spec["ephemeralContainers"] = ephemeral
    if volumes is not None:
        spec["volumes"] = volumes
    meta: dict = {"name": "p"}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def container(limits=None, requests=None, env=None, prefix=None, security=None) -> dict:
    resources = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    found = {"name": "c", "image": "cuda", "resources": resources}
    if env is not None:
        found["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if prefix is not None:
        found["envFrom"] = [{"configMapRef": {"name": "a"}}, {"prefix": prefix, "secretRef": {}}]
    if security is not None:
        found["securityContext"] = security
    return found


HOST_DEV = [{"name": "e", "emptyDir": {}}, {"name": "dev", "hostPath": {"path": "/dev"}}]
PRIVILEGED = {"privileged": True}


def match_condition(values=None) -> str:
    webhook = one(render(values), "MutatingWebhookConfiguration")["webhooks"][0]
    (condition,) = webhook["matchConditions"]
    return condition["expression"]


@pytest.mark.parametrize(
    ("obj", "sent"),
    [
        (pod(), False),
        (pod([container(limits={"cpu": "1", "memory": "1Gi"})]), False),
        (pod([container(limits={"nvidia.com/gpu": "1"})]), True),
        (pod([container(limits={"nvidia.com/gpumem": "4000"})]), True),
        (pod([container(requests={"nvidia.com/gpucores": "30"})]), True),
        (pod([container(), container(limits={"nvidia.com/gpu": "2"})]), True),
        (pod([container()], init_containers=[container(limits={"nvidia.com/gpu": "1"})]), True),
        (pod([container(limits={"amd.com/gpu": "1"})]), False),  # AMD is not enabled
        # No device request, but a variable that would expose every GPU of the node: the
        # scheduler refuses it on every pod (webhook.visibility_env), so it must see the pod.
        (pod([container(env={"NVIDIA_VISIBLE_DEVICES": "all"})]), True),
        (
            pod([container()], init_containers=[container(env={"NVIDIA_VISIBLE_DEVICES": "0"})]),
            True,
        ),
        (pod([container(env={"PATH": "/bin"})]), False),
        # kubectl debug: the ephemeral container is judged like the others.
        (pod(ephemeral=[container(env={"NVIDIA_VISIBLE_DEVICES": "all"})]), True),
        (pod(ephemeral=[container(env={"TERM": "xterm"})]), False),
        # envFrom with a prefix that could form a visibility variable from unseen keys.
        (pod([container(prefix="NVIDIA_VISIBLE_")]), True),
        (pod([container(prefix="N")]), True),
        (pod(ephemeral=[container(prefix="NVIDIA_")]), True),
        (pod([container(prefix="APP_")]), False),
        (pod([container(prefix="")]), False),
        # Our annotations: a copied xpushare.io/assignment is removed by the webhook.
        (pod(annotations={"xpushare.io/assignment": "{}"}), True),
        (pod(annotations={"xpushare.io/use-model": "A100"}), True),
        (pod(annotations={"example.com/xpushare.io/x": "1", "team": "ml"}), False),
    ],
)
def test_webhook_is_called_only_for_pods_asking_for_managed_resources(obj, sent):
    assert evaluate(match_condition(), object=obj) is sent


def csi_node_plugin() -> dict:
    """A CSI node plugin's pod: privileged, hostPath of the kubelet's and the devices' dirs."""
    volumes = [
        {"name": "kubelet", "hostPath": {"path": "/var/lib/kubelet"}},
        {"name": "dev", "hostPath": {"path": "/dev"}},
    ]
    driver = container(security={"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}})
    return pod([driver, container()], volumes=volumes)


def cni_pod() -> dict:
    """A CNI daemon's pod: host network, NET_ADMIN, hostPath of the CNI config and binaries."""
    obj = pod(
        [container(security={"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}})],
        init_containers=[container(security={"privileged": True})],
        volumes=[
            {"name": "cni-bin", "hostPath": {"path": "/opt/cni/bin"}},
            {"name": "cni-conf", "hostPath": {"path": "/etc/cni/net.d"}},
            {"name": "dev", "hostPath": {"path": "/dev"}},
        ],
    )
    obj["spec"]["hostNetwork"] = True
    return obj


@pytest.mark.parametrize(
    "obj",
    [
        csi_node_plugin(),
        cni_pod(),
        pod([container(security=PRIVILEGED)], volumes=HOST_DEV),
        pod(ephemeral=[container(security=PRIVILEGED)], volumes=HOST_DEV),
        pod([container(limits={"cpu": "2"})], volumes=HOST_DEV[:1]),
    ],
    ids=["csi-node-plugin", "cni", "privileged-hostpath", "debug-privileged", "plain"],
)
def test_pods_that_ask_for_no_device_are_never_sent(obj):
    """Defect 7: such pods were sent, so with both scheduler replicas down (failurePolicy
    Fail) no CSI or CNI pod could start in any namespace. Pod Security closes what they
    could do to the devices (docs/scheduler.md)."""
    assert evaluate(match_condition(), object=obj) is False


def test_a_node_plugin_that_asks_for_a_device_or_exposes_one_is_still_sent():
    gpu = csi_node_plugin()
    gpu["spec"]["containers"][1]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    assert evaluate(match_condition(), object=gpu) is True
    exposed = cni_pod()
    exposed["spec"]["initContainers"][0]["env"] = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
    ]
    assert evaluate(match_condition(), object=exposed) is True


def test_match_condition_follows_the_enabled_vendors():
    expression = match_condition({"vendors": {"amd": {"enabled": True}}})
    assert evaluate(expression, object=pod([container(limits={"amd.com/gpu": "1"})])) is True


def test_visibility_variables_with_a_wildcard_match_by_prefix():
    expression = match_condition({"scheduler": {"webhook": {"visibilityEnv": ["ASCEND_*"]}}})
    exposed = pod([container(env={"ASCEND_VISIBLE_DEVICES": "0"})])
    assert evaluate(expression, object=exposed) is True
    assert (
        evaluate(expression, object=pod([container(env={"NVIDIA_VISIBLE_DEVICES": "0"})])) is False
    )
    # A prefix reaches a wildcard both ways: it begins the stem, or extends past it.
    for prefix, sent in (("ASC", True), ("ASCEND_VISIBLE_", True), ("ASCENT", False)):
        assert evaluate(expression, object=pod([container(prefix=prefix)])) is sent


def node(name: str, annotations=None, labels=None, unschedulable=False) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(annotations or {}),
            "labels": dict(labels or {"kubernetes.io/hostname": name}),
        },
        "spec": {"unschedulable": unschedulable},
    }


def request(user: str, node_name: str | None, operation: str = "UPDATE") -> dict:
    extra = {NODE_NAME_KEY: [node_name]} if node_name else {}
    return {"userInfo": {"username": user, "extra": extra}, "operation": operation}


def admit(policy: dict, old: dict | None, new: dict, req: dict) -> list[str]:
    """The messages of the failed validations ([] = allowed); [] too when the policy skips."""
    spec = policy["spec"]
    bound = {"object": new, "oldObject": old, "request": req}
    if not all(evaluate(c["expression"], **bound) for c in spec["matchConditions"]):
        return []
    variables: dict = {}
    for variable in spec["variables"]:
        variables[variable["name"]] = evaluate(
            variable["expression"].replace("variables.", "v_"),
            **bound,
            **{f"v_{k}": v for k, v in variables.items()},
        )
    failed = []
    for validation in spec["validations"]:
        expression = validation["expression"].replace("variables.", "v_")
        if not evaluate(expression, **bound, **{f"v_{k}": v for k, v in variables.items()}):
            failed.append(validation.get("message") or validation.get("messageExpression"))
    return failed


@pytest.fixture(scope="module")
def policy() -> dict:
    return one(
        render(EVERYTHING), "ValidatingAdmissionPolicy", f"{RELEASE}-xpushare-node-agent-scope"
    )


def test_agent_may_publish_its_own_inventory(policy):
    old = node("n1", {"keep": "1", "xpushare.io/inventory-nvidia": "a"})
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["xpushare.io/inventory-nvidia"] = "b"
    new["metadata"]["annotations"]["xpushare.io/handoff"] = "{}"
    new["metadata"]["labels"]["xpushare.io/nvidia.count"] = "8"
    assert admit(policy, old, new, request(AGENT, "n1")) == []
    del new["metadata"]["annotations"]["xpushare.io/inventory-nvidia"]
    assert admit(policy, old, new, request(AGENT, "n1")) == []


def test_agent_may_not_touch_another_node(policy):
    old = node("n2")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["xpushare.io/inventory-nvidia"] = "forged"
    failed = admit(policy, old, new, request(AGENT, "n1"))
    assert len(failed) == 1 and "own node" in failed[0]


@pytest.mark.parametrize(
    "change",
    [
        lambda n: n["metadata"]["annotations"].update({"other.io/x": "1"}),
        lambda n: n["metadata"]["annotations"].pop("keep"),
        lambda n: n["metadata"]["labels"].update({"node-role.kubernetes.io/gpu": ""}),
        lambda n: n["spec"].update({"unschedulable": True}),
    ],
    ids=["foreign-annotation", "removed-annotation", "foreign-label", "spec"],
)
def test_agent_may_change_only_xpushare_keys_on_its_node(policy, change):
    old = node("n1", {"keep": "1"})
    new = copy.deepcopy(old)
    change(new)
    assert len(admit(policy, old, new, request(AGENT, "n1"))) == 1


def test_a_token_without_node_name_is_refused_and_others_are_not_judged(policy):
    old = node("n1")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["xpushare.io/handoff"] = "{}"
    failed = admit(policy, old, new, request(AGENT, None))
    assert any("names no node" in m for m in failed)
    # Other users (kubelet, the scheduler) are outside the policy.
    new["spec"]["unschedulable"] = True
    other = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-xpushare-scheduler"
    assert admit(policy, old, new, request(other, None)) == []


# -- the handoff Lease: the agents only read it ---------------------------------------------


def test_no_policy_is_needed_for_leases_the_agents_cannot_write():
    # The agents' RBAC gives "get leases" only (test_deploy_rbac.py); the policy that once
    # narrowed their Lease writes to their own node's handoff is gone with the writes.
    names = [p["metadata"]["name"] for p in find(render(EVERYTHING), "ValidatingAdmissionPolicy")]
    assert f"{RELEASE}-xpushare-node-agent-scope-handoff" not in names
    assert f"{RELEASE}-xpushare-node-agent-scope" in names


# -- the allocation record: only the scheduler writes it (issue 31) -----------------------------

SCHEDULER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-xpushare-scheduler"
TENANT = "system:serviceaccount:ml:trainer"
KUBELET = "system:node:n1"
HAMI_SCHEDULER = "system:serviceaccount:kube-system:hami-scheduler"
RECORD = '{"node":"n1","containers":[]}'


def record_policy(values=None) -> dict:
    return one(render(values), "ValidatingAdmissionPolicy", f"{RELEASE}-xpushare-allocation-record")


def bound_pod(annotations=None, labels=None) -> dict:
    obj = pod(annotations=annotations or {})
    obj["metadata"]["labels"] = dict(labels or {})
    obj["spec"]["nodeName"] = "n1"
    return obj


def changed(obj: dict, annotations: dict[str, str | None]) -> dict:
    """*obj* with *annotations* set (None: removed)."""
    new = copy.deepcopy(obj)
    for key, value in annotations.items():
        if value is None:
            new["metadata"]["annotations"].pop(key, None)
        else:
            new["metadata"]["annotations"][key] = value
    return new


def binding(annotations=None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "annotations": dict(annotations or {})},
        "target": {"kind": "Node", "name": "n1"},
    }


def record_admit(old, new, user, operation="UPDATE", values=None) -> list[str]:
    return admit(record_policy(values), old, new, request(user, None, operation))


def test_the_record_policy_is_on_by_default_and_guards_the_codec_keys():
    from xpushare.codec import ASSIGNMENT_KEY, FENCED_KEY, HAMI_KEYS, hami_keys

    policy = record_policy()
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {"pods", "pods/status", "pods/binding", "bindings"} <= set(rules[0]["resources"])
    binding_ = one(render(), "ValidatingAdmissionPolicyBinding", policy["metadata"]["name"])
    assert binding_["spec"]["validationActions"] == ["Deny"]
    keys = [ASSIGNMENT_KEY, FENCED_KEY, "hami.io/vgpu-node"]
    keys += [k.allocated for k in HAMI_KEYS.values()]
    keys += [
        hami_keys("ascend", "Ascend910B3").allocated,
        hami_keys("iluvatar", "MR-V100").allocated,
    ]
    for key in keys:
        assert record_admit(bound_pod(), bound_pod({key: "x"}), TENANT), key
    off = render({"scheduler": {"allocationPolicy": {"enabled": False}}})
    assert [p["metadata"]["name"] for p in find(off, "ValidatingAdmissionPolicy")] == [
        f"{RELEASE}-xpushare-node-agent-scope",
    ]


def test_the_scheduler_binds_and_fences_with_its_record():
    pending = pod()
    assert (
        record_admit(None, binding({"xpushare.io/assignment": RECORD}), SCHEDULER, "CREATE") == []
    )
    bound = bound_pod({"xpushare.io/assignment": RECORD})
    assert record_admit(bound, changed(bound, {"xpushare.io/fenced-by-term": "3"}), SCHEDULER) == []
    assert record_admit(pending, pending, SCHEDULER) == []


@pytest.mark.parametrize(
    "edit",
    [
        {"xpushare.io/assignment": None},
        {"xpushare.io/assignment": '{"node":"n1","containers":[{"forged":1}]}'},
        {"xpushare.io/fenced-by-term": "99"},
        {"hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,40000,100:;"},
    ],
    ids=["remove", "rewrite", "fence", "add-hami"],
)
def test_a_tenant_may_not_touch_the_record_of_a_bound_pod(edit):
    bound = bound_pod({"xpushare.io/assignment": RECORD, "team": "ml"})
    (message,) = record_admit(bound, changed(bound, edit), TENANT)
    assert "may not set, change or remove" in message


def test_a_tenant_may_not_add_a_record_to_a_pod_the_default_scheduler_bound():
    plain = bound_pod()
    assert record_admit(plain, changed(plain, {"xpushare.io/assignment": RECORD}), TENANT)
    hami = changed(
        plain, {"hami.io/vgpu-node": "n1", "hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,1,1:;"}
    )
    assert record_admit(plain, hami, TENANT)
    ascend = changed(plain, {"hami.io/Ascend910B3-devices-allocated": "x"})
    assert record_admit(plain, ascend, TENANT)


def test_a_tenant_may_change_everything_else():
    bound = bound_pod({"xpushare.io/assignment": RECORD, "team": "ml"}, {"app": "a"})
    relabelled = copy.deepcopy(bound)
    relabelled["metadata"]["labels"]["app"] = "b"
    assert record_admit(bound, relabelled, TENANT) == []
    # Request hints (ours and HAMi's) and what HAMi's device plugin rewrites at Allocate.
    hinted = changed(
        bound,
        {
            "team": None,
            "xpushare.io/use-model": "A100",
            "hami.io/node-scheduler-policy": "spread",
            "hami.io/vgpu-devices-to-allocate": ";",
            "hami.io/bind-phase": "success",
        },
    )
    assert record_admit(bound, hinted, TENANT) == []
    # kubelet's status update carries the record unchanged.
    assert record_admit(bound, bound, KUBELET) == []


def test_a_new_pod_or_binding_with_a_record_is_refused_unless_the_scheduler_sends_it():
    """The webhook removes a copied assignment before this policy sees the pod; where the
    webhook is skipped (ignore label, excluded namespace) the policy refuses it."""
    copied = pod(annotations={"xpushare.io/assignment": RECORD})
    assert record_admit(None, copied, TENANT, "CREATE")
    assert (
        record_admit(None, pod(annotations={"xpushare.io/use-model": "A100"}), TENANT, "CREATE")
        == []
    )
    assert record_admit(None, binding({"xpushare.io/assignment": RECORD}), TENANT, "CREATE")
    assert record_admit(None, binding(), "system:kube-scheduler", "CREATE") == []


def test_hamis_scheduler_writes_its_keys_when_the_operator_allows_it():
    values = {"scheduler": {"allocationPolicy": {"allowedUsers": [HAMI_SCHEDULER]}}}
    plain = bound_pod()
    hami = changed(
        plain, {"hami.io/vgpu-node": "n1", "hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,1,1:;"}
    )
    assert record_admit(plain, hami, HAMI_SCHEDULER) != []
    assert record_admit(plain, hami, HAMI_SCHEDULER, values=values) == []
    assert record_admit(
        plain, changed(plain, {"xpushare.io/assignment": RECORD}), TENANT, values=values
    )
