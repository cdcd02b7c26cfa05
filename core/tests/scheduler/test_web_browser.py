"""The web view in a real headless Chromium against a fleet on the fake API server.

What a person sees must be what the scheduler decides by: the page's numbers are the
ledger's, a bind shows up without a reload, a Pending pod's explanation is ``xpushare fit``'s
and the what-if answer is /filter's. Waits are bounded (a broken page fails, it does not
hang) but nothing is timed: the speed targets are the benchmark's (bench_web.py).
"""

from __future__ import annotations

import json

from sched_helpers import add_nodes, bind_args, create_pod, filter_args, gpu_node, gpu_pod
from web_helpers import WEB, fit_cli, fit_document, ledger_sums, web_url

from xpushare.testing.browser import headless_chromium

#: Bound of a wait for the page (ends at once when the page works).
WAIT_MS = 15_000


async def _fleet(api, scheduler_factory):
    add_nodes(api, 3)
    api.put("nodes", gpu_node("small-0", "4x V100-32GB"))
    sched = await scheduler_factory(**WEB)
    await sched.settle(api)
    return sched


async def _summary_on_page(page):
    rows = await page.query_selector_all("[data-testid=summary-row]")
    out = {}
    for row in rows:
        key = (await row.get_attribute("data-vendor"), await row.get_attribute("data-model"))
        cells = await row.query_selector_all("td[data-k]")
        out[key] = {await c.get_attribute("data-k"): await c.inner_text() for c in cells}
    return out


async def test_fleet_page_shows_the_ledger_and_a_bind_without_reload(api, scheduler_factory, http):
    sched = await _fleet(api, scheduler_factory)
    first = create_pod(api, gpu_pod("a", gpu="2", mem="30000", cores="40"))
    assert (await sched.post(http, "bind", bind_args(first, "node-0"))) == {"Error": ""}
    await sched.settle(api)
    async with headless_chromium() as page:
        await page.goto(web_url(sched) + "/#/fleet")
        await page.wait_for_selector("[data-testid=summary-row]", timeout=WAIT_MS)
        shown = await _summary_on_page(page)
        expected = ledger_sums(sched.scheduler.ledger)
        assert set(shown) == set(expected)
        for key, sums in expected.items():
            for field, value in sums.items():
                assert int(shown[key][field]) == value, (key, field)
        # One cell per device, one row per node.
        assert len(await page.query_selector_all("[data-testid=node-row]")) == 4
        assert len(await page.query_selector_all("#heat i[data-d]")) == 3 * 8 + 4
        # A bind shows up without a reload: the same document, updated by its poll.
        await page.evaluate("window.__same_document = 1")
        second = create_pod(api, gpu_pod("b", gpu="1", mem="8000", cores="25"))
        assert (await sched.post(http, "bind", bind_args(second, "small-0"))) == {"Error": ""}
        await sched.settle(api)
        cell = "[data-testid=summary-row][data-model='V100-32GB'] td[data-k=memory_used_mib]"
        await page.wait_for_function(
            "(cell) => document.querySelector(cell).textContent === '8000'",
            arg=cell,
            timeout=WAIT_MS,
        )
        assert await page.evaluate("window.__same_document") == 1
        # A filter is in the URL: the link shows the same view.
        await page.goto(web_url(sched) + "/#/fleet?model=V100-32GB")
        await page.wait_for_function(
            "() => document.querySelectorAll('[data-testid=node-row]').length === 1",
            timeout=WAIT_MS,
        )
        assert "1 of 4 nodes" in await page.inner_text("[data-testid=shown]")
        # The node page: every device's booking as the ledger has it, and the shares.
        await page.goto(web_url(sched) + "/#/node/node-0")
        await page.wait_for_selector("[data-testid=share-row]", timeout=WAIT_MS)
        usage = sched.scheduler.ledger.device_usage("node-0", "mock")
        for row in await page.query_selector_all("[data-testid=device-row]"):
            device = await row.get_attribute("data-id")
            used = await (await row.query_selector("td[data-k=memory_used_mib]")).inner_text()
            assert int(used) == usage[device].used_memory_mib
        shares = await page.query_selector_all("[data-testid=share-row]")
        assert len(shares) == 2
        assert "default/a" in await shares[0].inner_text()


