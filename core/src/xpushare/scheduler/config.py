"""The scheduler's configuration: a YAML file, then ``XPUSHARE_SCHEDULER__*`` variables, then flags.

Why one validated model: the scheduler runs as a Deployment whose settings come from a
ConfigMap, the pod's environment and the container's arguments; a typo in any of them must
stop the process at start with a message that names the setting and the source, not show up
as odd behaviour at the first pod. Later sources override earlier ones field by field.

Environment variables name a setting by its path with ``__`` between the parts, e.g.
``XPUSHARE_SCHEDULER__BIND__WAIT_S=5``; list values are comma-separated.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from xpushare.codec import DEFAULT_HANDOFF_NAMESPACE
from xpushare.errors import XpushareError
from xpushare.placement import PlacementConfig
from xpushare.scheduler.bounds import MAX_CANDIDATE_NODES
from xpushare.scheduler.shortlist import DEFAULT_SHORTLIST

ENV_PREFIX = "XPUSHARE_SCHEDULER__"

#: The apiserver caps request bodies at 3 MiB and controller-runtime's webhooks use the same
#: cap (research/perf-reliability.md §4 item 7), so no legitimate AdmissionReview or
#: nodeCacheCapable ExtenderArgs is larger.
DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024

#: Request headers are a few hundred bytes that every real client (kube-scheduler, the API
#: server) sends in one write; 10 s is generous on any network and matches the TLS handshake
#: timeout of client-go's transports. Slower means a stalled or hostile client.
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: The longest any caller waits for an answer: the webhook's timeoutSeconds is at most 30 s
#: and the extender's httpTimeout defaults to 5 s (research/k8s-apis.md). A body still arriving
#: after 30 s is for a caller that has given up already.
DEFAULT_BODY_TIMEOUT_S = 30.0
#: Longer than the idle timeout of the callers' own connection pools (Go's net/http, kept by
#: client-go's transports: 90 s), so the client, not the server, closes an idle connection;
#: a server that closed first would race the client's next POST on that connection.
DEFAULT_IDLE_TIMEOUT_S = 120.0
#: Open connections per listener. HTTP/1.1 takes one connection per request in flight;
#: kube-scheduler's binds in flight plus the API servers' admission calls stay far below
#: this. Beyond it new connections are answered 503 and closed.
DEFAULT_MAX_CONNECTIONS = 1000
#: kube-scheduler's scheduling cycle is one pod at a time: one worker keeps it on its own
#: core; more only help when several schedulers share the extender. Each holds the state.
MAX_FILTER_WORKERS = 8


class ConfigError(XpushareError):
    """The configuration is invalid; the message names the setting and what to do."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Section):
    host: str = "0.0.0.0"
    #: HTTPS port of the extender and the webhook (a Service maps 443 to it).
    port: int = Field(default=8443, ge=0, le=65535)
    #: Plain-HTTP port for /metrics, /healthz and /readyz (0: serve them on the main port only).
    metrics_port: int = Field(default=9395, ge=0, le=65535)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    #: Prefix of the extender's routes: kube-scheduler calls ``urlPrefix + "/" + verb``.
    extender_prefix: str = ""
    webhook_path: str = "/mutate"
    #: A request's headers must be complete this long after its first byte (a new
    #: connection: after it is accepted); else the connection is closed. Also the TLS
    #: handshake timeout.
    header_timeout_s: float = Field(default=DEFAULT_HEADER_TIMEOUT_S, gt=0, le=300)
    #: A request's body must be complete this long after its headers; else 408 and close.
    body_timeout_s: float = Field(default=DEFAULT_BODY_TIMEOUT_S, gt=0, le=600)
    #: A keep-alive connection with no request for this long is closed.
    idle_timeout_s: float = Field(default=DEFAULT_IDLE_TIMEOUT_S, gt=0, le=3600)
    #: Open connections per listener (the main one and the metrics one count apart, so the
    #: probes stay reachable when the main port is full); beyond it: 503 and close.
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1, le=100_000)
    #: Extra processes that answer /filter and /prioritize on ``filter_port`` from their own
    #: copy of the cluster state, so kube-scheduler's scheduling cycle and its binds run on
    #: different cores (scheduler/workers.py; docs/scheduler.md, "Filter workers"). 0: one
    #: process serves every verb on ``port``. Each worker holds a full copy of the state.
    filter_workers: int = Field(default=0, ge=0, le=MAX_FILTER_WORKERS)
    #: HTTPS port of the filter workers (the main port's TLS); used when filter_workers > 0.
    filter_port: int = Field(default=8444, ge=0, le=65535)
    #: The event loop: "auto" (uvloop where installed), "uvloop" (required) or "asyncio"
    #: (scheduler/eventloop.py).
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"


