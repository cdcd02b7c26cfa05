"""The mutating admission webhook for pods (AdmissionReview v1, JSONPatch; k8s-apis.md §4).

Why: a pod that asks for shared devices must reach our scheduler with a request the node
agent can honour, and a mistake must be refused when the pod is created, with a message its
author can act on, rather than leave the pod pending with a puzzling reason. So, for pods
that ask for a managed resource, it

* refuses what is invalid: non-numeric or negative values, memory in MiB and as a percent,
  compute above 100, memory above the largest device of the vendor in the cluster, a
  preset ``spec.nodeName`` (it would skip the scheduler and so the device assignment);
* refuses isolation bypasses: the environment variables that switch HAMi-core's limits off
  or around (``CUDA_DISABLE_CONTROL`` first), and privileged containers, unless the
  namespace is allowed by configuration;
* sets ``spec.schedulerName`` and applies defaults: a device count when only memory or
  compute is given (as HAMi does), and compute 100 (exclusive use) for a request of whole
  devices with neither memory nor compute;
* removes a copied ``xpushare.io/assignment`` from a new pod, which would otherwise claim
  devices the pod was never given;
* then lets each vendor add patches of its own (``xpushare_mutate_admission``).
"""

from __future__ import annotations

import base64
import fnmatch
import json
import logging
from typing import TYPE_CHECKING, Any

from xpushare.codec import ASSIGNMENT_KEY
from xpushare.errors import AdmissionDenied, PluginError
from xpushare.models import ContainerRequest, ContainerView, JsonPatchOp, PodView
from xpushare.scheduler import objects as ob
from xpushare.scheduling.quantity import parse_quantity

if TYPE_CHECKING:
    from xpushare.plugins import PluginHost, VendorHandle
    from xpushare.scheduler.cluster import ClusterState
    from xpushare.scheduler.config import WebhookConfig

log = logging.getLogger(__name__)

API_VERSION = "admission.k8s.io/v1"


class BadReview(ValueError):
    """The body is not an AdmissionReview v1; answered with HTTP 400."""


def escape(segment: str) -> str:
    """A JSON Pointer segment (RFC 6901): '~' becomes '~0' and '/' becomes '~1'."""
    return segment.replace("~", "~0").replace("/", "~1")