async def test_pending_pod_page_explains_as_xpushare_fit(api, scheduler_factory, http):
    sched = await _fleet(api, scheduler_factory)
    names = list(sched.scheduler.ledger.nodes)
    huge = create_pod(api, gpu_pod("huge", gpu="1", mem="90000", cores="10"))
    await sched.post(http, "filter", filter_args(huge, names))
    await sched.scheduler.events.flush()
    policy = sched.scheduler.placer.policy.name
    async with headless_chromium() as page:
        await page.goto(web_url(sched) + "/#/pod/default/huge")
        await page.wait_for_selector("[data-testid=fit]", timeout=WAIT_MS)
        summary = await page.inner_text("[data-testid=summary-line]")
        assert summary.startswith("no node has the devices this pod asks for")
        fits = await page.query_selector_all("[data-testid=fit]")
        assert fits
        for block in fits:
            node = await block.get_attribute("data-node")
            want = fit_cli(
                fit_document(sched.scheduler.ledger, node, api.get("pods", "huge"), policy)
            )
            verdict = await (await block.query_selector("[data-testid=verdict]")).inner_text()
            assert verdict == ("FITS" if want["fits"] else "DOES NOT FIT")
            why = await (await block.query_selector("[data-testid=why]")).inner_text()
            assert why == want["reason"]
            shown = {}
            for row in await block.query_selector_all("[data-testid=reason]"):
                reason, count = [await c.inner_text() for c in await row.query_selector_all("td")]
                shown[reason] = int(count)
            assert shown == {r: n for c in want["containers"] for r, n in c["reasons"].items()}
        events = await page.query_selector_all("[data-testid=event] td[data-k=reason]")
        assert [await e.inner_text() for e in events] == ["NoDeviceFit"]


async def test_whatif_page_answers_as_filter(api, scheduler_factory, http):
    sched = await _fleet(api, scheduler_factory)
    manifest = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: probe, namespace: team}\nspec:\n"
        "  containers:\n  - name: main\n    resources:\n      limits:\n"
        "        xpushare.io/mock-gpu: '1'\n        xpushare.io/mock-gpumem: '40000'\n"
    )
    async with headless_chromium() as page:
        await page.goto(web_url(sched) + "/#/whatif")
        await page.fill("[data-testid=whatif-spec]", manifest)
        await page.click("[data-testid=whatif-go]")
        await page.wait_for_selector("#whatif-result[data-done]", timeout=WAIT_MS)
        shown = json.loads(await page.text_content("[data-testid=filter-json]"))
        spec = gpu_pod("probe", namespace="team", gpu="1", mem="40000")
        real = await sched.post(
            http, "filter", filter_args(spec, list(sched.scheduler.ledger.nodes))
        )
        assert shown == real
        assert sorted(shown["NodeNames"]) == ["node-0", "node-1", "node-2"]
        best = await page.inner_text("[data-testid=best-node]")
        ranked = await page.query_selector_all("[data-testid=ranked] a")
        assert best == await ranked[0].inner_text()
        # The spec is in the URL: the link, opened afresh, gives the same answer.
        link = page.url
        await page.goto("about:blank")
        await page.goto(link)
        await page.wait_for_selector("#whatif-result[data-done]", timeout=WAIT_MS)
        again = json.loads(await page.text_content("[data-testid=filter-json]"))
        assert again == real
        assert api.get("pods", "probe", "team") is None
        # Search from the header finds nodes and links them.
        await page.fill("#quick-q", "small")
        await page.press("#quick-q", "Enter")
        await page.wait_for_selector("[data-testid=node-hit]", timeout=WAIT_MS)
        assert await page.inner_text("[data-testid=node-hit]") == "small-0"
