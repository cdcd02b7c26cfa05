"""Which names a request may call the web view by: a check of the Host header.

Why: with ``web.auth.mode: none`` the view trusts whoever reaches its port, which is safe
only while the port is on loopback and reached through ``kubectl port-forward`` (the
configuration refuses any other listen address without the token check: config.WebConfig).
But a port-forward on a laptop is reachable from any web page the browser opens, through DNS
rebinding: a name of the attacker's, resolved first to the attacker's server and then to
127.0.0.1, makes the page same-origin with the view, so its script can read the API. The
browser still sends that name as the Host header, so the view answers 421 to any Host that is
not a loopback name, its configured host or a name of ``web.allowed_hosts``. An IP literal
is always let through: rebinding needs a name (the origin the page runs under), and a reader
who types an address (a pod IP with the token check on) reaches the view as before.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from xpushare.scheduler.config import LOOPBACK_NAMES, is_loopback_host

if TYPE_CHECKING:
    from xpushare.scheduler.config import WebConfig

#: The status a refused Host gets: 421 Misdirected Request (RFC 9110 §15.5.20), "this server
#: does not answer for that authority", which is what a rebound name is.
MISDIRECTED = 421


def _bare(name: str) -> str:
    return name.strip().strip("[]").rstrip(".").lower()


def host_name(header: str) -> str | None:
    """The name in a Host header, without its port, lower case; None when malformed."""
    value = header.strip().lower()
    if value.startswith("["):  # an IPv6 literal: [::1] or [::1]:9396
        end = value.find("]")
        rest = value[end + 1 :] if end > 0 else ":x"
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return value[1:end]
    name, colon, port = value.partition(":")
    if not name or (colon and not port.isdigit()):
        return None
    return name.rstrip(".")


def allowed_names(config: WebConfig) -> frozenset[str]:
    """The names the view answers for besides IP literals: loopback, ``host`` and
    ``web.allowed_hosts``."""
    names = (*LOOPBACK_NAMES, config.host, *config.allowed_hosts)
    return frozenset(_bare(n) for n in names if n.strip())


def host_allowed(header: str | None, names: frozenset[str]) -> bool:
    """Whether a request with this Host header may be answered."""
    name = host_name(header) if header is not None else None
    if name is None:
        return False
    if name in names or is_loopback_host(name):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_middleware(config: WebConfig) -> Middleware:
    """An aiohttp middleware answering 421 to a request for a name the view is not."""
    names = allowed_names(config)

    @web.middleware
    async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Host")
        if host_allowed(header, names):
            return await handler(request)
        return web.json_response(
            {
                "error": f"this web view does not answer for host {header!r}: if you reach it "
                "by that name, add it to web.allowed_hosts (chart: scheduler.web.allowedHosts)"
            },
            status=MISDIRECTED,
            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
        )

    return check_host
