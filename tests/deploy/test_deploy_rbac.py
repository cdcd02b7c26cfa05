"""The chart's RBAC grants each component exactly the API calls its code makes.

The calls are found in the code itself (apicalls.py), so a new call without a rule, or a rule
no call uses any more, fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from apicalls import Permission, permission, permissions_needed, requests_in_source
from chartkit import CHART, EVERYTHING, NAMESPACE, RELEASE, REPO, config_file, find, render

CORE = REPO / "core" / "src" / "xpushare"

#: Service account -> the code that runs under it.
COMPONENTS: dict[str, list[Path]] = {
    f"{RELEASE}-xpushare-scheduler": [CORE / "scheduler"],
    f"{RELEASE}-xpushare-node": [CORE / "node"],
    f"{RELEASE}-xpushare-certgen": [CHART / "files" / "certgen.py"],
}


def granted(objects: list[dict], account: str) -> dict[Permission, list[dict]]:
    """Every triple the rendered roles bound to *account* grant, with the granting role."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}
    grants: dict[Permission, list[dict]] = {}
    for binding in find(objects, "RoleBinding") + find(objects, "ClusterRoleBinding"):
        subjects = binding.get("subjects") or []
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account for s in subjects):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], namespace, ref["name"]))
        assert role is not None, f"{account} is bound to {ref['kind']} {ref['name']}, not ours"
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), f"wildcard in {ref['name']}"
                        grants.setdefault(Permission(group, resource, verb), []).append(
                            dict(role=role, rule=rule)
                        )
    return grants


#: The node agent's and the scheduler's calls include DRA mode's (docs/dra.md), granted only
#: when some node runs in that mode.
EVERYTHING_DRA = {**EVERYTHING, "nodeAgent": {**EVERYTHING["nodeAgent"], "mode": "dra"}}


@pytest.mark.parametrize("account", sorted(COMPONENTS))
def test_rbac_is_exactly_what_the_code_calls(account):
    objects = render(EVERYTHING if account.endswith("-certgen") else EVERYTHING_DRA)
    needed = permissions_needed(COMPONENTS[account])
    assert needed, f"no API call found for {account}: the scanner is broken"
    have = set(granted(objects, account))
    missing, unused = sorted(needed - have), sorted(have - needed)
    assert not missing, f"{account} calls the API without RBAC for: {missing}"
    assert not unused, f"{account} is granted what its code never calls: {unused}"


def test_the_scheduler_calls_found_are_the_known_ones():
    """Anchors the scanner against the calls the scheduler makes today."""
    needed = permissions_needed(COMPONENTS[f"{RELEASE}-xpushare-scheduler"])
    for triple in (
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "pods", "watch"),
        ("", "pods/binding", "create"),
        ("", "events", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("coordination.k8s.io", "leases", "watch"),
        ("coordination.k8s.io", "leases", "patch"),
        ("resource.k8s.io", "resourceclaims", "watch"),
        ("resource.k8s.io", "resourceslices", "list"),
    ):
        assert Permission(*triple) in needed


def test_namespaced_grants_are_scoped_to_the_objects_the_code_names():
    objects = render(EVERYTHING)
    leader = config_file(objects, "scheduler.yaml")["leader"]
    grants = granted(objects, f"{RELEASE}-xpushare-scheduler")
    (grant,) = grants[Permission("coordination.k8s.io", "leases", "update")]
    assert grant["role"]["kind"] == "Role"
    assert grant["role"]["metadata"]["namespace"] == leader["namespace"] == NAMESPACE
    assert grant["rule"]["resourceNames"] == [leader["name"]]
    # The handoff Leases (handoff.<node>) cannot be named ahead: every Lease of the release's
    # namespace, and of no other (scheduler/handoffbook.py).
    handoff_namespace = config_file(objects, "scheduler.yaml")["bind"]["handoff_namespace"]
    for verb in ("get", "list", "watch", "patch", "create"):
        (grant,) = grants[Permission("coordination.k8s.io", "leases", verb)]
        assert grant["role"]["kind"] == "Role"
        assert grant["role"]["metadata"]["namespace"] == handoff_namespace == NAMESPACE
    secret = f"{RELEASE}-xpushare-webhook-tls"
    for verb in ("get", "patch"):
        (grant,) = grants_of_certgen(objects)[Permission("", "secrets", verb)]
        assert grant["rule"]["resourceNames"] == [secret]


