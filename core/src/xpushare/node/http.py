"""``/metrics``, ``/healthz`` and ``/readyz`` of the node agent, on its own event loop.

Why aiohttp on the agent's loop rather than prometheus_client's threaded server: the probes
read the agent's live state (task group, registrations) without locks, and one server
answers all three paths. ``/metrics`` only renders in-memory state (see
:mod:`xpushare.node.metrics`), so it never waits on a vendor library.

* ``/healthz``: 200 while every part of the agent runs; 503 once one failed (the process is
  about to exit) or it is stopping. A liveness probe.
* ``/readyz``: 200 once the inventory is published and every active vendor's device plugin
  is registered with kubelet; 503 with the reasons otherwise (e.g. during kubelet restarts).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from xpushare.node.agent import NodeAgent

_TEXT = "text/plain"


def make_app(agent: NodeAgent) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(agent.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        if agent.group.stopped:
            failed = "; ".join(f"{f.name}: {f.error}" for f in agent.group.failures)
            return web.Response(status=503, text=f"stopping{': ' + failed if failed else ''}\n")
        return web.Response(text="ok\n", content_type=_TEXT)

    async def readyz(request: web.Request) -> web.Response:
        reasons = agent.readiness()
        if reasons:
            return web.Response(status=503, text="\n".join(reasons) + "\n", content_type=_TEXT)
        return web.Response(text="ok\n", content_type=_TEXT)

    app = web.Application(client_max_size=1024)  # probes send no bodies
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def serve_http(agent: NodeAgent) -> None:
    """Serve until cancelled; the bound port is left in ``agent.http_port``."""
    runner = web.AppRunner(make_app(agent), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, agent.config.metrics_host, agent.config.metrics_port)
        await site.start()
        addresses = runner.addresses
        agent.http_port = int(addresses[0][1]) if addresses else agent.config.metrics_port
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
