"""Lease-based leader election among scheduler replicas (coordination.k8s.io/v1).

Why: reservations live in one process's memory, so only one replica may decide and bind at a
time; the others keep their caches warm and take over within a lease duration. The protocol
is client-go's (research/k8s-apis.md §7.1): read the Lease, take it when it is free or its
holder has not renewed within ``leaseDurationSeconds`` *as observed by us* (so clock skew
between replicas does not matter), renew every retry period, and step down when a renewal
has not succeeded within the renew deadline. Every write carries the version read, so two
candidates never both win: the loser gets 409 Conflict.

Leadership alone cannot stop a deposed leader that does not know it yet (its loop stalled
after deciding): so each term has a number, the Lease's ``leaseTransitions``, raised by every
change of holder, and :attr:`LeaderElector.term` is the fencing token the bind path writes
with every handoff. Nodes remember the highest term that wrote them and a replica refuses to
write a node that carries a higher one (docs/scheduler.md, "Why no interleaving can
double-book").
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

from xpushare.codec import MAX_TERM
from xpushare.scheduler.kube import Conflict, Kube, KubeError, NotFound

log = logging.getLogger(__name__)


def _transitions(spec: Any) -> int:
    value = spec.get("leaseTransitions") if isinstance(spec, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(0, min(MAX_TERM, value))


def micro_time(when: datetime.datetime | None = None) -> str:
    """Kubernetes MicroTime: RFC 3339 in UTC with six fractional digits."""
    when = when or datetime.datetime.now(datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for one Lease; ``is_leader`` says whether this replica holds it now."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        floor: Callable[[], int] = lambda: 0,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self._on_change = on_change or (lambda leading: None)
        #: The highest term this replica has seen written anywhere (nodes): every new term
        #: is above it, so a Lease deleted and re-created cannot hand out an old number.
        self._floor = floor
        self._clock = clock
        self.is_leader = False
        #: Set once the first round of the protocol has run (won or not): tests and the
        #: start-up wait on it instead of guessing how long a campaign takes.
        self.campaigned = asyncio.Event()
        #: The fencing token of the term this replica holds or held last (None: never held).
        self.term: int | None = None
        self._lease: dict[str, Any] = {}
        self.transitions = 0
        # What we last saw of the lease and when, for the skew-free expiry rule.
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0

    def _set(self, leading: bool) -> None:
        if leading != self.is_leader:
            self.is_leader = leading
            log.info(
                "replica %s %s lease %s/%s",
                self.identity,
                "acquired" if leading else "lost",
                self.namespace,
                self.name,
            )
            self._on_change(leading)

    def _spec(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        now = micro_time()
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration_s)),
            "renewTime": now,
        }
        prev_holder = (previous or {}).get("holderIdentity")
        transitions = _transitions(previous)
        if prev_holder == self.identity and previous is not None and self.is_leader:
            spec["acquireTime"] = previous.get("acquireTime") or now
            spec["leaseTransitions"] = transitions
        else:
            # Every acquisition gets a new term: after another holder, after a holder that
            # was cleared by hand, and after this identity's own lapse (another process of
            # the same identity, or this one before a stall): two writers never share one.
            spec["acquireTime"] = now
            term = transitions + (1 if previous else 0)
            seen = self._floor()
            if seen:
                # A re-created Lease counts from 0 again while nodes remember the terms
                # written before: start above every one of them this replica has seen.
                # One it has not seen yet is caught at the node (handoff.py, Fenced).
                term = max(term, seen + 1)
            spec["leaseTransitions"] = min(MAX_TERM, term)
        return spec

    async def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; True when this replica holds the lease afterwards."""
        now = self._clock()
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None),
            }
            try:
                created = await self.kube.create_lease(self.namespace, body)
            except (Conflict, KubeError) as exc:
                log.debug("creating lease failed: %s", exc)
                return False
            self._held(now, created)
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        observed = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if observed != self._observed:
            self._observed = observed
            self._observed_at = now
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
        if holder and holder != self.identity and now < self._observed_at + duration:
            return False  # held by a live replica
        body = self._update(lease, self._spec(spec))
        try:
            written = await self.kube.replace_lease(self.namespace, self.name, body)
        except KubeError as exc:
            log.debug("updating lease failed: %s", exc)
            return False
        self._held(now, written)
        return True

    def _update(self, lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        """The Lease with *spec*, conditioned on the version *lease* was read at."""
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": (lease.get("metadata") or {}).get("resourceVersion"),
            },
            "spec": spec,
        }

    def _held(self, now: float, lease: dict[str, Any] | None) -> None:
        self._last_renew = now
        self._lease = lease or {}
        self.term = _transitions((lease or {}).get("spec"))

    async def raise_term(self, above: int) -> int | None:
        """Move this replica's term past *above* (a node carries a term this high); the new
        term, or None when this replica does not hold the Lease any more.

        Why it is needed: the Lease may have been deleted and created again (a reinstall),
        restarting its count below what nodes remember, and then no replica could ever write
        those nodes. Why it is safe: the write is a compare-and-swap on the Lease as this
        replica last wrote it, so only the current holder can raise the term, and it fences
        every older term at once.
        """
        lease = self._lease
        if not self.is_leader or not lease or above >= MAX_TERM:
            return None
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return None
        spec["leaseTransitions"] = max(_transitions(spec), above) + 1
        spec["renewTime"] = micro_time()
        body = self._update(lease, spec)
        try:
            written = await self.kube.replace_lease(self.namespace, self.name, body)
        except KubeError as exc:
            # The Lease changed under us: we do not hold it any more, which is the answer.
            log.info("not raising the leadership term above %d: %s", above, exc)
            return None
        self._held(self._clock(), written)
        log.info("leadership term raised to %s (a node carried term %d)", self.term, above)
        return self.term

    async def run(self) -> None:
        """Campaign forever; cancel the task to stop (the lease then expires on its own)."""
        try:
            while True:
                try:
                    held = await self.try_acquire_or_renew()
                except Exception as exc:  # never let a bug end the campaign silently
                    log.warning("leader election round failed: %s", exc)
                    held = False
                self.campaigned.set()
                if held:
                    self._set(True)
                elif self.is_leader:
                    taken = bool(self._observed and self._observed[0] not in ("", self.identity))
                    if taken or self._clock() - self._last_renew > self.renew_deadline_s:
                        self._set(False)
                await asyncio.sleep(self.retry_period_s)
        finally:
            self._set(False)