def grants_of_certgen(objects):
    return granted(objects, f"{RELEASE}-xpushare-certgen")


def test_node_agent_writes_nothing_but_nodes():
    objects = render(EVERYTHING)
    grants = granted(objects, f"{RELEASE}-xpushare-node")
    writes = {p for p in grants if p.verb not in ("get", "list", "watch")}
    # Nodes only (its inventory), narrowed to its own by the node-agent-scope policy
    # (test_deploy_cel.py); no pod and no Lease: the handoff is read, never written.
    assert writes == {Permission("", "nodes", "patch")}
    # Leases read only in the release's namespace, where the handoff Leases are; the agent is
    # told that namespace (XPUSHARE_HANDOFF_NAMESPACE).
    (grant,) = grants[Permission("coordination.k8s.io", "leases", "get")]
    assert grant["role"]["kind"] == "Role"
    assert grant["role"]["metadata"]["namespace"] == NAMESPACE
    daemonset = next(d for d in find(objects, "DaemonSet"))
    env = {
        e["name"]: e.get("value")
        for e in daemonset["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["XPUSHARE_HANDOFF_NAMESPACE"] == NAMESPACE


def test_kube_scheduler_has_its_own_account_with_the_built_in_roles():
    objects = render(EVERYTHING)
    account = f"{RELEASE}-xpushare-kube-scheduler"
    refs = {
        b["roleRef"]["name"]
        for b in find(objects, "ClusterRoleBinding")
        if any(s["name"] == account for s in b["subjects"])
    }
    assert refs == {"system:kube-scheduler", "system:volume-scheduler"}
    deployment = next(d for d in find(objects, "Deployment") if d["metadata"]["name"] == account)
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account


# -- the scanner itself: these make the comparison above mean something --------------------


def test_scanner_sees_a_new_generated_client_call():
    source = """
class K:
    def __init__(self, api_client):
        self._core = client.CoreV1Api(api_client)
        self.cluster = Cluster()

    async def evict(self, ns, name):
        self.cluster.delete_node(name)  # a method of our own with a client method's name
        return await self._core.delete_namespaced_pod_without_preload_content(name, ns)

def annotated(core: "CoreV1Api"):
    core.patch_namespaced_secret("a", "b", {})
"""
    found = {permission(r) for r in requests_in_source(source)}
    assert found == {Permission("", "pods", "delete"), Permission("", "secrets", "patch")}


def test_scanner_sees_raw_requests_through_helpers_and_variables():
    source = """
class K:
    def _lease_path(self, ns, name):
        return f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}"

    async def renew(self):
        await self._call("PUT", self._lease_path("a", "b"), body={})

    async def status(self, name):
        path = f"/api/v1/nodes/{name}/status"
        await self._call("PATCH", path, what="x")

    async def watch_pods(self):
        await self._call("GET", "/api/v1/pods", query=[("watch", "true")])

    async def bind(self, ns, name):
        await self._call("POST", _pod_path(ns, name) + "/binding", "bind")


def _pod_path(namespace, name):
    return f"/api/v1/namespaces/{_part(namespace)}/pods/{_part(name)}"
"""
    found = {permission(r) for r in requests_in_source(source)}
    assert found == {
        Permission("coordination.k8s.io", "leases", "update"),
        Permission("", "nodes/status", "patch"),
        Permission("", "pods", "watch"),
        Permission("", "pods/binding", "create"),
    }


def test_scanner_marks_lists_as_watches_where_the_module_watches():
    source = """
class K:
    def __init__(self):
        self._core = client.CoreV1Api()

    def lister(self):
        return self._core.list_node_without_preload_content

    async def watch(self):
        await self.lister()(watch=True)
"""
    found = {permission(r) for r in requests_in_source(source)}
    assert found == {Permission("", "nodes", "list"), Permission("", "nodes", "watch")}
