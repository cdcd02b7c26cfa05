"""The chart's DRA mode, and the claim templates of docs/dra.md."""

from __future__ import annotations

import re

import pytest
import yaml
from chartkit import REPO, config_file, find, render, strip
from kubernetes.client import ApiClient

kubernetes_validate = pytest.importorskip("kubernetes_validate")

#: resource.k8s.io/v1 is GA from 1.34; the newest schemas shipped.
DRA_KUBE_VERSIONS = ("1.34.0", "1.37.0")

DRA = {
    "nodeAgent": {"mode": "dra", "dra": {"extendedResourceName": True}},
    "vendors": {"nvidia": {"enabled": True}, "mock": {"enabled": True}},
}


def test_dra_mode_renders_and_validates_against_the_1_34_and_1_37_schemas():
    objects = render(DRA)
    for obj in objects:
        where = f"{obj['kind']} {obj['metadata']['name']} ({obj['__template']})"
        if obj["apiVersion"].startswith("cert-manager") or obj["apiVersion"].startswith(
            "monitoring.coreos.com"
        ):
            continue
        for version in DRA_KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(strip(obj), version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where} is invalid for Kubernetes {version}: {exc.message}")


def test_dra_mode_has_a_device_class_per_vendor_and_the_agent_flags_and_mounts():
    objects = render(DRA)
    classes = {c["metadata"]["name"]: c["spec"] for c in find(objects, "DeviceClass")}
    assert set(classes) == {"nvidia.xpushare.io", "mock.xpushare.io"}
    nvidia = classes["nvidia.xpushare.io"]
    assert nvidia["selectors"] == [{"cel": {"expression": "device.driver == 'nvidia.xpushare.io'"}}]
    assert nvidia["extendedResourceName"] == "nvidia.com/gpu"
    for ds in find(objects, "DaemonSet"):
        if "node" not in ds["metadata"]["name"]:
            continue
        agent = ds["spec"]["template"]["spec"]["containers"][0]
        assert "--mode=dra" in agent["args"]
        mounts = {m["mountPath"] for m in agent["volumeMounts"]}
        assert {
            "/var/lib/kubelet/plugins_registry",
            "/var/lib/kubelet/plugins",
            "/var/run/cdi",
        } <= mounts


def test_device_plugin_mode_has_no_dra_objects_or_grants():
    objects = render(None)
    assert find(objects, "DeviceClass") == []
    for role in find(objects, "ClusterRole"):
        for rule in role["rules"]:
            assert "resource.k8s.io" not in rule.get("apiGroups", [])
    for ds in find(objects, "DaemonSet"):
        for container in ds["spec"]["template"]["spec"]["containers"]:
            assert "--mode=dra" not in container.get("args", [])


