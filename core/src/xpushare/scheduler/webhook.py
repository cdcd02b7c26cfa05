"""The mutating admission webhook for pods (AdmissionReview v1, JSONPatch; k8s-apis.md §4).

Why: a pod that asks for shared devices must reach our scheduler with a request the node
agent can honour, and a mistake must be refused when the pod is created, with a message its
author can act on, rather than leave the pod pending with a puzzling reason. So, for pods
that ask for a managed resource, it

* refuses what is invalid: non-numeric or negative values, memory in MiB and as a percent,
  memory above the largest device of the vendor in the cluster, a preset ``spec.nodeName``
  (it would skip the scheduler and so the device assignment), malformed
  ``hami.io/device-scoring-weights``; a pod whose own device request alone is past a
  ResourceQuota cap of its namespace (one beside what the namespace books now is admitted
  with a warning: it waits Pending, and /filter decides with the binds in flight);
* takes what HAMi clamps or ignores as HAMi does (compute above 100 is 100, written so in
  the spec; a memory percent above 100 or of 0; a HAMi ``numa-bind`` that is no boolean; a
  policy name or token HAMi does not know) and says what it changed in admission
  ``warnings``, which kubectl prints, so a HAMi user's specs work unchanged;
* refuses isolation bypasses, unless the namespace is allowed by configuration: the
  environment variables that switch HAMi-core's limits off or around
  (``CUDA_DISABLE_CONTROL`` first), set directly or through an ``envFrom`` prefix that could
  form them; privileged containers, capabilities that undo the preload (``CAP_SYS_ADMIN``),
  ``hostPID``; volumes over the paths the enforcement depends on (``/etc/ld.so.preload``,
  HAMi-core's directory, in the container or on the node) as each vendor declares them
  (``xpushare_admission_guard``); and, in pods that ask for no device, privileged containers
  that mount the vendors' device nodes from the node;
* checks ephemeral containers (``kubectl debug``: an UPDATE of ``pods/ephemeralcontainers``)
  against the same environment and privilege rules, and changes nothing else of a running pod;
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xpushare.codec import ASSIGNMENT_KEY
from xpushare.errors import AdmissionDenied, PluginError
from xpushare.models import AdmissionGuard, ContainerRequest, ContainerView, JsonPatchOp, PodView
from xpushare.placement import policy_registry
from xpushare.plugins.builtin.defaults import MAX_PERCENT, hami_leniencies
from xpushare.scheduler import objects as ob
from xpushare.scheduler.bounds import pod_too_large
from xpushare.scheduler.podguard import (
    capability_name,
    holds_device,
    normalize_path,
    prefix_reaches,
    relation,
)
from xpushare.scheduling.podpolicy import policy_warnings
from xpushare.scheduling.quantity import parse_quantity
from xpushare.scheduling.request import PodRequest

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
        # What each vendor's isolation needs refused, asked once: the answer depends on the
        # vendor's configuration only. A vendor whose answer fails has its pods refused (500)
        # rather than admitted with its paths unguarded; other vendors are not affected.
        self._guards: dict[str, AdmissionGuard] = {}
        self._guard_errors: dict[str, PluginError] = {}
        for handle in host.vendors.values():
            try:
                self._guards[handle.name] = handle.admission_guard()
            except PluginError as exc:
                log.error("webhook: %s; pods asking for its devices will be refused", exc)
                self._guard_errors[handle.name] = exc
        self._device_paths = tuple(
            sorted({p for guard in self._guards.values() for p in guard.device_paths})
        )
        self._denied_caps = frozenset(capability_name(c) for c in config.denied_capabilities)
        #: The policies a pod may name in hami.io/node-scheduler-policy.
        self._policy_names = frozenset(policy_registry(host).names())

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
        if isinstance(kind, dict) and kind.get("kind") not in (None, "Pod"):
            return [], []
        operation = request.get("operation")
        subresource = request.get("subResource") or ""
        # kubectl debug adds an ephemeral container to a running pod through this
        # subresource (the object is the whole Pod): the only way a pod's containers change
        # after creation, so the only UPDATE reviewed. Other updates cannot touch env,
        # volumes or security contexts (the API server forbids it).
        debug = operation == "UPDATE" and subresource == "ephemeralcontainers"
        if not debug and (operation != "CREATE" or subresource):
            return [], []
        pod = request.get("object")
        if not isinstance(pod, dict):
            raise AdmissionDenied("the pod object is missing from the admission request")
        namespace = request.get("namespace") or ob.namespace(pod)
        # Before any container is read: a pod past the bound costs its length only
        # (scheduler/bounds.py). Every pod, not only those asking for devices: the isolation
        # rules below read every container, and skipping them would let a pod through.
        too_large = pod_too_large(pod, f"pod {namespace}/{ob.name(pod) or '*'}")
        if too_large is not None:
            raise AdmissionDenied(too_large)
        try:
            view = ob.pod_view(pod)
        except ValueError as exc:
            raise AdmissionDenied(f"the pod is malformed: {exc}") from None
        pod_name = ob.name(pod) or str(ob.meta(pod).get("generateName") or "") + "*"
        who = f"pod {namespace}/{pod_name}"
        asks = self._asks(view)
        if debug:
            new = _new_ephemeral(pod, request.get("oldObject"))
            self._check_isolation(pod, namespace, who, asks, only=new)
            # A running pod: its assignment is real and its spec is fixed; nothing to patch.
            return [], []
        patches: list[dict[str, Any]] = []
        warnings: list[str] = []
        if ASSIGNMENT_KEY in ob.annotations_of(pod):
            patches.append(
                {"op": "remove", "path": f"/metadata/annotations/{escape(ASSIGNMENT_KEY)}"}
            )
        self._check_isolation(pod, namespace, who, asks)
        if not asks:
            return patches, warnings
        try:
            warnings.extend(policy_warnings(view.annotations, self._policy_names))
        except ValueError as exc:
            raise AdmissionDenied(f"{who}: {exc}") from None
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
        requests: list[ContainerRequest] = []
        init: list[ContainerRequest] = []
        for container, index, vendors in asks:
            mine = init if container.init else requests
            patches.extend(
                self._container(pod, view, container, index, vendors, who, warnings, mine)
            )
        warnings.extend(self._quota(namespace, who, requests, init))
        return patches, warnings

    def _quota(
        self,
        namespace: str,
        who: str,
        requests: list[ContainerRequest],
        init: list[ContainerRequest],
    ) -> list[str]:
        """Deny a pod that alone books more than a device quota of its namespace allows;
        warn when what the namespace books now leaves it too little (it waits Pending).

        /filter decides with the binds in flight and the node's devices; this is what can be
        known before: the pod's own request, the quotas and the bound pods' usage.
        """
        quotas = self.cluster.quotas
        if quotas is None or not quotas.limits(namespace) or not (requests or init):
            return []
        pod = PodRequest.build(requests, init=init)
        used = self.cluster.ledger.namespace_usage(namespace)
        denied, warnings = quotas.admission(pod, namespace, used)
        if denied is not None:
            raise AdmissionDenied(f"{who}: {denied}")
        return warnings

    def isolation_problem(self, pod: ob.Object, view: PodView | None = None) -> str | None:
        """Why the isolation rules refuse *pod*, or None when they let it pass.

        The extender asks this of every pod it places: a pod reaches it without this webhook
        having seen it when the webhook was skipped (the ignore label, a namespace the chart
        excludes, ``failurePolicy: Ignore`` while the webhook was down), and such a pod
        must not get devices the webhook would have refused it. *view*: the pod's view, when
        the caller built it already (``objects.pod_view(pod)``).
        """
        if view is None:
            try:
                view = ob.pod_view(pod)
            except ValueError:
                return None  # the extender reports a malformed pod itself
        namespace = ob.namespace(pod)
        try:
            self._check_isolation(
                pod, namespace, f"pod {namespace}/{ob.name(pod)}", self._asks(view)
            )
        except (AdmissionDenied, PluginError) as exc:
            return str(exc)
        return None

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

    def _check_isolation(
        self,
        pod: ob.Object,
        namespace: str,
        who: str,
        asks: list[tuple[ContainerView, int, list[VendorHandle]]],
        only: frozenset[tuple[str, int]] | None = None,
    ) -> None:
        """Refuse what would switch off, bypass or undo the in-container isolation.

        *only*: check just these containers (new ephemeral ones) and no pod-level field,
        which was checked when the pod was created and cannot change since.
        """
        if namespace in self.config.bypass_namespaces:
            return
        own: dict[tuple[str, int], list[VendorHandle]] = {
            ("initContainers" if c.init else "containers", i): vendors for c, i, vendors in asks
        }
        asked = list(dict.fromkeys(h for vendors in own.values() for h in vendors))
        for handle in asked:
            if handle.name in self._guard_errors:
                raise self._guard_errors[handle.name]
        guards = {h.name: self._guards.get(h.name, AdmissionGuard()) for h in asked}
        # Limits only matter on pods that get shares; visibility matters on all.
        env = (*self.config.bypass_env, *(n for g in guards.values() for n in g.env))
        check = _Check(
            patterns=(*self.config.visibility_env, *(env if asks else ())),
            volumes=_volumes(pod),
        )
        for field_name, index, container in ob.all_containers(pod):
            if only is not None and (field_name, index) not in only:
                continue
            where = f"spec.{field_name}[{index}]"
            label = f"{_KIND[field_name]} {str(container.get('name', '?'))!r}"
            self._env(check, container, where, label)
            elevated = self._security(check, container, where, label, bool(asks))
            vendors = own.get((field_name, index), [])
            if vendors:
                self._mounts(check, container, where, label, [guards[h.name] for h in vendors])
            if elevated and not asks:
                self._devices(check, container, where, label)
        if only is None and asks:
            self._pod_level(check, pod, guards)
        if check.problems:
            shown = check.problems[:_MAX_PROBLEMS]
            more = len(check.problems) - len(shown)
            listed = (
                shown[0]
                if len(check.problems) == 1
                else f"{len(check.problems)} problems: "
                + "; ".join(f"{n}) {text}" for n, text in enumerate(shown, 1))
                + (f"; and {more} more" if more else "")
            )
            raise AdmissionDenied(
                f"{who} is refused: {listed}"
                + f". A cluster admin can allow this for namespace {namespace!r} with "
                "webhook.bypass_namespaces"
            )

    @staticmethod
    def _env(check: _Check, container: ob.Object, where: str, label: str) -> None:
        items = container.get("env")
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, dict):
                continue
            var = str(item.get("name", ""))
            if not any(fnmatch.fnmatchcase(var, p) for p in check.patterns):
                continue
            value = item.get("value")
            if var == "CUDA_DISABLE_CONTROL" and isinstance(value, str) and not _truthy_env(value):
                continue
            check.problems.append(
                f"{where}.env[{var}] ({label}) would switch off or bypass the in-container "
                "device isolation: remove it"
            )
        sources = container.get("envFrom")
        for j, source in enumerate(sources if isinstance(sources, list) else ()):
            prefix = source.get("prefix") if isinstance(source, dict) else None
            # Without a prefix the names are the ConfigMap's keys, which no webhook sees:
            # a documented limit, not something to refuse every envFrom for.
            if not isinstance(prefix, str) or not prefix:
                continue
            reached = next((p for p in check.patterns if prefix_reaches(prefix, p)), None)
            if reached is not None:
                check.problems.append(
                    f"{where}.envFrom[{j}].prefix {prefix!r} ({label}) can form {reached} from "
                    "keys the webhook cannot see, which would switch off or bypass the "
                    "in-container device isolation: use a prefix that cannot begin such a "
                    "variable (e.g. APP_)"
                )

    def _security(
        self, check: _Check, container: ob.Object, where: str, label: str, asks: bool
    ) -> bool:
        """Check the security context; whether the container is privileged or holds a
        denied capability (what the device-node rule needs)."""
        security = container.get("securityContext")
        if not isinstance(security, dict):
            return False
        privileged = security.get("privileged") is True
        if privileged and asks and self.config.deny_privileged:
            check.problems.append(
                f"{where}.securityContext.privileged ({label}) sees every device of the node, "
                "not only the shares assigned to it: drop privileged: true"
            )
        capabilities = security.get("capabilities")
        added = capabilities.get("add") if isinstance(capabilities, dict) else None
        denied = [
            c
            for c in (added if isinstance(added, list) else ())
            if capability_name(c) in self._denied_caps
        ]
        if asks:
            for raw in denied:
                check.problems.append(
                    f"{where}.securityContext.capabilities.add[{raw}] ({label}) lets its "
                    "processes undo the preload that enforces the device limits: drop it"
                )
        return privileged or bool(denied)

    @staticmethod
    def _mounts(
        check: _Check, container: ob.Object, where: str, label: str, guards: list[AdmissionGuard]
    ) -> None:
        guarded = list(dict.fromkeys(p for g in guards for p in g.container_paths))
        for key, target in (("volumeMounts", "mountPath"), ("volumeDevices", "devicePath")):
            items = container.get(key)
            for k, item in enumerate(items if isinstance(items, list) else ()):
                raw = item.get(target) if isinstance(item, dict) else None
                if not isinstance(raw, str):
                    continue
                path = normalize_path(raw)
                for protected in guarded:
                    how = relation(path, protected)
                    if how is None:
                        continue
                    check.problems.append(
                        f"{where}.{key}[{k}].{target} {raw!r} ({label}) {_RELATION[how]} "
                        f"{protected}, which the device isolation of its shares depends on: "
                        f"mount the volume elsewhere"
                    )
                    break

    def _devices(self, check: _Check, container: ob.Object, where: str, label: str) -> None:
        items = container.get("volumeMounts")
        for k, item in enumerate(items if isinstance(items, list) else ()):
            name = item.get("name") if isinstance(item, dict) else None
            found = check.volumes.get(name) if isinstance(name, str) else None
            if found is None or found.host_path is None:
                continue
            pattern = next(
                (p for p in self._device_paths if holds_device(found.host_path, p)), None
            )
            if pattern is None:
                continue
            check.problems.append(
                f"spec.volumes[{found.index}].hostPath.path {found.raw_path!r} holds device "
                f"nodes {pattern}, and {where}.volumeMounts[{k}] mounts it in privileged "
                f"{label} of a pod that asks for no managed device, which would use them "
                "behind the scheduler's back: ask for the devices in resources.limits, or "
                "remove the mount"
            )

    @staticmethod
    def _pod_level(check: _Check, pod: ob.Object, guards: dict[str, AdmissionGuard]) -> None:
        spec = ob.spec(pod)
        if spec.get("hostPID") is True:
            check.problems.append(
                "spec.hostPID lets the pod's processes reach every process of the node, those "
                "of other pods sharing its devices included, and their limits: remove "
                "hostPID: true"
            )
        for volume in check.volumes.values():
            if volume.host_path is None:
                continue
            for vendor, guard in guards.items():
                hit = next((p for p in guard.host_paths if relation(volume.host_path, p)), None)
                if hit is None:
                    continue
                mounts = _mounted_by(pod, volume.name)
                check.problems.append(
                    f"spec.volumes[{volume.index}].hostPath.path {volume.raw_path!r} (volume "
                    f"{volume.name!r}"
                    + (f", mounted by {', '.join(mounts)}" if mounts else "")
                    + f") {_HOST_RELATION[relation(volume.host_path, hit) or 'over']} {hit} on the "
                    f"node, which {vendor}'s device isolation depends on (the library, the "
                    "preload file, the accounting of every container): remove the volume"
                )
                break

    def _container(
        self,
        pod: ob.Object,
        view: PodView,
        container: ContainerView,
        index: int,
        vendors: list[VendorHandle],
        who: str,
        warnings: list[str],
        requests: list[ContainerRequest],
    ) -> list[dict[str, Any]]:
        """The container's patches; its requests (as admitted) are added to *requests*."""
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
            lenient = hami_leniencies(handle.spec, view, container)
            warnings.extend(lenient)
            if lenient and names.compute is not None and request.compute_percent == MAX_PERCENT:
                patches.extend(
                    _clamp_compute(
                        resources, names.compute, handle.spec.compute_total, field, index
                    )
                )
            self._check_memory(request, handle, where)
            additions: dict[str, str] = {}
            if names.count not in container.limits and names.count not in container.requests:
                additions[names.count] = str(request.count)
            # HAMi's rule: only where no memory resource is written at all (a memory of 0 is
            # taken as not given, yet its container shares the device). A request naming a
            # partition (a MIG profile) is sized by it: 100 % compute would ask for the whole
            # device's compute, which no instance smaller than the device holds.
            whole = (
                request.partition is None
                and request.memory_mib is None
                and request.memory_percent is None
                and request.compute_percent == 0
                and not any(
                    n is not None and (n in container.limits or n in container.requests)
                    for n in (names.memory, names.memory_percent)
                )
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
            requests.append(request)
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


def _clamp_compute(
    resources: dict[str, Any], resource: str, total: int, field: str, index: int
) -> list[dict[str, Any]]:
    """Patches that write compute above a whole device (*total*: 100 percent for most
    vendors) as the *total* it is taken as (HAMi clamps it), so the spec says what it gets."""
    out = []
    for part in ("limits", "requests"):
        values = resources.get(part)
        if not isinstance(values, dict) or resource not in values:
            continue
        try:
            over = parse_quantity(str(values[resource])) > total
        except ValueError:
            continue
        if over:
            path = f"/spec/{field}/{index}/resources/{part}/{escape(resource)}"
            out.append({"op": "replace", "path": path, "value": str(total)})
    return out


# -- helpers of the isolation rules ---------------------------------------------------------------

#: More refusals than this in one pod are counted, not listed: the message stays readable.
_MAX_PROBLEMS = 5

_KIND = {
    "initContainers": "init container",
    "containers": "container",
    "ephemeralContainers": "ephemeral container",
}

#: How a mount in the container touches a guarded path (podguard.relation)...
_RELATION = {
    "over": "is mounted over",
    "above": "would hide",
    "inside": "is mounted inside",
}
#: ...and how a hostPath volume touches a guarded node path.
_HOST_RELATION = {"over": "is", "above": "holds", "inside": "lies inside"}


@dataclass(frozen=True)
class _Volume:
    index: int
    name: str
    raw_path: str | None
    #: The normalised hostPath, None for any other kind of volume.
    host_path: str | None


@dataclass
class _Check:
    """The state of one pod's isolation check: what is guarded, what was found."""

    patterns: tuple[str, ...]
    volumes: dict[str, _Volume]
    problems: list[str] = field(default_factory=list)


def _volumes(pod: ob.Object) -> dict[str, _Volume]:
    items = ob.spec(pod).get("volumes")
    out: dict[str, _Volume] = {}
    for index, item in enumerate(items if isinstance(items, list) else ()):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        host = item.get("hostPath")
        raw = host.get("path") if isinstance(host, dict) else None
        path = normalize_path(raw) if isinstance(raw, str) else None
        out[item["name"]] = _Volume(index, item["name"], raw if path else None, path)
    return out


def _mounted_by(pod: ob.Object, volume: str) -> list[str]:
    """The field paths of every mount of *volume*, in any kind of container."""
    out = []
    for field_name, index, container in ob.all_containers(pod):
        mounts = container.get("volumeMounts")
        for k, item in enumerate(mounts if isinstance(mounts, list) else ()):
            if isinstance(item, dict) and item.get("name") == volume:
                out.append(f"spec.{field_name}[{index}].volumeMounts[{k}]")
    return out


def _new_ephemeral(pod: ob.Object, old: Any) -> frozenset[tuple[str, int]]:
    """The ephemeral containers an update adds: those whose name the old pod does not have.

    Ephemeral containers can be added, never changed or removed, so the ones already there
    were reviewed when they were added; checking them again would refuse every later debug
    session of a pod whose namespace was allowed then.
    """
    before = {
        str(c.get("name"))
        for f, _, c in ob.all_containers(old if isinstance(old, dict) else {})
        if f == "ephemeralContainers"
    }
    return frozenset(
        (f, i)
        for f, i, c in ob.all_containers(pod)
        if f == "ephemeralContainers" and str(c.get("name")) not in before
    )
