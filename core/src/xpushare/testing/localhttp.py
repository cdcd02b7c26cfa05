"""A small HTTP server on a free local port, for stand-ins of outside services (Prometheus)
in the web view's tests and its screenshots."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

#: An aiohttp handler.
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve_local(routes: Mapping[str, Handler]) -> tuple[web.AppRunner, str]:
    """Answer GET on each path of *routes* with its handler, on 127.0.0.1 and a free port:
    the runner (clean it up) and the server's URL."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"
