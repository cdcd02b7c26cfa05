"""Who may look: a bearer token checked with a TokenReview, then a SubjectAccessReview.

Why Kubernetes' own reviews: the people who may look at the fleet are already described in
the cluster's RBAC, and a token from ``kubectl create token`` or an OIDC login is what they
have. The API server says who a token belongs to (TokenReview) and whether that user may
``get`` the non-resource URL ``/xpushare/web`` (SubjectAccessReview), which a ClusterRole
grants (the chart ships ``xpushare-web-viewer``). Answers are kept per token (by its hash,
never the token itself) for a short time in a bounded cache, so a page polling every second
costs the API server two reviews a minute, and a flood of bogus tokens costs reviews but
never memory. A review the API server cannot answer refuses (503) rather than lets in.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xpushare.scheduler.kube import KubeError

if TYPE_CHECKING:
    from xpushare.scheduler.config import WebAuthConfig
    from xpushare.scheduler.kube import Kube

#: Longest Authorization header value accepted: service-account and OIDC tokens are 1-2 KB;
#: 8 KB is the API server's own header limit per line.
MAX_TOKEN_CHARS = 8192


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a caller may look: HTTP status (200, 401, 403 or 503) and why not."""

    status: int
    message: str = ""
    user: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


ALLOWED = Verdict(200)


class TokenChecker:
    """Reviews bearer tokens against the API server, with a bounded, short-lived cache."""

    def __init__(
        self,
        kube: Kube,
        config: WebAuthConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.config = config
        self._clock = clock
        self._cache: OrderedDict[bytes, tuple[float, Verdict]] = OrderedDict()
        #: Reviews asked of the API server (for tests and operators).
        self.reviews = 0

    def _remember(self, key: bytes, verdict: Verdict) -> Verdict:
        if verdict.status == 503:
            return verdict  # the API server's trouble: ask again next time
        self._cache[key] = (self._clock() + self.config.cache_ttl_s, verdict)
        self._cache.move_to_end(key)
        while len(self._cache) > self.config.cache_size:
            self._cache.popitem(last=False)
        return verdict

    async def check(self, header: str | None) -> Verdict:
        if self.config.mode == "none":
            return ALLOWED
        if not header:
            return Verdict(401, "this view needs a bearer token (Authorization: Bearer ...)")
        if len(header) > MAX_TOKEN_CHARS:
            return Verdict(401, f"the Authorization header is longer than {MAX_TOKEN_CHARS}")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Verdict(401, "the Authorization header must be 'Bearer <token>'")
        key = hashlib.sha256(token.encode()).digest()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > self._clock():
            return hit[1]
        return self._remember(key, await self._review(token))

    async def _review(self, token: str) -> Verdict:
        self.reviews += 1
        try:
            review = await self.kube.create_token_review(token)
        except KubeError as exc:
            return Verdict(503, f"the API server could not review the token: {exc}")
        status: dict[str, Any] = review.get("status") or {}
        if not status.get("authenticated"):
            why = str(status.get("error") or "the API server does not know this token")
            return Verdict(401, f"token not accepted: {why[:200]}")
        user: dict[str, Any] = status.get("user") or {}
        name = str(user.get("username") or "")
        spec: dict[str, Any] = {
            "user": name,
            "groups": [str(g) for g in (user.get("groups") or [])][:256],
            "uid": str(user.get("uid") or ""),
            "nonResourceAttributes": {"path": self.config.path, "verb": self.config.verb},
        }
        extra = user.get("extra")
        if isinstance(extra, dict):
            spec["extra"] = {
                str(k): [str(v) for v in vs][:64] for k, vs in list(extra.items())[:64]
            }
        self.reviews += 1
        try:
            access = await self.kube.create_subject_access_review(spec)
        except KubeError as exc:
            return Verdict(503, f"the API server could not review access: {exc}")
        if not (access.get("status") or {}).get("allowed"):
            return Verdict(
                403,
                f"user {name!r} may not {self.config.verb} {self.config.path}: bind the "
                "ClusterRole <release>-xpushare-web-viewer the chart creates (or one "
                "granting that nonResourceURL)",
                name,
            )
        return Verdict(200, "", name)
