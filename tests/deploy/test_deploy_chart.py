"""The chart renders for the defaults and representative values, and every object is valid."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from chartkit import (
    CHART,
    CRD_GROUPS,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    REPO,
    SCENARIOS,
    config_file,
    find,
    helm,
    one,
    render,
    strip,
)
from cryptography import x509

kubernetes_validate = pytest.importorskip("kubernetes_validate")


def rendered(scenario: str) -> list[dict]:
    return render(SCENARIOS[scenario])


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_object_validates_against_the_kubernetes_schemas(scenario):
    objects = rendered(scenario)
    assert objects
    for obj in objects:
        api = obj["apiVersion"]
        where = f"{obj['kind']} {obj['metadata']['name']} ({obj['__template']})"
        if api.startswith(CRD_GROUPS):
            # CRD kinds: no OpenAPI schema ships for them; check the envelope.
            assert obj["metadata"]["namespace"] == NAMESPACE, where
            assert isinstance(obj.get("spec"), dict), where
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(strip(obj), version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where} is invalid for Kubernetes {version}: {exc.message}")


def test_the_validator_is_strict_about_unknown_fields():
    """Validation above means something: a misspelt field is refused."""
    service = strip(one(rendered("defaults"), "Service", f"{RELEASE}-xpushare-scheduler"))
    service["spec"]["portz"] = service["spec"].pop("ports")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, KUBE_VERSIONS[0], strict=True)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_helm_lint_is_clean(scenario):
    helm_python = helm()
    report = helm_python.lint(
        str(CHART), SCENARIOS[scenario], strict=True, namespace=NAMESPACE, kube_version="v1.30.0"
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert problems == []


def test_values_schema_refuses_what_the_api_server_would():
    helm_python = helm()
    for bad in (
        {"webhook": {"timeoutSeconds": 10}},
        {"webhook": {"failurePolicy": "Sometimes"}},
        {"scheduler": {"mode": "both"}},
        {"vendors": {"nvidia": {"enabled": True, "resources": ["no slash"]}}},
        {"nodeAgent": {"layaut": "combined"}},
    ):
        with pytest.raises(helm_python.HelmError):
            render(bad)


def test_webhook_sees_only_pods_that_ask_for_managed_resources():
    objects = rendered("everything")
    webhook = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]
    assert webhook["timeoutSeconds"] <= 5
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["sideEffects"] == "None"
    assert webhook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        },
        # kubectl debug adds containers to running pods: the webhook must see them too.
        {
            "operations": ["UPDATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods/ephemeralcontainers"],
            "scope": "Namespaced",
        },
    ]
    assert webhook["clientConfig"]["service"] == {
        "namespace": NAMESPACE,
        "name": f"{RELEASE}-xpushare-scheduler",
        "path": "/mutate",
        "port": 443,
    }
    expression = webhook["matchConditions"][0]["expression"]
    for name in ("nvidia.com/gpumem", "huawei.com/Ascend910B3", "xpushare.io/mock-gpu"):
        assert f'"{name}"' in expression
    assert "initContainers" in expression and "ephemeralContainers" in expression
    excluded = webhook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn"
    assert {NAMESPACE, "kube-system"} <= set(excluded["values"])
    assert webhook["objectSelector"]["matchExpressions"][0]["values"] == ["ignore"]


def test_allowed_namespaces_and_failure_policy_follow_values():
    objects = rendered("extender-beside-existing-scheduler")
    webhook = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]
    assert webhook["failurePolicy"] == "Ignore"
    allowed = webhook["namespaceSelector"]["matchExpressions"][1]
    assert allowed == {
        "key": "kubernetes.io/metadata.name",
        "operator": "In",
        "values": ["ml", "research"],
    }


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_self_generated_tls_serves_the_service_name_under_the_webhooks_ca():
    objects = rendered("defaults")
    secret = one(objects, "Secret", f"{RELEASE}-xpushare-webhook-tls")
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    webhook = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]
    ca_bundle = base64.b64decode(webhook["clientConfig"]["caBundle"])
    assert ca_bundle == data["ca.crt"]
    ca, leaf = _cert(data["ca.crt"]), _cert(data["tls.crt"])
    leaf.verify_directly_issued_by(ca)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    host = f"{RELEASE}-xpushare-scheduler.{NAMESPACE}.svc"
    assert host in names.get_values_for_type(x509.DNSName)
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    assert dt.timedelta(days=364) < lifetime < dt.timedelta(days=367)
    # kube-scheduler verifies the extender with the same CA and the Service name.
    kube_scheduler = config_file(objects, "kube-scheduler.yaml")
    tls = kube_scheduler["extenders"][0]["tlsConfig"]
    assert tls == {"caFile": "/etc/xpushare/tls/ca.crt", "serverName": host}
    # The scheduler's pod never sees the CA key.
    deployment = one(objects, "Deployment", f"{RELEASE}-xpushare-scheduler")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    volume = next(v for v in volumes if v["name"] == "tls")
    assert {i["key"] for i in volume["secret"]["items"]} == {"tls.crt", "tls.key"}


def test_cert_manager_mode_uses_a_certificate_and_ca_injection():
    objects = rendered("cert-manager-combined-amd-nvidia")
    assert find(objects, "Secret") == []
    assert find(objects, "CronJob") == []
    certificate = one(objects, "Certificate", f"{RELEASE}-xpushare-webhook")
    assert certificate["spec"]["secretName"] == f"{RELEASE}-xpushare-webhook-tls"
    webhook_config = one(objects, "MutatingWebhookConfiguration")
    annotation = webhook_config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert annotation == f"{NAMESPACE}/{RELEASE}-xpushare-webhook"
    assert "caBundle" not in webhook_config["webhooks"][0]["clientConfig"]


def test_kube_scheduler_mode_runs_a_second_scheduler_with_the_extender():
    objects = rendered("everything")
    config = config_file(objects, "kube-scheduler.yaml")
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["profiles"] == [{"schedulerName": "xpushare-scheduler"}]
    (extender,) = config["extenders"]
    assert extender["filterVerb"] == "filter"
    assert extender["prioritizeVerb"] == "prioritize" and extender["weight"] > 0
    assert extender["bindVerb"] == "bind"
    assert extender["nodeCacheCapable"] is True
    managed = {m["name"]: m["ignoredByScheduler"] for m in extender["managedResources"]}
    # Device counts are in node allocatable (kubelet's device plugins): the in-tree fit checks
    # them; memory and compute never are, so it must ignore them.
    assert managed["nvidia.com/gpu"] is False and managed["cambricon.com/vmlu"] is False
    assert managed["nvidia.com/gpumem"] is True and managed["amd.com/gpucores"] is True
    assert sum(not ignored for ignored in managed.values()) == 9  # one count per vendor
    deployment = one(objects, "Deployment", f"{RELEASE}-xpushare-kube-scheduler")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("registry.k8s.io/kube-scheduler:v1.")
    assert "--config=/etc/xpushare/config/kube-scheduler.yaml" in container["command"]


def test_filter_workers_get_their_own_extender_port_and_service_port():
    values = {"scheduler": {"filterWorkers": 1}}
    objects = render(values)
    config = config_file(objects, "kube-scheduler.yaml")
    filtering, binding = config["extenders"]
    host = f"{RELEASE}-xpushare-scheduler.{NAMESPACE}.svc"
    assert filtering["urlPrefix"] == f"https://{host}:8444"
    assert (filtering["filterVerb"], filtering["prioritizeVerb"]) == ("filter", "prioritize")
    assert "bindVerb" not in filtering and filtering["managedResources"]
    assert binding["urlPrefix"] == f"https://{host}:443" and binding["bindVerb"] == "bind"
    # A resource may be managed by one extender only (kube-scheduler refuses duplicates).
    assert "managedResources" not in binding and "filterVerb" not in binding
    assert filtering["tlsConfig"] == binding["tlsConfig"]
    scheduler = config_file(objects, "scheduler.yaml")
    assert scheduler["server"]["filter_workers"] == 1
    assert scheduler["server"]["filter_port"] == 8444
    deployment = one(objects, "Deployment", f"{RELEASE}-xpushare-scheduler")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "filter", "containerPort": 8444, "protocol": "TCP"} in container["ports"]
    service = one(objects, "Service", f"{RELEASE}-xpushare-scheduler")
    assert {"name": "filter", "port": 8444, "targetPort": "filter", "protocol": "TCP"} in (
        service["spec"]["ports"]
    )
    # Without workers: one extender, no extra port.
    plain = render(None)
    assert len(config_file(plain, "kube-scheduler.yaml")["extenders"]) == 1
    service = one(plain, "Service", f"{RELEASE}-xpushare-scheduler")
    assert "filter" not in {p["name"] for p in service["spec"]["ports"]}


def test_filter_workers_are_refused_in_extender_mode():
    helm_python = helm()
    with pytest.raises(helm_python.HelmError, match=r"filterWorkers needs scheduler\.mode"):
        render({"scheduler": {"mode": "extender", "filterWorkers": 1}})


def test_kube_scheduler_configuration_agrees_with_the_extenders_example():
    """deploy/examples/kube-scheduler-config.yaml is the extender's own documented stanza."""
    import yaml

    example = yaml.safe_load((REPO / "deploy/examples/kube-scheduler-config.yaml").read_text())
    ours = config_file(rendered("defaults"), "kube-scheduler.yaml")
    assert ours["apiVersion"] == example["apiVersion"] and ours["kind"] == example["kind"]
    assert ours["profiles"] == example["profiles"]
    (mine,), (theirs,) = ours["extenders"], example["extenders"]
    for key in (
        "filterVerb",
        "prioritizeVerb",
        "bindVerb",
        "weight",
        "nodeCacheCapable",
        "enableHTTPS",
        "httpTimeout",
        "ignorable",
    ):
        assert mine[key] == theirs[key], key
    expected = {m["name"]: m["ignoredByScheduler"] for m in theirs["managedResources"]}
    got = {m["name"]: m["ignoredByScheduler"] for m in mine["managedResources"]}
    assert got == {k: v for k, v in expected.items() if k.startswith("nvidia.com/")}


