"""The web view in a real headless Chromium against a fleet on the fake API server.

What a person sees must be what the scheduler decides by: the page's numbers are the
ledger's, a bind shows up without a reload, a Pending pod's explanation is ``xpushare fit``'s
and the what-if answer is /filter's. Waits are bounded (a broken page fails, it does not
hang) but nothing is timed: the speed targets are the benchmark's (bench_web.py).
"""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from sched_helpers import add_nodes, bind_args, create_pod, filter_args, gpu_node, gpu_pod
from web_helpers import WEB, fake_prometheus, fit_cli, fit_document, ledger_sums, web_url

from xpushare.testing.browser import headless_chromium

#: Bound of a wait for the page (ends at once when the page works).
WAIT_MS = 15_000
#: Bound of the wait for a scheduler to list 5,000 nodes (some 10 s on 2 shared cores).
SYNC_5000_S = 90


async def _fleet(api, scheduler_factory):
    add_nodes(api, 3)
    api.put("nodes", gpu_node("small-0", "4x V100-32GB"))
    sched = await scheduler_factory(**WEB)
    await sched.settle(api)
    return sched


async def _overview_on_page(page):
    """Each (vendor, model) card's figures, as the raw values the page shows (data-v)."""
    out = {}
    for card in await page.query_selector_all("[data-testid=overview-card]"):
        key = (await card.get_attribute("data-vendor"), await card.get_attribute("data-model"))
        figures = await card.query_selector_all("[data-k]")
        out[key] = {
            await f.get_attribute("data-k"): float(await f.get_attribute("data-v")) for f in figures
        }
    return out


def _at_a_glance(ledger):
    """The overview's figures per (vendor, model), from the ledger's own public reads."""
    out = {}
    for key, sums in ledger_sums(ledger).items():
        idle = 0
        for name in ledger.nodes:
            for device in ledger.devices(name):
                if (device.vendor, device.model) != key:
                    continue
                usage = ledger.device_usage(name, device.vendor)[device.id]
                busy = usage.used_slots or usage.used_memory_mib or usage.used_compute_percent
                idle += int(device.healthy and not busy)
        out[key] = {
            "memory_alloc": sums["memory_used_mib"] / sums["memory_cap_mib"],
            "compute_alloc": sums["compute_used_percent"] / sums["compute_cap_percent"],
            "idle": idle,
            "unhealthy": sums["devices"] - sums["healthy"],
        }
    return out


async def test_fleet_page_shows_the_ledger_and_a_bind_without_reload(api, scheduler_factory, http):
    sched = await _fleet(api, scheduler_factory)
    first = create_pod(api, gpu_pod("a", gpu="2", mem="30000", cores="40"))
    assert (await sched.post(http, "bind", bind_args(first, "node-0"))) == {"Error": ""}
    await sched.settle(api)
    async with headless_chromium() as page:
        await page.goto(web_url(sched) + "/#/fleet")
        await page.wait_for_selector("main[data-heat]", timeout=WAIT_MS)
        shown = await _overview_on_page(page)
        expected = _at_a_glance(sched.scheduler.ledger)
        assert set(shown) == set(expected)
        for key, figures in expected.items():
            for field, value in figures.items():
                assert shown[key][field] == pytest.approx(value), (key, field)
        # Every device a cell of the heat map, every node a row of the table (top 20).
        heat = await page.get_attribute("[data-testid=heatmap]", "data-cells")
        assert int(heat) == 3 * 8 + 4
        assert len(await page.query_selector_all("[data-testid=node-row]")) == 4
        # No Prometheus configured: no chart over time, and the setting that turns it on.
        await page.wait_for_selector("[data-testid=history-off]", timeout=WAIT_MS)
        assert "web.prometheus_url" in await page.inner_text("[data-testid=history-off]")
        assert await page.query_selector("[data-testid=history-chart]") is None
        # A bind shows up without a reload: the same document, updated by its poll.
        await page.evaluate("window.__same_document = 1")
        second = create_pod(api, gpu_pod("b", gpu="1", mem="8000", cores="25"))
        assert (await sched.post(http, "bind", bind_args(second, "small-0"))) == {"Error": ""}
        await sched.settle(api)
        card = "[data-testid=overview-card][data-model='V100-32GB'] [data-k=idle]"
        await page.wait_for_function(
            "(card) => document.querySelector(card).dataset.v === '3'",
            arg=card,
            timeout=WAIT_MS,
        )
        assert await page.evaluate("window.__same_document") == 1
        # The table sorts by pods: the node with two pods first.
        await page.click("[data-testid=node-table] a[data-sort=pods]")
        await page.wait_for_function(
            "() => location.hash.includes('sort=pods')"
            " && document.querySelector('[data-testid=node-row]')?.dataset.node === 'node-0'",
            timeout=WAIT_MS,
        )
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


