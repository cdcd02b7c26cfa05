"""Issue 31, defect 6: the web view shared the extender's event loop. It has its own now.

Two behaviours, counted, not timed: the web view answers while the scheduler's loop is held
(a vendor hook that blocks inside /filter until the test lets it go, so the old code, whose
web view was on that loop, could never answer); and while a what-if too large for one slice
is worked out, /filter keeps being answered between its slices.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import urllib.request
from typing import Any

from sched_helpers import MEM, Running, add_nodes, filter_args, gpu_pod, mock_host
from web_helpers import WEB, web_url

from xpushare import API_VERSION, hookimpl
from xpushare.models import ContainerRequest, ContainerView, PodView, ResourceNames, VendorSpec
from xpushare.scheduler import Scheduler, load_config
from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.scheduler.shortlist import DEFAULT_SHORTLIST
from xpushare.testing.apiserver import FakeApiServer

STALL = "stall.example/gpu"


class Stall:
    """A vendor whose request parse waits for the test: it holds whatever loop parses."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    @hookimpl
    def xpushare_vendor(self) -> VendorSpec:
        return VendorSpec(
            name="stall", api_version=API_VERSION, resource_names=ResourceNames(count=STALL)
        )

    @hookimpl
    def xpushare_resource_request(
        self, vendor: VendorSpec, pod: PodView, container: ContainerView
    ) -> ContainerRequest | None:
        self.entered.set()
        # Bounded, so a broken test cannot hang the run: the test releases it at once.
        self.release.wait(30)
        return ContainerRequest(vendor="stall", container=container.name, count=1)


async def start(api: FakeApiServer, stall: Stall) -> Running:
    settings = {
        "server.host": "127.0.0.1",
        "server.port": 0,
        "server.metrics_port": 0,
        "leader.enabled": False,
        **WEB,
    }
    config = load_config(environ={}, overrides=settings)
    kube = await Kube.connect(KubeSettings(server=api.url))
    host = mock_host()
    host.register("stall", stall)
    scheduler = Scheduler(config, host=host, kube=kube, freeze_gc=False)
    await scheduler.start()
    await scheduler.wait_synced(10)
    return Running(scheduler, kube, f"http://127.0.0.1:{scheduler.ports['main']}", None)


async def test_the_web_view_answers_while_the_schedulers_loop_is_held(api, http):
    stall = Stall()
    sched = await start(api, stall)
    try:
        url = web_url(sched)
        answered: list[int] = []

        def look() -> None:
            # From a thread of the test's own: the test's loop is the scheduler's, held.
            try:
                assert stall.entered.wait(30)
                for path in ("/api/v1/openapi.json", "/"):
                    with urllib.request.urlopen(url + path, timeout=10) as r:
                        answered.append(r.status)
            finally:
                stall.release.set()

        looker = threading.Thread(target=look)
        looker.start()
        held = gpu_pod("held")
        held["spec"]["containers"][0]["resources"] = {"limits": {STALL: "1"}}
        # Inline on the scheduler's loop: the hook holds it until the looker is done.
        result = await sched.post(http, "filter", filter_args(held, ["node-x"]))
        await asyncio.to_thread(looker.join)
        assert answered == [200, 200]
        assert "node-x" in result["FailedAndUnresolvableNodes"]
        names = {t.name for t in threading.enumerate()}
        assert "xpushare-web" in names
    finally:
        stall.release.set()
        await sched.close()
    assert "xpushare-web" not in {t.name for t in threading.enumerate()}


async def test_filters_are_answered_while_a_whatif_is_worked_out(api, scheduler_factory, http):
    sched = await scheduler_factory(**WEB)
    names = add_nodes(api, 2_000)
    await sched.settle(api)
    policy = sched.scheduler.placer.policy
    seen = policy.learnt.seen
    # A what-if at the container bound, every container a demand of its own kind, against
    # 2,000 nodes: 500 slices of work on the scheduler's loop.
    wide = gpu_pod("wide", gpu="1")
    first = wide["spec"]["containers"][0]
    wide["spec"]["containers"] = [{**copy.deepcopy(first), "name": f"c{i}"} for i in range(256)]
    for i, c in enumerate(wide["spec"]["containers"]):
        c["resources"]["limits"][MEM] = str(100 + i)
    normal = filter_args(gpu_pod("normal", gpu="1", mem="1000"), names[:500])

    async def whatif() -> Any:
        async with http.post(f"{web_url(sched)}/api/v1/whatif", json=wide) as r:
            assert r.status == 200, await r.text()
            return await r.json()

    task = asyncio.create_task(whatif())
    answered = 0
    while not task.done():
        result = await sched.post(http, "filter", normal)
        # Every one of the 500 fits; /filter passes on its shortlist of them.
        assert len(result["NodeNames"]) == DEFAULT_SHORTLIST
        assert set(result["NodeNames"]) <= set(names[:500]) and not result["FailedNodes"]
        answered += 1
    explanation = await task
    assert explanation["nodes_considered"] == len(names)
    assert explanation["filter"]["NodeNames"] == []
    assert answered >= 10, answered
    # A look teaches nothing and books nothing: only the pod of the /filter calls was learnt
    # from, once however often it was asked about.
    assert policy.learnt.seen == seen + 1
    assert sched.scheduler.ledger.entry("default/wide") is None
