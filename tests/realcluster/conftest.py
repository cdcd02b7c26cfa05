"""The real control plane of the real-cluster suite: one per test session, shared by its tests.

Why session-scoped: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and our
scheduler take seconds to start on a shared 2-core machine; every test makes its own nodes and
pods (each test's pods are pinned to its own nodes by a nodeSelector), so they do not need a
fresh cluster each.

The binaries come from ``scripts/kube-binaries`` (``XPUSHARE_KUBE_BIN`` names another folder).
When they are missing the suite is skipped with the command that builds them, except under
``CI=true`` or with ``XPUSHARE_KUBE_BIN`` set, where a missing binary is a failure: .ci/run
builds them first and names the folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from xpushare.testing.realcluster import (
    ControlPlane,
    binaries_missing,
    extender_config,
    start_xpushare_scheduler,
    webhook_config,
)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "deploy"))

from chartkit import RELEASE, config_file, one, render, strip  # noqa: E402
from realkit import CHART_VALUES, PODS_NAMESPACE, SCHEDULER_SERVICE, SYSTEM_NAMESPACE, Installed  # noqa: E402

#: Bound of waits for controllers that act within a second on a working cluster (the
#: ServiceAccount controller making ``default``): only there so a broken start fails.
CONTROLLER_WAIT_S = 60.0


def kube_binaries_folder() -> Path:
    named = os.environ.get("XPUSHARE_KUBE_BIN")
    if named:
        return Path(named)
    answer = subprocess.run(
        [str(REPO / "scripts" / "kube-binaries"), "--print"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return Path(answer.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def kube_binaries() -> Path:
    folder = kube_binaries_folder()
    missing = binaries_missing(folder)
    if missing:
        message = (
            f"real-cluster suite: {', '.join(missing)} not built in {folder}. Build them once "
            "with `scripts/kube-binaries` (Go 1.26 and the module proxy; tens of minutes cold "
            "on 2 cores, cached after) or name a folder in XPUSHARE_KUBE_BIN."
        )
        # CI, and a folder named on purpose, must never pass by skipping the suite.
        if os.environ.get("CI") == "true" or os.environ.get("XPUSHARE_KUBE_BIN"):
            pytest.fail(message)
        pytest.skip(message)
    return folder


@pytest.fixture(scope="session")
def control_plane(
    kube_binaries: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    with ControlPlane(kube_binaries, tmp_path_factory.mktemp("realcluster")) as plane:
        yield plane


def _wait_for(what: str, check: Any, timeout_s: float = CONTROLLER_WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout_s} s")


@pytest.fixture(scope="session")
def installed(control_plane: ControlPlane) -> Installed:
    return install(control_plane)


@pytest.fixture(scope="module")
def own_installed(
    kube_binaries: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    """A control plane and xpushare of the module's own, for tests that break the control
    plane (the session's tests must not inherit what a fault leaves behind)."""
    with ControlPlane(kube_binaries, tmp_path_factory.mktemp("realcluster-own")) as plane:
        yield install(plane)


def install(plane: ControlPlane) -> Installed:
    """Install xpushare on *plane* as the chart does (see the module docstring)."""
    from kubernetes.client.rest import ApiException

    pki = plane.pki
    assert pki is not None
    core = plane.core()
    for namespace in (SYSTEM_NAMESPACE, PODS_NAMESPACE):
        core.create_namespace({"metadata": {"name": namespace}})

    def default_account() -> bool:
        try:
            core.read_namespaced_service_account("default", PODS_NAMESPACE)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # The ServiceAccount admission plugin refuses pods until the controller made `default`.
    _wait_for("the ServiceAccount controller making ml/default", default_account)

    # Everything the chart renders, created for real (server-side validation of RBAC, the
    # webhook configuration, the PDB, ...), except its webhook registration: that calls the
    # in-cluster Service, which has no endpoints here; the same object pointed at our local
    # scheduler is registered below.
    chart = render(CHART_VALUES)
    plane.apply([o for o in chart if o["kind"] != "MutatingWebhookConfiguration"])
    # Our scheduler and kube-scheduler run as their ServiceAccounts, under the chart's RBAC
    # alone: any call it does not grant is a 403 that fails the suite.
    scheduler_kubeconfig = plane.token_kubeconfig(SYSTEM_NAMESPACE, f"{RELEASE}-xpushare-scheduler")
    kube_scheduler_kubeconfig = plane.token_kubeconfig(
        SYSTEM_NAMESPACE, f"{RELEASE}-xpushare-kube-scheduler"
    )

    scheduler_yaml = plane.work / "xpushare-scheduler.yaml"
    scheduler_yaml.write_text(yaml.safe_dump(config_file(chart, "scheduler.yaml")))
    serving = pki.issue(
        "xpushare-scheduler",
        common_name=SCHEDULER_SERVICE,
        hosts=("127.0.0.1", SCHEDULER_SERVICE),
    )
    _, url = start_xpushare_scheduler(
        plane, scheduler_yaml, kubeconfig=scheduler_kubeconfig, serving=serving
    )

    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(plane.api_client())
    webhook = one(chart, "MutatingWebhookConfiguration")
    path = webhook["webhooks"][0]["clientConfig"]["service"]["path"]
    admission.create_mutating_webhook_configuration(
        webhook_config(strip(webhook), f"{url}{path}", pki.ca_cert.read_bytes())
    )
    rendered = config_file(chart, "kube-scheduler.yaml")
    kube_scheduler = plane.start_scheduler(
        extender_config(rendered, url, pki.ca_cert), kubeconfig=kube_scheduler_kubeconfig
    )
    # Up once it serves nothing yet: its readiness is its Lease, which the tests see as pods
    # being scheduled; here only an early exit (a refused config) is caught.
    time.sleep(0.5)
    if not kube_scheduler.alive():
        raise RuntimeError(f"kube-scheduler exited:\n{kube_scheduler.log_tail()}")
    return Installed(plane, core, url, chart)


@pytest.fixture(autouse=True)
def nothing_forbidden(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, neither scheduler was refused a call by the chart's RBAC: a 403 that
    a retry loop swallowed (a watch, an event) fails the test that caused it."""
    yield
    if "installed" not in request.fixturenames:
        return
    installed: Installed = request.getfixturevalue("installed")
    for name in ("xpushare-scheduler", "kube-scheduler"):
        log = installed.plane.component(name).log_path.read_text(errors="replace")
        refused = [line for line in log.splitlines() if "forbidden" in line.lower()]
        assert not refused, f"{name} was refused by RBAC:\n" + "\n".join(refused[:5])