def test_extender_mode_renders_no_kube_scheduler_but_a_stanza_to_paste():
    objects = rendered("extender-beside-existing-scheduler")
    assert find(objects, "Deployment", f"{RELEASE}-xpushare-kube-scheduler") == []
    assert config_file(objects, "scheduler.yaml")["scheduler_name"] == "default-scheduler"
    stanza = one(objects, "ConfigMap", f"{RELEASE}-xpushare-extender-config")
    import yaml

    (extender,) = yaml.safe_load(stanza["data"]["extender.yaml"])["extenders"]
    ca = _cert(base64.b64decode(extender["tlsConfig"]["caData"]))
    secret = one(objects, "Secret", f"{RELEASE}-xpushare-webhook-tls")
    assert ca == _cert(base64.b64decode(secret["data"]["ca.crt"]))


def test_one_node_agent_per_vendor_with_its_node_selector_and_host_paths():
    objects = rendered("everything")
    daemonsets = {d["metadata"]["name"]: d for d in find(objects, "DaemonSet")}
    assert set(daemonsets) == {
        f"{RELEASE}-xpushare-node-{v}"
        for v in (
            "amd",
            "ascend",
            "cambricon",
            "hygon",
            "iluvatar",
            "metax",
            "mock",
            "mthreads",
            "nvidia",
        )
    }
    nvidia = daemonsets[f"{RELEASE}-xpushare-node-nvidia"]["spec"]["template"]["spec"]
    assert nvidia["nodeSelector"] == {"kubernetes.io/os": "linux", "xpushare.io/nvidia": "true"}
    env = {e["name"]: e.get("value") for e in nvidia["containers"][0]["env"]}
    assert env["XPUSHARE_PLUGINS"] == "nvidia"
    host_paths = {v["hostPath"]["path"] for v in nvidia["volumes"] if "hostPath" in v}
    assert host_paths == {
        "/var/lib/kubelet/device-plugins",
        "/var/lib/kubelet/pod-resources",
        "/",
        "/usr/local/vgpu",
        "/tmp/hami",
    }
    mounts = {m["mountPath"]: m for m in nvidia["containers"][0]["volumeMounts"]}
    assert mounts["/driver-root"]["readOnly"] is True
    # The release waits for kubelet's word where it can have it: PodResources, read-only.
    assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True
    assert [c["name"] for c in nvidia["initContainers"]] == ["install-hami-core"]
    # A vendor without HAMi-core gets neither the directory nor the installer.
    amd = daemonsets[f"{RELEASE}-xpushare-node-amd"]["spec"]["template"]["spec"]
    assert "initContainers" not in amd
    assert "/usr/local/vgpu" not in {v.get("hostPath", {}).get("path") for v in amd["volumes"]}
    mock = daemonsets[f"{RELEASE}-xpushare-node-mock"]["spec"]["template"]["spec"]
    assert "privileged" not in mock["containers"][0]["securityContext"]
    assert mock["containers"][0]["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_combined_layout_serves_every_vendor_from_one_daemonset():
    objects = rendered("cert-manager-combined-amd-nvidia")
    (daemonset,) = find(objects, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["XPUSHARE_PLUGINS"] == "amd,nvidia"
    assert spec["nodeSelector"]["xpushare.io/managed"] == "true"
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert {"/opt/rocm", "/", "/usr/local/vgpu"} <= host_paths


def test_scheduler_runs_unprivileged_and_the_service_reaches_only_the_leader():
    objects = rendered("defaults")
    name = f"{RELEASE}-xpushare-scheduler"
    deployment = one(objects, "Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # Every synced replica is Ready; the Service selects the leader's label instead.
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz/replica"
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}) for e in container["env"]}
    assert env["XPUSHARE_SCHEDULER__LEADER__POD"] == {"fieldPath": "metadata.name"}
    assert env["XPUSHARE_SCHEDULER__LEADER__POD_NAMESPACE"] == {"fieldPath": "metadata.namespace"}
    assert container["args"] == ["scheduler", "--config", "/etc/xpushare/config/scheduler.yaml"]
    service = one(objects, "Service", name)
    assert service["spec"]["selector"]["xpushare.io/leader"] == "true"
    assert {p["name"] for p in service["spec"]["ports"]} == {"https"}
    metrics = one(objects, "Service", f"{name}-metrics")
    assert "xpushare.io/leader" not in metrics["spec"]["selector"]
    assert [p["name"] for p in metrics["spec"]["ports"]] == ["metrics"]
    # Two replicas: a budget keeps one of them through drains (both are Ready when synced).
    budget = one(objects, "PodDisruptionBudget", name)
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler"
    pdb = one(objects, "PodDisruptionBudget", f"{RELEASE}-xpushare-kube-scheduler")
    assert pdb["spec"]["minAvailable"] == 1


