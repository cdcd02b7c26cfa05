"""Releasing what a finished pod held: when a pod is gone, each of its vendors frees its part.

Why a tracker of its own: the vendor's allocate hook may create things on the node (an sMLU
instance, a vDCU configuration, a cache directory, a MIG instance) that nothing else frees.
The :class:`~xpushare.node.ledger.ReleaseLedger` remembers every pod allocated here; this
module decides when each has ended and calls ``xpushare_release`` for each of its vendors.

A pod is **ended** when both hold (DESIGN's "correct by construction", not by timing):

1. the API server says so: the pod was deleted (a watch ``DELETED`` event, or a list that no
   longer has its uid) or it is ``Succeeded``/``Failed`` (terminal phases: no container of it
   runs again). A graceful deletion reaches the API only after kubelet stopped the pod's
   containers, so this alone is enough where kubelet cannot be asked;
2. where kubelet's PodResources API answers, kubelet no longer lists the pod (it lists active
   pods only): a force-deleted pod whose containers are still stopping waits for them.

Sources: a pod watch (with a full list at start, after a watch error and every
``reconcile_interval_s``) where the Kubernetes client offers one, else the list alone every
``release_poll_s``; and PodResources every ``release_poll_s``. Each new fact wakes the
release pass, which calls the vendors of every ended pod; a failed release is retried with a
delay that doubles up to :data:`MAX_RETRY_S`. Release is at least once: the ledger notes a
vendor done only after its hook returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from xpushare.errors import PluginError, VendorUnavailable
from xpushare.models import PodRef, ReleaseRequest
from xpushare.native import NativeError
from xpushare.node.kube import KubeError
from xpushare.node.ledger import pod_key

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from xpushare.node.config import NodeConfig
    from xpushare.node.kube import JsonObject, NodeKube
    from xpushare.node.ledger import LedgerPod, ReleaseLedger
    from xpushare.node.podresources import PodResources
    from xpushare.plugins import VendorHandle

log = logging.getLogger(__name__)

#: Phases after which no container of a pod runs again (research/k8s-apis.md, pod phases).
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

#: Longest wait between two attempts to release one pod: five minutes keeps a vendor whose
#: release keeps failing from spinning, and still frees the instance within minutes once
#: the cause is fixed.
MAX_RETRY_S = 300.0

#: Seconds a watch request lasts before the agent starts another: the API server's own
#: default range is 30-60 minutes; five keeps a silently dropped connection from hiding
#: deletions for long.
WATCH_TIMEOUT_S = 300

HOOK = "xpushare_release"


class ReleaseTracker:
    """Watches the ledger's pods and releases each once it has ended (see module docstring)."""

    def __init__(
        self,
        *,
        kube: NodeKube,
        ledger: ReleaseLedger,
        vendors: Mapping[str, VendorHandle],
        config: NodeConfig,
        pod_resources: PodResources | None = None,
        ready: Callable[[str], bool] = lambda vendor: True,
        on_error: Callable[[str], None] = lambda vendor: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.ledger = ledger
        self.node = config.node_name
        self.config = config
        self._vendors = vendors
        self._pod_resources = pod_resources
        self._ready = ready
        self._on_error = on_error
        self._clock = clock
        # Pod keys the API server has said are over, with why; only keys in the ledger.
        self._ended: dict[str, str] = {}
        # What kubelet listed last, or None when it cannot be asked (then the API decides).
        self._active: set[tuple[str, str]] | None = None
        self._active_asked_at = 0.0  # when the list in _active was asked for
        self._kubelet_answered = False
        # When each pod was last allocated by this process: kubelet's list must be newer to
        # speak for it (a pod admitted after the list was taken is simply not in it yet).
        self._allocated_at: dict[str, float] = {}
        self._retry_at: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._wake = asyncio.Event()
        self.released = 0  # vendor releases done by this process (metrics, tests)
        self.api_synced = asyncio.Event()  # the first full list was read

    # -- tasks -------------------------------------------------------------------------------

    def poke(self) -> None:
        """Run the release pass soon (a fact changed)."""
        self._wake.set()

    def allocated(self, key: str) -> None:
        """Pod *key* was just allocated: a kubelet list taken before now cannot speak for it."""
        self._allocated_at[key] = self._clock()
        self.poke()

    async def run_api(self) -> None:
        """Keep the API server's view of the ledger's pods: watch where possible, else poll."""
        watch = getattr(self.kube, "watch_node_pods", None)
        listing = getattr(self.kube, "list_node_pods_at", None)
        while True:
            # Only pods the ledger had before the list was asked for are judged by it: a pod
            # allocated while the list was in flight may be newer than the list.
            known = {entry.key for entry in self.ledger.pods()}
            try:
                if watch is None or listing is None:
                    self._from_list(await self.kube.list_node_pods(), known)
                    await asyncio.sleep(self.config.release_poll_s)
                    continue
                pods, version = await listing()
                self._from_list(pods, known)
                await self._watch(watch, version)
            except KubeError as exc:
                log.warning("release tracker: cannot read the pods of node %s: %s", self.node, exc)
                await asyncio.sleep(self.config.release_poll_s)

    async def _watch(self, watch: Any, version: str) -> None:
        """Follow pod events until the next full list is due or the watch breaks."""
        loop = asyncio.get_running_loop()
        relist_at = loop.time() + self.config.reconcile_interval_s
        while loop.time() < relist_at:
            timeout = max(1, min(WATCH_TIMEOUT_S, int(relist_at - loop.time())))
            async for event in watch(version, timeout):
                obj = event.get("object") or {}
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if event.get("type") == "BOOKMARK":
                    continue
                self._from_event(str(event.get("type")), obj)

    async def run_kubelet(self) -> None:
        """Keep kubelet's list of active pods (PodResources), when it answers."""
        source = self._pod_resources
        if source is None:
            return
        while True:
            asked_at = self._clock()
            active = await source.active()
            self._active_asked_at = asked_at
            if active != self._active:
                self._active = active
            self.poke()
            if active is not None and not self._kubelet_answered:
                self._kubelet_answered = True
                log.info("release tracker: kubelet's PodResources API answers on %s", source.socket)
            await asyncio.sleep(self.config.release_poll_s)

    async def run_release(self) -> None:
        """Release every ended pod whenever a fact changes, and retry failures later."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_retry()):
                    await self._wake.wait()
            self._wake.clear()
            await self.release_ended()

    def _next_retry(self) -> float:
        if not self._retry_at:
            return self.config.reconcile_interval_s
        return max(0.0, min(self._retry_at.values()) - self._clock())

    # -- facts -------------------------------------------------------------------------------

    def _from_list(self, pods: list[JsonObject], known: set[str]) -> None:
        current: dict[str, JsonObject] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            if isinstance(meta, dict):
                current[_key_of(meta)] = pod
        changed = False
        for entry in self.ledger.pods():
            if entry.key not in known:
                continue
            found = current.get(entry.key)
            why = "deleted" if found is None else _terminal(found)
            if why and entry.key not in self._ended:
                self._ended[entry.key] = why
                changed = True
        self.api_synced.set()
        if changed:
            self.poke()

    def _from_event(self, kind: str, pod: JsonObject) -> None:
        meta = pod.get("metadata") or {}
        if not isinstance(meta, dict):
            return
        key = _key_of(meta)
        if self.ledger.get(key) is None or key in self._ended:
            return
        why = "deleted" if kind == "DELETED" else _terminal(pod)
        if why:
            self._ended[key] = why
            self.poke()

    def api_ended(self, key: str) -> str:
        """Why the API server counts pod *key* (a ledger key) as over; ``""`` if it does not."""
        return self._ended.get(key, "")

    def ended(self, entry: LedgerPod) -> str:
        """Why *entry*'s pod counts as ended, or ``""`` while it may still run."""
        why = self._ended.get(entry.key, "")
        if not why:
            return ""
        active = self._active
        if active is None:
            return why  # kubelet cannot be asked: the API server's word decides
        if self._active_asked_at <= self._allocated_at.get(entry.key, -1.0):
            return ""  # kubelet's list is older than the pod's last Allocate: wait for one
        if (entry.pod.namespace, entry.pod.name) in active:
            return ""  # kubelet still lists it: its containers are still stopping
        return why

    # -- releasing ---------------------------------------------------------------------------

    async def release_ended(self) -> int:
        """Release every ended pod that is due; how many vendor releases succeeded."""
        done = 0
        now = self._clock()
        for entry in self.ledger.pods():
            why = self.ended(entry)
            if not why or self._retry_at.get(entry.key, 0.0) > now:
                continue
            failed = False
            for vendor in entry.pending():
                outcome = await self._release(entry, vendor, why)
                if outcome is None:
                    failed = True
                else:
                    done += outcome
            if failed:
                failures = self._failures.get(entry.key, 0) + 1
                self._failures[entry.key] = failures
                delay = min(MAX_RETRY_S, self.config.release_poll_s * 2**failures)
                self._retry_at[entry.key] = self._clock() + delay
            elif self.ledger.get(entry.key) is None:
                self._forget(entry.key)
        return done

    def _forget(self, key: str) -> None:
        self._ended.pop(key, None)
        self._allocated_at.pop(key, None)
        self._retry_at.pop(key, None)
        self._failures.pop(key, None)

    async def _release(self, entry: LedgerPod, vendor: str, why: str) -> int | None:
        """Release *vendor*'s part of *entry*: 1 if its hook ran, 0 if it had none, None if
        it failed or cannot run yet."""
        handle = self._vendors.get(vendor)
        entries = list(entry.vendors.get(vendor) or [])
        if handle is None:
            log.error(
                "pod %s (%s) holds %d allocation(s) of vendor %r, which is not installed in "
                "this node agent: install its plugin again so it can free them, or remove %s",
                entry.pod,
                why,
                len(entries),
                vendor,
                self.ledger.directory / f"{entry.key}.json",
            )
            return None
        if not handle.implements(HOOK):
            await self.ledger.released(entry.key, vendor, len(entries))
            return 0
        if not self._ready(vendor):
            return None  # its library is not started (yet): nothing could be freed
        request = ReleaseRequest(pod=entry.pod, node=self.node, containers=tuple(entries))
        try:
            await handle.arelease(request)
        except (PluginError, NativeError, VendorUnavailable) as exc:
            self._on_error(vendor)
            log.error(
                "vendor %s: releasing pod %s (%s) on node %s failed, retrying later: %s",
                vendor,
                entry.pod,
                why,
                self.node,
                exc,
            )
            return None
        await self.ledger.released(entry.key, vendor, len(entries))
        self.released += 1
        log.info("vendor %s released pod %s (%s) on node %s", vendor, entry.pod, why, self.node)
        return 1


def _key_of(meta: Mapping[str, Any]) -> str:
    try:
        ref = PodRef(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
        )
    except ValueError:
        return ""
    return pod_key(ref)


def _terminal(pod: JsonObject) -> str:
    phase = (pod.get("status") or {}).get("phase")
    return f"phase {phase}" if phase in TERMINAL_PHASES else ""