def templates_in_docs():
    text = (REPO / "docs" / "dra.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    return {b["metadata"]["name"]: b for b in blocks if b.get("kind") == "ResourceClaimTemplate"}


def model(obj):
    return ApiClient()._ApiClient__deserialize(obj, "V1ResourceClaimTemplate")


def test_the_three_templates_of_the_docs_parse_into_the_official_models():
    found = templates_in_docs()
    assert set(found) == {"a100-8gi-30pct", "two-gpus-one-nvlink-island", "any-gpu-40gi"}

    (share,) = model(found["a100-8gi-30pct"]).spec.spec.devices.requests
    assert share.exactly.device_class_name == "nvidia.xpushare.io"
    assert share.exactly.capacity.requests == {"memory": "8Gi", "cores": "30"}
    assert 'model.contains("A100")' in share.exactly.selectors[0].cel.expression

    island = model(found["two-gpus-one-nvlink-island"]).spec.spec.devices
    assert island.requests[0].exactly.count == 2
    assert island.requests[0].exactly.capacity is None  # whole devices: the policy default
    assert island.constraints[0].match_attribute == "nvidia.xpushare.io/linkIsland"

    (big,) = model(found["any-gpu-40gi"]).spec.spec.devices.requests
    assert 'quantity("40Gi")' in big.exactly.selectors[0].cel.expression


def test_the_templates_name_attributes_and_capacities_the_slices_publish():
    from xpushare.models import Device, LinkKind, TopologyLink
    from xpushare.node.devices import VendorDevices
    from xpushare.node.dra.slices import pool_devices

    devices = VendorDevices("nvidia")
    peer = TopologyLink(peer="GPU-1", kind=LinkKind.NVLINK)
    devices.set_detected(
        [
            Device(
                vendor="nvidia", id="GPU-0", index=0, model="A100", memory_mib=81920, links=(peer,)
            ),
            Device(vendor="nvidia", id="GPU-1", index=1, model="A100", memory_mib=81920),
        ]
    )
    (first, _) = pool_devices(devices.view)
    text = (REPO / "docs" / "dra.md").read_text()
    for name in re.findall(r'device\.attributes\["nvidia\.xpushare\.io"\]\.(\w+)', text):
        assert name in first["attributes"]
    for name in re.findall(r'device\.capacity\["nvidia\.xpushare\.io"\]\.(\w+)', text):
        assert name in first["capacity"]
    assert "linkIsland" in first["attributes"]
    for template in templates_in_docs().values():
        for request in template["spec"]["spec"]["devices"]["requests"]:
            for cap in (request["exactly"].get("capacity") or {}).get("requests", {}):
                assert cap in first["capacity"]


# -- one mode per node -------------------------------------------------------------------------

PER_NODE = {
    "nodeAgent": {"perNodeMode": {"enabled": True}},
    "vendors": {"nvidia": {"enabled": True}, "mock": {"enabled": True}},
}


def agents(objects):
    return {
        ds["metadata"]["name"]: ds
        for ds in find(objects, "DaemonSet")
        if ds["metadata"]["labels"].get("app.kubernetes.io/component") == "node-agent"
    }


def mode_term(ds):
    terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    (term,) = terms
    (expression,) = term["matchExpressions"]
    return expression


@pytest.mark.parametrize("default", ["device-plugin", "dra"])
@pytest.mark.parametrize("layout", ["per-vendor", "combined"])
def test_per_node_mode_runs_each_agent_in_both_modes_on_complementary_nodes(default, layout):
    values = {**PER_NODE, "nodeAgent": {**PER_NODE["nodeAgent"], "mode": default, "layout": layout}}
    objects = render(values)
    other = "dra" if default == "device-plugin" else "device-plugin"
    found = agents(objects)
    bases = (
        ["xs-xpushare-node"]
        if layout == "combined"
        else [
            "xs-xpushare-node-mock",
            "xs-xpushare-node-nvidia",
        ]
    )
    assert set(found) == {n for b in bases for n in (b, f"{b}-{other}")}
    for base in bases:
        for name, mode, operator in ((base, default, "NotIn"), (f"{base}-{other}", other, "In")):
            ds = found[name]
            assert ds["metadata"]["labels"]["xpushare.io/node-mode"] == mode
            # A node without the label runs the default mode; one labelled with the other
            # mode runs only that one: no node ever gets both agents of a vendor.
            assert mode_term(ds) == {
                "key": "xpushare.io/node-mode",
                "operator": operator,
                "values": [other],
            }
            agent = ds["spec"]["template"]["spec"]["containers"][0]
            assert ("--mode=dra" in agent["args"]) == (mode == "dra")
            mounts = {m["mountPath"] for m in agent["volumeMounts"]}
            assert ("/var/run/cdi" in mounts) == (mode == "dra")
            selector = ds["spec"]["selector"]["matchLabels"]
            assert selector["xpushare.io/agent"] == name, "each DaemonSet owns only its pods"
    # DRA's objects exist whichever mode is the default: some nodes serve DRA.
    classes = {c["metadata"]["name"] for c in find(objects, "DeviceClass")}
    assert classes == {"nvidia.xpushare.io", "mock.xpushare.io"}


def test_per_node_mode_validates_and_its_agents_parse_with_the_real_command(tmp_path):
    from xpushare.cli.node_cmd import command as node_command

    objects = render(PER_NODE)
    for obj in agents(objects).values():
        for version in DRA_KUBE_VERSIONS:
            kubernetes_validate.validate(strip(obj), version, strict=True)
    vendor_file = tmp_path / "node-vendors.yaml"
    vendor_file.write_text(yaml.safe_dump(config_file(objects, "node-vendors.yaml")))
    modes = set()
    for ds in agents(objects).values():
        args = [
            a.replace("/etc/xpushare/config/node-vendors.yaml", str(vendor_file))
            for a in ds["spec"]["template"]["spec"]["containers"][0]["args"][1:]
        ]
        ctx = node_command.make_context("node", [*args, "--node-name", "n1"])
        modes.add(ctx.params["mode"])
    assert modes == {"device-plugin", "dra"}


def test_without_per_node_mode_agents_have_no_mode_affinity():
    for ds in agents(render(DRA)).values():
        assert "affinity" not in ds["spec"]["template"]["spec"]


# -- the scheduler in DRA mode -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "enabled"),
    [(None, False), (DRA, True), (PER_NODE, True)],
    ids=["dp", "dra", "per-node"],
)
def test_the_scheduler_books_claims_and_kube_scheduler_asks_it_about_dra_pods(
    values, enabled, tmp_path
):
    from xpushare.scheduler.config import load_config

    objects = render(values)
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(config_file(objects, "scheduler.yaml")))
    assert load_config(path, environ={}).dra.enabled is enabled
    extenders = config_file(objects, "kube-scheduler.yaml")["extenders"]
    dra = [e for e in extenders if e.get("filterVerb") == "dra/filter"]
    grants = {
        (group, resource, verb)
        for role in find(objects, "ClusterRole")
        if role["metadata"]["name"] == "xs-xpushare-scheduler"
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    watched = {
        ("resource.k8s.io", r, v)
        for r in ("resourceclaims", "resourceslices")
        for v in ("list", "watch")
    }
    if not enabled:
        assert dra == [] and not grants & watched
        return
    assert watched <= grants
    (entry,) = dra
    # No managedResources: DRA pods name claims, not resources, and an entry that lists
    # resources is asked only about pods that name one.
    assert "managedResources" not in entry
    assert entry["prioritizeVerb"] == "dra/prioritize" and entry["weight"] > 0
    assert "bindVerb" not in entry and entry["ignorable"] is True
    assert sum("bindVerb" in e for e in extenders) == 1, "kube-scheduler allows one binder"