def test_one_scheduler_replica_gets_no_budget():
    objects = render({"scheduler": {"replicas": 1}})
    assert find(objects, "PodDisruptionBudget", f"{RELEASE}-xpushare-scheduler") == []


def test_optional_objects_appear_only_when_asked_for():
    defaults = rendered("defaults")
    everything = rendered("everything")
    assert find(defaults, "ServiceMonitor") == []
    assert find(everything, "ServiceMonitor")
    dashboards = [
        c for c in find(everything, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")
    ]
    assert dashboards and dashboards[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    policy = one(everything, "ValidatingAdmissionPolicy", f"{RELEASE}-xpushare-node-agent-scope")
    condition = policy["spec"]["matchConditions"][0]["expression"]
    assert f"system:serviceaccount:{NAMESPACE}:{RELEASE}-xpushare-node" in condition


POLICIES = (f"{RELEASE}-xpushare-node-agent-scope", f"{RELEASE}-xpushare-allocation-record")


def test_both_admission_policies_are_on_by_default_and_each_can_be_turned_off():
    """The node-scoped policy is "auto": on where the cluster is 1.32+ (the offline render's
    Kubernetes is newer), where the agent's token names its node by default."""
    defaults = rendered("defaults")
    for name in POLICIES:
        one(defaults, "ValidatingAdmissionPolicy", name)
        binding = one(defaults, "ValidatingAdmissionPolicyBinding", name)
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    off = render(
        {
            "nodeAgent": {"nodeScopedPolicy": {"enabled": False}},
            "scheduler": {"allocationPolicy": {"enabled": False}},
        }
    )
    assert find(off, "ValidatingAdmissionPolicy") == []
    assert find(off, "ValidatingAdmissionPolicyBinding") == []


@pytest.mark.parametrize("kube_version", ["v1.30.0", "v1.31.5", "v1.32.0"])
def test_the_defaults_install_on_every_supported_kubernetes(kube_version):
    helm_python = helm()
    report = helm_python.lint(
        str(CHART), None, strict=True, namespace=NAMESPACE, kube_version=kube_version
    )
    assert [m for m in report["messages"] if m["severity"] >= 2] + report["errors"] == []
