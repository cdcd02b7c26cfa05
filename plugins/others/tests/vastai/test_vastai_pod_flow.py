"""The whole pod flow with Vastai dies on the fake VAML library.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the dies it detected through the plugin, and
the fake kubelet admitting the pod over the device-plugin gRPC API. The node has a card with
one die and a card with two: a pod asking HAMi's ``vastaitech.com/va: 2`` in die mode gets both
dies of the second card (die mode keeps a pod's dies on one card), their device nodes and the
dies named for Vastai's runtime; a second such pod does not fit while the first runs (one die
is left), and fits once it is deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from others_podflow import refused_then_fits_after_delete

from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.podflow import PodFlow
from xpushare_others.vastai import plugin

NODE = "node-a"
VA = "vastaitech.com/va"
GIB = 1024**3


def _host(**config: Any) -> PluginHost:
    return vendor_host("vastai", plugin.vastai, config, node_name=NODE if config else None)


async def test_vastai_dies_go_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any],
    vaml_lib: Path,
    tmp_path: Path,
    host_tree: Callable[..., Path],
) -> None:
    table_for("FAKE_VAML_TABLE").write(
        {"dies": 1, "mem_total": 16 * GIB}, {"dies": 2, "mem_total": 16 * GIB}
    )
    host = host_tree(tmp_path / "host", 3)
    node = _host(
        library_path=str(vaml_lib),
        search_loader_path=False,
        host_root=str(host),
        device_strategy="die",
    )
    flow = PodFlow(
        node, _host(), vendor="vastai", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    limits = {VA: "2"}
    async with flow:
        assert flow.resource == VA
        first = await flow.schedule(pod("infer", limits=limits))
        main = (await flow.allocate(first))["main"]
        assert main.envs["VASTAI_VISIBLE_DEVICES"] == "1,2"  # both dies of card 1
        assert set(main.device_specs) == {
            "/dev/vacc1", "/dev/va1_ctl", "/dev/va_video1", "/dev/dri/renderD130",
            "/dev/vacc2", "/dev/va2_ctl", "/dev/va_video2", "/dev/dri/renderD131",
            "/dev/vatools", "/dev/va_sync",
        }  # fmt: skip
        assert main.device_specs["/dev/vacc1"] == ("/dev/vacc1", "rw")
        assert main.mounts == {}
        await flow.handoff_served()

        second = await refused_then_fits_after_delete(flow, first, pod("again", limits=limits))
        again = (await flow.allocate(second))["main"]
        assert again.envs["VASTAI_VISIBLE_DEVICES"] == "1,2"
        await flow.handoff_served()