class TLSConfig(_Section):
    cert_file: Path | None = None
    key_file: Path | None = None
    #: How often the files are checked for a rotated certificate (cert-manager, a Secret).
    reload_interval_s: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _both(self) -> TLSConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls.cert_file and tls.key_file must be given together")
        return self


class KubeConfig(_Section):
    #: A kubeconfig file; unset: the in-cluster service account, then ~/.kube/config.
    kubeconfig: Path | None = None
    context: str | None = None
    #: A server URL used without credentials (tests, kubectl proxy).
    server: str | None = None
    #: A watch is restarted from its last version after this many seconds (the server ends
    #: idle watches after 5-10 minutes anyway; we ask for less so stalls are noticed).
    watch_timeout_s: int = Field(default=290, ge=1)
    request_timeout_s: float = Field(default=10.0, gt=0)
    #: A resource whose list and watch have failed for this long turns readiness false
    #: (informer.STALE_AFTER_S: two of the longest retry backoffs).
    watch_stale_s: float = Field(default=60.0, gt=0, le=3600)


class BindConfig(_Section):
    #: How long /bind waits for the node's previous handoff before giving up (DESIGN.md §6).
    #: Below kube-scheduler's httpTimeout (15 s in the example configuration).
    wait_s: float = Field(default=10.0, gt=0, le=60)
    #: Lifetime of a handoff: well under a minute (DESIGN.md §6); Allocate follows a bind
    #: within a second or two on a healthy node.
    handoff_ttl_s: float = Field(default=20.0, gt=0, le=120)
    #: How often stale handoffs (expired, pod gone, pod already running) are repaired.
    repair_interval_s: float = Field(default=2.0, gt=0)
    #: Conflicting handoff writes (another writer changed the node) are retried this often.
    conflict_retries: int = Field(default=5, ge=0)
    #: The namespace of the nodes' handoff Leases (``handoff.<node>``, scheduler/handoffbook.py):
    #: the node agents must be told the same one. The chart sets the release's namespace.
    handoff_namespace: str = Field(
        default=DEFAULT_HANDOFF_NAMESPACE, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )


class ExtenderConfig(_Section):
    #: At most this many of the nodes a pod fits go back to kube-scheduler from /filter, the
    #: policy's best (scheduler/shortlist.py; docs/scheduler.md, "The shortlist"); a pod that
    #: states a soft preference of its own gets them all. 0: every node that fits.
    shortlist: int = Field(default=DEFAULT_SHORTLIST, ge=0, le=MAX_CANDIDATE_NODES)


class WebhookConfig(_Section):
    #: Namespaces exempt from every isolation rule of the webhook: the variables below, the
    #: privileged and capability rules, hostPID, and the vendors' paths and device nodes
    #: (``xpushare_admission_guard``). Trusted system namespaces only (a GPU operator).
    bypass_namespaces: tuple[str, ...] = ()
    #: Environment variables that switch in-container isolation off or around
    #: (research/hami-protocol.md §7.1, perf-reliability.md §4): '*' matches any suffix.
    #: Each vendor's own (``AdmissionGuard.env``) are refused as well.
    bypass_env: tuple[str, ...] = (
        "CUDA_DISABLE_CONTROL",
        "CUDA_DEVICE_MEMORY_LIMIT*",
        "CUDA_DEVICE_SM_LIMIT*",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE",
        "CUDA_OVERSUBSCRIBE",
        "CUDA_REDIRECT",
        "GPU_CORE_UTILIZATION_POLICY",
        "NVIDIA_VISIBLE_DEVICES",
    )
    #: Variables refused on *every* pod, device request or not: with the NVIDIA container
    #: runtime as the default, NVIDIA_VISIBLE_DEVICES=all in a pod without a GPU request
    #: hands it every GPU of the node behind the scheduler's back.
    visibility_env: tuple[str, ...] = ("NVIDIA_VISIBLE_DEVICES",)
    #: Refuse privileged containers in pods that ask for managed devices (they see every
    #: device of the node).
    deny_privileged: bool = True
    #: Capabilities refused in pods that ask for managed devices: each lets a process undo
    #: the preload that enforces the limits (SYS_ADMIN: unmount or mount over
    #: /etc/ld.so.preload, enter another container's mounts; SYS_MODULE: load a kernel
    #: module; ALL: every one). Compared without case and without a ``CAP_`` prefix, as the
    #: container runtimes read them.
    denied_capabilities: tuple[str, ...] = ("SYS_ADMIN", "SYS_MODULE", "ALL")
    #: A request for whole devices with neither memory nor compute becomes exclusive.
    whole_device_exclusive: bool = True


