"""The processes of a test control plane: started with their logs in files, waited on, ended.

Why: every component (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, our
scheduler) is started, waited for and stopped the same way, and a test that fails must never
leave one running: terminate, then kill.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, Self

import yaml

# One free loopback port, as the replicas of the fault tests take theirs.
from xpushare.testing.replicas import free_port as free_port

Object = dict[str, Any]

#: Bounds of waits that end within seconds on a working machine (etcd's first health answer,
#: the API server's readiness after its post-start hooks: ~10 s on a loaded 2-core machine):
#: only there so a broken start fails with the component's log instead of hanging.
START_WAIT_S = 90.0

#: Seconds a component gets to exit after SIGTERM before it is killed.
STOP_WAIT_S = 10.0


def binaries_folder(repo: Path) -> Path:
    """The folder of the control plane's binaries: ``XPUSHARE_KUBE_BIN``, else the one
    *repo*'s ``scripts/kube-binaries --print`` names (built or not: the caller checks)."""
    named = os.environ.get("XPUSHARE_KUBE_BIN")
    if named:
        return Path(named)
    answer = subprocess.run(
        [str(repo / "scripts" / "kube-binaries"), "--print"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return Path(answer.stdout.strip().splitlines()[-1])


class Started(ABC):
    """A part of the test cluster with ``start()`` and ``stop()``: ``with`` starts it and
    stops it however the block ends (the control plane, a kubelet node, an agent thread)."""

    #: Whether a ``start()`` that raises is followed by ``stop()``, so that what it had
    #: started (a process, a folder) is ended before the error reaches the test.
    stop_after_failed_start: ClassVar[bool] = True

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            if self.stop_after_failed_start:
                self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass
class Component:
    """One process of the control plane, its output in ``<name>.log``."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Terminate, then kill: never leaves the process behind."""
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_WAIT_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def start_process(name: str, args: list[str], log_dir: Path, **popen: Any) -> Component:
    """Start *args* with stdout and stderr into ``log_dir/<name>.log``."""
    log_path = log_dir / f"{name}.log"
    log = log_path.open("ab")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, **popen)
    return Component(name, process, log_path, log)


def write_kubeconfig(
    path: Path,
    server: str,
    ca_file: Path,
    *,
    cert: tuple[Path, Path] | None = None,
    token: str | None = None,
    user: str = "user",
) -> Path:
    """A kubeconfig with one cluster, one user (client certificate or bearer token) and one
    context, current."""
    credentials: Object = {}
    if cert is not None:
        credentials = {"client-certificate": str(cert[0]), "client-key": str(cert[1])}
    if token is not None:
        credentials["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def wait_url(
    component: Component, url: str, ca_file: Path | None, timeout_s: float = START_WAIT_S
) -> None:
    """Wait until *url* answers 200 (over TLS trusting *ca_file* when given); fails with
    *component*'s log when it exits first or *timeout_s* pass."""
    context = None
    if ca_file is not None:
        context = ssl.create_default_context(cafile=str(ca_file))
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if not component.alive():
            raise RuntimeError(
                f"{component.name} exited with {component.process.returncode} while "
                f"starting; its log ({component.log_path}) ends:\n{component.log_tail()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.1)
    raise TimeoutError(
        f"{component.name} not ready at {url} within {timeout_s} s ({last}); its log "
        f"({component.log_path}) ends:\n{component.log_tail()}"
    )
