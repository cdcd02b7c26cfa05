"""The real control plane of the real-cluster suite: one per test session, shared by its tests.

Why session-scoped: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and our
scheduler take seconds to start on a shared 2-core machine; every test makes its own nodes and
pods (each test's pods are pinned to its own nodes by a nodeSelector), so they do not need a
fresh cluster each.

The binaries come from ``scripts/kube-binaries`` (``XPUSHARE_KUBE_BIN`` names another folder),
our fake container runtime among them: the kubelet tests add real kubelets (one node per test
module, ``KubeletNode``) to the session's control plane.
When they are missing the suite is skipped with the command that builds them, except under
``CI=true`` or with ``XPUSHARE_KUBE_BIN`` set, where a missing binary is a failure: .ci/run
builds them first and names the folder.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from xpushare.testing.realcluster import (
    ControlPlane,
    binaries_folder,
    binaries_missing,
)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "deploy"))

from nvidia_fake import FakeNvidia  # noqa: E402
from realkit import Installed, install  # noqa: E402

#: Leader election a test can watch change hands within seconds, slack enough that a loaded
#: 2-core machine does not lose the Lease by itself (the chart's defaults: 15 / 10 / 2 s).
FAST_LEASE = {
    "leader.lease_duration_s": "4",
    "leader.renew_deadline_s": "3",
    "leader.retry_period_s": "0.5",
}


@pytest.fixture(scope="session")
def kube_binaries() -> Path:
    folder = binaries_folder(REPO)
    missing = binaries_missing(folder)
    if missing:
        message = (
            f"real-cluster suite: {', '.join(missing)} not built in {folder}. Build them once "
            "with `scripts/kube-binaries` (Go 1.26 and the module proxy; 4-7 minutes cold "
            "on 2 cores, cached after) or name a folder in XPUSHARE_KUBE_BIN."
        )
        # CI, and a folder named on purpose, must never pass by skipping the suite.
        if os.environ.get("CI") == "true" or os.environ.get("XPUSHARE_KUBE_BIN"):
            pytest.fail(message)
        pytest.skip(message)
    return folder


def timed(what: str, plane: ControlPlane, installer: Any) -> Installed:
    """``installer(plane)``, its time recorded with the plane's own for the summary."""
    started = time.monotonic()
    installed: Installed = installer(plane)
    STARTS.append((what, plane.started_s, plane.started_s + time.monotonic() - started))
    return installed


@pytest.fixture(scope="session")
def control_plane(
    kube_binaries: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    with ControlPlane(kube_binaries, tmp_path_factory.mktemp("realcluster")) as plane:
        yield plane


@pytest.fixture(scope="session")
def installed(control_plane: ControlPlane) -> Installed:
    return timed("session", control_plane, install)


@pytest.fixture(scope="module")
def own_installed(
    kube_binaries: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Installed]:
    """A control plane and xpushare of the module's own, for tests that break the control
    plane (the session's tests must not inherit what a fault leaves behind)."""
    with ControlPlane(kube_binaries, tmp_path_factory.mktemp("realcluster-own")) as plane:
        yield timed(request.module.__name__, plane, install)


@pytest.fixture(scope="module")
def replicated(
    kube_binaries: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Installed]:
    """Two replicas of our scheduler behind a ReadyProxy (the chart's Service), on a control
    plane of the module's own, with a Lease short enough for a test to see it pass."""
    with ControlPlane(kube_binaries, tmp_path_factory.mktemp("realcluster-replicas")) as plane:
        yield timed(
            request.module.__name__,
            plane,
            lambda p: install(p, replicas=2, settings=FAST_LEASE),
        )


@pytest.fixture(scope="session")
def nvidia_library(tmp_path_factory: pytest.TempPathFactory) -> FakeNvidia:
    """The fake NVML, compiled once for the session (see nvidia_fake.py)."""
    return FakeNvidia.build(tmp_path_factory.mktemp("fake-nvidia"))


@pytest.fixture(scope="module")
def fake_nvidia(nvidia_library: FakeNvidia) -> Iterator[FakeNvidia]:
    """The fake NVML with an empty device table for this module's node (its tests add GPUs)."""
    nvidia_library.fake.reset()
    yield nvidia_library
    nvidia_library.fake.reset()


@pytest.fixture(autouse=True)
def nothing_forbidden(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on the session's cluster, neither scheduler was refused a call by the
    chart's RBAC while it ran: a 403 that a retry loop swallowed (a watch, an event) fails the
    test that caused it (and only that one: each test reads the lines logged during it)."""
    if "installed" not in request.fixturenames:
        yield
        return
    installed: Installed = request.getfixturevalue("installed")
    names = ("xpushare-scheduler", "kube-scheduler")
    paths = {name: installed.plane.component(name).log_path for name in names}
    start = {name: path.stat().st_size for name, path in paths.items()}
    yield
    for name, path in paths.items():
        with path.open("rb") as log:
            log.seek(start[name])
            text = log.read().decode(errors="replace")
        refused = [line for line in text.splitlines() if "forbidden" in line.lower()]
        assert not refused, f"{name} was refused by RBAC:\n" + "\n".join(refused[:5])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """An SSL socket of a client of the API server that the garbage collector closes is not
    a failure here (it is everywhere else): the suite's threads (kube-scheduler stand-ins,
    node agents in threads, the official client's watch streams) end with the control plane,
    and one connection left to the collector surfaced once, in a later test, in 2,400 runs.
    Found in session 14, not yet traced to its owner."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(
                pytest.mark.filterwarnings(
                    "ignore:Exception ignored in. <ssl.SSLSocket"
                    ":pytest.PytestUnraisableExceptionWarning"
                )
            )


#: Start-up times of the control planes of this session, for the summary.
STARTS: list[tuple[str, float, float]] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for what, plane_s, total_s in STARTS:
        terminalreporter.write_line(
            f"realcluster: {what}: etcd, kube-apiserver and kube-controller-manager up in "
            f"{plane_s:.1f} s; with the chart, our scheduler and kube-scheduler in {total_s:.1f} s"
        )