def _truthy_env(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


class Webhook:
    """Reviews pods; :meth:`review` takes and returns AdmissionReview JSON."""

    def __init__(
        self,
        *,
        host: PluginHost,
        cluster: ClusterState,
        config: WebhookConfig,
        scheduler_name: str,
    ) -> None:
        self.host = host
        self.cluster = cluster
        self.config = config
        self.scheduler_name = scheduler_name
        self._resources: dict[str, VendorHandle] = {}
        for handle in host.vendors.values():
            for resource in handle.spec.resource_names.all():
                self._resources[resource] = handle

    # -- the AdmissionReview envelope --------------------------------------------------------------

    def review(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadReview(
                f"the body must be a JSON object (an AdmissionReview), not {ob.json_kind(body)}"
            )
        if body.get("kind") != "AdmissionReview":
            raise BadReview(f"the body is not an AdmissionReview (kind {body.get('kind')!r})")
        if body.get("apiVersion") != API_VERSION:
            raise BadReview(
                f"AdmissionReview {body.get('apiVersion')!r} is not supported; register the "
                f"webhook with admissionReviewVersions: [v1]"
            )
        request = body.get("request")
        if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
            raise BadReview("the AdmissionReview has no request with a uid")
        uid = request["uid"]
        try:
            patches, warnings = self._admit(request)
        except AdmissionDenied as exc:
            return self._response(uid, allowed=False, message=str(exc))
        except PluginError as exc:
            return self._response(
                uid,
                allowed=False,
                message=f"{exc}; the pod was refused rather than admitted unchecked",
                code=500,
            )
        return self._response(uid, allowed=True, patches=patches, warnings=warnings)

    @staticmethod
    def _response(
        uid: str,
        *,
        allowed: bool,
        message: str = "",
        patches: list[dict[str, Any]] | None = None,
        warnings: list[str] | None = None,
        code: int = 403,
    ) -> dict[str, Any]:
        response: dict[str, Any] = {"uid": uid, "allowed": allowed}
        if not allowed:
            response["status"] = {"code": code, "message": message, "reason": "Forbidden"}
        if patches:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(
                json.dumps(patches, separators=(",", ":")).encode()
            ).decode()
        if warnings:
            response["warnings"] = warnings
        return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}

    # -- the rules ---------------------------------------------------------------------------------

    def _admit(self, request: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
        kind = request.get("kind") or {}
        if request.get("operation") != "CREATE" or (
            isinstance(kind, dict) and kind.get("kind") not in (None, "Pod")
        ):
            return [], []
        if request.get("subResource"):
            return [], []
        pod = request.get("object")
        if not isinstance(pod, dict):
            raise AdmissionDenied("the pod object is missing from the admission request")
        namespace = request.get("namespace") or ob.namespace(pod)
        try:
            view = ob.pod_view(pod)
        except ValueError as exc:
            raise AdmissionDenied(f"the pod is malformed: {exc}") from None
        pod_name = ob.name(pod) or str(ob.meta(pod).get("generateName") or "") + "*"
        who = f"pod {namespace}/{pod_name}"
        patches: list[dict[str, Any]] = []
        warnings: list[str] = []
        if ASSIGNMENT_KEY in ob.annotations_of(pod):
            patches.append(
                {"op": "remove", "path": f"/metadata/annotations/{escape(ASSIGNMENT_KEY)}"}
            )
        asks = self._asks(view)
        self._check_bypass(pod, namespace, who, asks)
        if not asks:
            return patches, warnings
        spec = ob.spec(pod)
        if spec.get("nodeName"):
            raise AdmissionDenied(
                f"{who} sets spec.nodeName {spec['nodeName']!r} and asks for shared devices: "
                "such a pod skips the scheduler, so no devices would be assigned to it; remove "
                "spec.nodeName (use a nodeSelector or node affinity instead)"
            )
        current = spec.get("schedulerName")
        if current in (None, "", "default-scheduler"):
            patches.append(
                {
                    "op": "replace" if "schedulerName" in spec else "add",
                    "path": "/spec/schedulerName",
                    "value": self.scheduler_name,
                }
            )
        elif current != self.scheduler_name:
            warnings.append(
                f"schedulerName {current!r} is kept; devices are assigned only by "
                f"{self.scheduler_name!r}"
            )
        for container, index, vendors in asks:
            patches.extend(self._container(pod, view, container, index, vendors, who))
        return patches, warnings

    def _asks(self, view: PodView) -> list[tuple[ContainerView, int, list[VendorHandle]]]:
        """Containers that name a managed resource (with their index in their list)."""
        out: list[tuple[ContainerView, int, list[VendorHandle]]] = []
        positions: dict[bool, int] = {True: 0, False: 0}
        for container in view.containers:
            index = positions[container.init]
            positions[container.init] += 1
            vendors: list[VendorHandle] = []
            for resource in (*container.limits, *container.requests):
                handle = self._resources.get(resource)
                if handle is not None and handle not in vendors:
                    vendors.append(handle)
            if vendors:
                out.append((container, index, vendors))
        return out

    def _check_bypass(
        self,
        pod: ob.Object,
        namespace: str,
        who: str,
        asks: list[tuple[ContainerView, int, list[VendorHandle]]],
    ) -> None:
        if namespace in self.config.bypass_namespaces:
            return
        allowed = (
            f"; a cluster admin can allow it for namespace {namespace!r} with "
            "webhook.bypass_namespaces"
        )
        for container, _, _ in ob.containers(pod):
            cname = container.get("name", "?")
            for item in container.get("env") or []:
                if not isinstance(item, dict):
                    continue
                var = str(item.get("name", ""))
                # Limits only matter on pods that get shares; visibility matters on all.
                patterns = self.config.bypass_env if asks else ()
                patterns = (*patterns, *self.config.visibility_env)
                if not any(fnmatch.fnmatchcase(var, p) for p in patterns):
                    continue
                value = item.get("value")
                if (
                    var == "CUDA_DISABLE_CONTROL"
                    and isinstance(value, str)
                    and not _truthy_env(value)
                ):
                    continue
                raise AdmissionDenied(
                    f"{who}, container {cname!r}: environment variable {var} would switch off "
                    "or bypass the in-container device isolation; remove it" + allowed
                )
            security = container.get("securityContext") or {}
            if (
                asks
                and self.config.deny_privileged
                and isinstance(security, dict)
                and security.get("privileged") is True
            ):
                raise AdmissionDenied(
                    f"{who}, container {cname!r} is privileged and so sees every device of the "
                    "node, not only the shares assigned to it; drop privileged: true" + allowed
                )

    def _container(
        self,
        pod: ob.Object,
        view: PodView,
        container: ContainerView,
        index: int,
        vendors: list[VendorHandle],
        who: str,
    ) -> list[dict[str, Any]]:
        field = "initContainers" if container.init else "containers"
        where = f"{who}, {'init container' if container.init else 'container'} {container.name!r}"
        patches: list[dict[str, Any]] = []
        raw = ob.spec(pod)[field][index]
        resources = raw.get("resources") or {}
        limits_missing = "limits" not in resources
        for handle in vendors:
            names = handle.spec.resource_names
            self._check_values(container, handle, where)
            try:
                request = handle.resource_request(pod=view, container=container)
            except ValueError as exc:
                raise AdmissionDenied(str(exc)) from None
            if request is None:
                continue
            self._check_memory(request, handle, where)
            additions: dict[str, str] = {}
            if names.count not in container.limits and names.count not in container.requests:
                additions[names.count] = str(request.count)
            whole = (
                request.memory_mib is None
                and request.memory_percent is None
                and request.compute_percent == 0
            )
            if (
                self.config.whole_device_exclusive
                and whole
                and names.compute is not None
                and names.compute not in container.limits
                and names.compute not in container.requests
            ):
                additions[names.compute] = "100"
                request = request.model_copy(update={"compute_percent": 100, "exclusive": True})
            base = f"/spec/{field}/{index}/resources"
            if additions:
                if not resources:
                    patches.append({"op": "add", "path": base, "value": {}})
                    resources = {"limits": {}}
                    limits_missing = True
                if limits_missing:
                    patches.append({"op": "add", "path": f"{base}/limits", "value": {}})
                    limits_missing = False
                for resource, value in additions.items():
                    patches.append(
                        {"op": "add", "path": f"{base}/limits/{escape(resource)}", "value": value}
                    )
                    if isinstance(resources.get("requests"), dict):
                        patches.append(
                            {
                                "op": "add",
                                "path": f"{base}/requests/{escape(resource)}",
                                "value": value,
                            }
                        )
            extra = handle.mutate_admission(
                pod=view, container=container, index=index, request=request
            )
            patches.extend(self._vendor_patches(extra, patches, handle.name))
        return patches

    @staticmethod
    def _vendor_patches(
        extra: tuple[JsonPatchOp, ...], mine: list[dict[str, Any]], vendor: str
    ) -> list[dict[str, Any]]:
        taken = {p["path"] for p in mine}
        out = []
        for op in extra:
            if op.path in taken:
                raise PluginError(vendor, f"xpushare_mutate_admission patches {op.path} twice")
            taken.add(op.path)
            out.append(op.model_dump(exclude_none=op.op == "remove"))
        return out

    @staticmethod
    def _check_values(container: ContainerView, handle: VendorHandle, where: str) -> None:
        names = handle.spec.resource_names
        for resource in names.all():
            for source in (container.limits, container.requests):
                raw = source.get(resource)
                if raw is None:
                    continue
                text = raw.strip()
                negative = text.startswith("-")
                try:
                    value = parse_quantity(text[1:] if negative else text)
                    if negative and value != 0:
                        value = -value
                except ValueError:
                    raise AdmissionDenied(
                        f"{where}: {resource} is {raw!r}, which is not a number"
                    ) from None
                if value < 0:
                    raise AdmissionDenied(f"{where}: {resource} is {raw!r}, which is negative")
                if value != value.to_integral_value():
                    raise AdmissionDenied(
                        f"{where}: {resource} is {raw!r}; it must be a whole number"
                    )
        if names.compute:
            raw = container.limits.get(names.compute) or container.requests.get(names.compute)
            if raw is not None and parse_quantity(raw) > 100:
                raise AdmissionDenied(
                    f"{where}: {names.compute} is {raw!r}, but compute is a percent of each "
                    "device: at most 100"
                )
        if names.memory and names.memory_percent:
            has_mib = names.memory in container.limits or names.memory in container.requests
            has_pct = (
                names.memory_percent in container.limits
                or names.memory_percent in container.requests
            )
            if has_mib and has_pct:
                raise AdmissionDenied(
                    f"{where}: asks memory both as {names.memory} (MiB) and as "
                    f"{names.memory_percent} (percent); keep one of them"
                )

    def _check_memory(self, request: ContainerRequest, handle: VendorHandle, where: str) -> None:
        if request.memory_mib is None:
            return
        largest = self.cluster.max_device_memory(handle.name)
        if largest is not None and request.memory_mib > largest:
            raise AdmissionDenied(
                f"{where}: asks {request.memory_mib} MiB of memory per {handle.name} device, but "
                f"the largest {handle.name} device in the cluster has {largest} MiB; ask at "
                "most that, or more devices"
            )