async def test_fleet_page_charts_allocated_against_used_from_prometheus(api, scheduler_factory):
    async def answer(request):
        start, step = float(request.query["start"]), int(request.query["step"])
        # Allocated rises to 1.5 TiB; used holds at 700 GiB.
        values = (
            [1024 * 1024, 1536 * 1024] if "allocated" in request.query["query"] else [700 * 1024]
        )
        points = [[start + i * step, str(v)] for i, v in enumerate(values)]
        result = [{"metric": {}, "values": points}]
        return web.json_response({"data": {"resultType": "matrix", "result": result}})

    add_nodes(api, 1)
    runner, url = await fake_prometheus("/api/v1/query_range", answer)
    try:
        sched = await scheduler_factory(**WEB, **{"web.prometheus_url": url})
        await sched.settle(api)
        async with headless_chromium() as page:
            await page.goto(web_url(sched) + "/#/fleet")
            await page.wait_for_selector(
                "[data-testid=history-chart][data-points]", timeout=WAIT_MS
            )
            chart = "[data-testid=history-chart]"
            assert await page.get_attribute(chart, "data-points") == "2,1"
            assert await page.inner_text("[data-testid=history-allocated]") == "1.5 TiB"
            assert await page.inner_text("[data-testid=history-used]") == "700 GiB"
    finally:
        await runner.cleanup()


@pytest.mark.slow
async def test_the_heat_map_holds_every_device_of_5000_nodes_on_one_screen(api, scheduler_factory):
    """At 5,000 nodes x 8 GPUs the fleet page was an 80,000-pixel list. Now every device is
    one cell of a canvas that fits the screen, and a click on a cell opens its node."""
    for i in range(5_000):
        api.put("nodes", gpu_node(f"n{i:04d}"))
    sched = await scheduler_factory(sync=False, **WEB)
    await sched.scheduler.wait_synced(SYNC_5000_S)
    await sched.settle(api, SYNC_5000_S)
    async with headless_chromium(1400, 900) as page:
        await page.goto(web_url(sched) + "/#/fleet")
        await page.wait_for_selector("main[data-heat]", timeout=60_000)
        canvas = await page.query_selector("[data-testid=heatmap]")
        assert int(await canvas.get_attribute("data-cells")) == 5_000 * 8
        box = await canvas.bounding_box()
        assert box["height"] <= 900 and box["width"] <= 1400
        assert int(await page.get_attribute("[data-testid=heatmap]", "data-cell")) >= 2
        figures = await _overview_on_page(page)
        assert figures[("mock", "A100-80GB")]["idle"] == 5_000 * 8
        # The 8,001st cell is the first device of the 1,001st node.
        size = int(await canvas.get_attribute("data-cell"))
        per_row = int(await canvas.get_attribute("data-per-row"))
        k = 8_000
        await page.mouse.click(
            box["x"] + (k % per_row) * size + size / 2, box["y"] + (k // per_row) * size + size / 2
        )
        await page.wait_for_selector("[data-testid=node-name]", timeout=WAIT_MS)
        assert await page.inner_text("[data-testid=node-name]") == "n1000"


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
        # 90,000 MiB on 80 and 32 GB cards: no device is that large, and the page says so.
        assert summary.startswith("no node can ever hold this pod: 90,000 MiB per mock device")
        assert "larger than any mock device" in await page.inner_text("[data-testid=too-large]")
        # One line per reason, with its count: the four nodes share one reason.
        groups = await page.query_selector_all("[data-testid=reason-group]")
        counts = [await (await g.query_selector("[data-k=count]")).inner_text() for g in groups]
        assert counts == ["4"]
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


async def test_pending_summary_is_each_reason_once_and_the_long_text_once(
    api, scheduler_factory, http
):
    """Four nodes refuse for one reason in four wordings ("2/8 devices usable", ...): the
    summary repeated "not enough free device memory" four times in /filter's words, and each
    minute's identical event was a row of its own with the whole message again."""
    add_nodes(api, 4)
    sched = await scheduler_factory(**WEB)
    await sched.settle(api)
    for i, used in enumerate((2, 4, 6, 8)):
        taken = create_pod(api, gpu_pod(f"p{i}", gpu=str(used), mem="60000"))
        assert await sched.post(http, "bind", bind_args(taken, f"node-{i}")) == {"Error": ""}
    await sched.settle(api)
    wide = create_pod(api, gpu_pod("wide", gpu="8", mem="30000"))
    assert (
        await sched.post(http, "filter", filter_args(wide, list(sched.scheduler.ledger.nodes)))
    )["NodeNames"] == []
    await sched.scheduler.events.flush()
    [event] = [e for e in api.items("events") if e["involvedObject"]["name"] == "wide"]
    for minute in (1, 2):  # the same refusal a minute and two later (events.py's window)
        again = json.loads(json.dumps(event))
        again["metadata"]["name"] += f"-{minute}"
        again["lastTimestamp"] = f"2099-01-01T00:0{minute}:00Z"
        api.put("events", again)
    async with headless_chromium() as page:
        await page.goto(web_url(sched) + "/#/pod/default/wide")
        await page.wait_for_selector("[data-testid=fit]", timeout=WAIT_MS)
        summary = await page.inner_text("[data-testid=summary-line]")
        assert summary == "0/4 nodes fit; 4 do not: not enough free device memory (4)"
        rows = await page.query_selector_all("[data-testid=event]")
        assert len(rows) == 1
        assert await (await rows[0].query_selector("[data-k=count]")).inner_text() == "3"
        # The event's long text is on the page once, folded: its head shows, not its whole.
        message = event["message"]
        assert len(message) > 400
        assert (await page.text_content("main")).count(message) == 1
        visible = await page.inner_text("main")
        assert message not in visible
        long = await page.query_selector("[data-testid=event-long]")
        assert await long.get_attribute("open") is None
        await (await long.query_selector("summary")).click()
        assert message in await page.inner_text("main")


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
