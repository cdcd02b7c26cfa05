"""A headless Chromium for the web view's end-to-end tests, benchmark and screenshots.

Why Debian's ``chromium`` driven by Playwright through its executable path: nothing may
download a browser here (``scripts/test`` installs the distribution's package when it is
missing), and a fresh profile directory per run keeps one run's state out of the next.
The flags keep the browser from reaching the network on its own (updates, field trials).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from typing import Any

#: Where Debian's package puts the browser; XPUSHARE_CHROMIUM overrides it.
CANDIDATES = ("chromium", "chromium-browser")

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
)


def chromium_path() -> str:
    """The browser's executable; an error that says how to install it when there is none."""
    configured = os.environ.get("XPUSHARE_CHROMIUM")
    if configured:
        return configured
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(
        "no chromium executable found: install Debian's package (apt-get install chromium, "
        "as scripts/test does) or point XPUSHARE_CHROMIUM at one"
    )


@contextlib.asynccontextmanager
async def headless_chromium(width: int = 1400, height: int = 900) -> AsyncIterator[Any]:
    """A Playwright page in a fresh headless Chromium profile; closed on exit."""
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory(prefix="xpushare-chromium-") as profile:
        async with async_playwright() as pw:
            context = await pw.chromium.launch_persistent_context(
                profile,
                executable_path=chromium_path(),
                headless=True,
                args=list(FLAGS),
                viewport={"width": width, "height": height},
            )
            try:
                page = context.pages[0] if context.pages else await context.new_page()
                yield page
            finally:
                await context.close()