class LeaderConfig(_Section):
    enabled: bool = True
    namespace: str = "kube-system"
    name: str = "xpushare-scheduler"
    #: client-go's component defaults (research/k8s-apis.md §7.1).
    lease_duration_s: float = Field(default=15.0, gt=0)
    renew_deadline_s: float = Field(default=10.0, gt=0)
    retry_period_s: float = Field(default=2.0, gt=0)
    identity: str | None = None
    #: This replica's own pod (the chart sets both from the downward API): while it leads,
    #: the pod carries the label ``xpushare.io/leader=true``, which the chart's Service
    #: selects (leaderlabel.py). Unset: no label is written.
    pod: str | None = None
    pod_namespace: str | None = None

    @model_validator(mode="after")
    def _order(self) -> LeaderConfig:
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "leader election needs retry_period_s < renew_deadline_s < lease_duration_s, got "
                f"{self.retry_period_s} / {self.renew_deadline_s} / {self.lease_duration_s}"
            )
        return self


class WebAuthConfig(_Section):
    #: "none": anyone who reaches the port may look (it is bound to localhost by default and
    #: reached with ``kubectl port-forward``, which Kubernetes RBAC already guards);
    #: "token": every API call carries ``Authorization: Bearer <token>``, checked with a
    #: TokenReview, and the user must be allowed ``verb`` on ``path`` (a SubjectAccessReview
    #: for a non-resource URL: grant it with a ClusterRole's ``nonResourceURLs``).
    mode: Literal["none", "token"] = "none"
    path: str = "/xpushare/web"
    verb: str = "get"
    #: How long a review's answer is reused for the same token: the page polls every second
    #: and each call must not cost the API server two reviews.
    cache_ttl_s: float = Field(default=30.0, ge=0, le=600)
    #: Distinct tokens whose answers are kept (the cache is bounded: a flood of bogus tokens
    #: only costs reviews, never memory).
    cache_size: int = Field(default=1024, ge=1, le=100_000)


class WebConfig(_Section):
    """The read-only web view of the fleet (docs/web-view.md): off unless enabled."""

    enabled: bool = False
    #: Localhost by default: reached with ``kubectl port-forward``, never exposed by accident.
    host: str = "127.0.0.1"
    port: int = Field(default=9396, ge=0, le=65535)
    #: Prometheus that scrapes the node agents and the scheduler (``http://prometheus:9090``):
    #: the node page then shows live usage and the fleet page memory allocated against used
    #: over the last hour (web/history.py). Unset: allocation only.
    prometheus_url: str | None = None
    prometheus_timeout_s: float = Field(default=2.0, gt=0, le=30)
    #: Nodes shown per vendor/reason group on the pod and what-if pages (each one is a full
    #: ``xpushare fit`` explanation, about 50 us).
    explain_nodes: int = Field(default=3, ge=1, le=50)
    auth: WebAuthConfig = WebAuthConfig()
    #: Host names (besides loopback names, IP addresses and ``host``) a request may name in
    #: its Host header: the names you reach the view by through an ingress or a Service. Any
    #: other name is answered 421, which stops DNS rebinding into a port-forward
    #: (scheduler/web/hostcheck.py).
    allowed_hosts: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _token_off_loopback(self) -> WebConfig:
        # Without the token check the view trusts whoever reaches its port: only loopback,
        # reached through kubectl port-forward (which RBAC guards), is safe for that.
        if self.enabled and self.auth.mode != "token" and not is_loopback_host(self.host):
            raise ValueError(
                f"web.host is {self.host or 'every address'!r} (--web-host), not a loopback "
                f"address, and web.auth.mode is {self.auth.mode!r}: anyone who reaches it "
                "could read every pod, namespace and node of the fleet. Set web.auth.mode to "
                "'token' (chart: scheduler.web.auth.mode=token; docs/web-view.md, 'Access'), "
                "or keep web.host on 127.0.0.1 and reach the view with kubectl port-forward"
            )
        return self


#: Names that resolve to the loopback interface by definition (RFC 6761 §6.3: localhost).
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback_host(host: str) -> bool:
    """Whether a listen address or a Host name stays on this machine (127/8, ::1, localhost)."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class MetricsConfig(_Section):
    #: Export the scheduler's figures under HAMi's metric names and labels as well
    #: (hami_gpu_memory_allocated_bytes, ...), so HAMi's Grafana dashboard works unchanged
    #: (docs/migrate-from-hami.md); the node agent's --hami-metrics does its side.
    hami_names: bool = False


class DraConfig(_Section):
    #: Watch ResourceClaims and ResourceSlices (resource.k8s.io/v1, Kubernetes 1.34+) and book
    #: the devices allocated claims hold, so DRA pods are ranked over them (docs/dra.md,
    #: "The extender in DRA mode"). Off: clusters without the API list nothing of it.
    enabled: bool = False


class SchedulerConfig(_Section):
    #: The schedulerName the webhook sets and the events carry.
    scheduler_name: str = "xpushare-scheduler"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    server: ServerConfig = ServerConfig()
    tls: TLSConfig = TLSConfig()
    kube: KubeConfig = KubeConfig()
    #: Policy, device order and over-commit: the same model the simulator and `xpushare fit`
    #: take, so the cluster runs the policy that was measured offline.
    placement: PlacementConfig = PlacementConfig()
    bind: BindConfig = BindConfig()
    extender: ExtenderConfig = ExtenderConfig()
    webhook: WebhookConfig = WebhookConfig()
    leader: LeaderConfig = LeaderConfig()
    web: WebConfig = WebConfig()
    metrics: MetricsConfig = MetricsConfig()
    dra: DraConfig = DraConfig()
    #: Per-vendor plugin configuration (``vendors.<name>``), handed to the plugin host.
    vendors: dict[str, dict[str, Any]] = Field(default_factory=dict)


def _set_path(target: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        child = target.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"setting {'.'.join(path)}: {part} is not a section")
        target = child
    target[path[-1]] = value


def _field_kind(path: list[str]) -> Any:
    model: Any = SchedulerConfig
    annotation: Any = None
    for part in path:
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return None
        annotation = fields[part].annotation
        model = annotation
    return annotation


def _coerce(path: list[str], raw: str) -> Any:
    # Lists and dicts from a flat string: "a,b" and "nvidia=1.5,*=1".
    text = str(raw)
    kind = str(_field_kind(path))
    if "tuple" in kind or "list" in kind:
        return [p.strip() for p in text.split(",") if p.strip()]
    if "dict" in kind:
        out: dict[str, str] = {}
        for item in text.split(","):
            if not item.strip():
                continue
            if "=" not in item:
                raise ConfigError(f"setting {'.'.join(path)}: {item!r} is not key=value")
            key, value = item.split("=", 1)
            out[key.strip()] = value.strip()
        return out
    return text


def load_config(
    file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> SchedulerConfig:
    """The configuration from *file*, then *environ*, then *overrides* (dotted keys)."""
    data: dict[str, Any] = {}
    if file is not None:
        try:
            loaded = yaml.safe_load(Path(file).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read the configuration file {file}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"configuration file {file} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"configuration file {file} must hold a mapping of settings")
        data = loaded or {}
    env = os.environ if environ is None else environ
    for name, value in sorted(env.items()):
        if name.startswith(ENV_PREFIX):
            path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
            if path:
                _set_path(data, path, _coerce(path, value))
    for dotted, value in (overrides or {}).items():
        path = dotted.split(".")
        _set_path(data, path, _coerce(path, value) if isinstance(value, str) else value)
    try:
        return SchedulerConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False, include_input=False):
            where = ".".join(str(p) for p in err["loc"]) or "configuration"
            problems.append(f"{where}: {str(err['msg']).removeprefix('Value error, ')}")
        sources = ", ".join(
            s
            for s, used in (
                (f"file {file}", file is not None),
                (f"{ENV_PREFIX}* variables", any(k.startswith(ENV_PREFIX) for k in env)),
                ("command-line flags", bool(overrides)),
            )
            if used
        )
        raise ConfigError(
            "invalid scheduler configuration"
            + (f" (from {sources})" if sources else "")
            + ": "
            + "; ".join(problems)
        ) from exc
