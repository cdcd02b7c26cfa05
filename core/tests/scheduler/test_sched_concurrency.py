"""Many pods filtered and bound at once never over-commit a device (property-based)."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import (
    DevicePlugin,
    add_nodes,
    assignment_of,
    bind_args,
    create_pod,
    filter_args,
    gpu_pod,
    start_scheduler,
)

from xpushare.testing.apiserver import FakeApiServer

SHAPES = st.fixed_dictionaries(
    {
        "gpu": st.sampled_from(["1", "1", "2"]),
        "mem": st.sampled_from([None, "8000", "20000", "40000"]),
        "cores": st.sampled_from([None, "0", "30", "60", "100"]),
    }
)


async def scenario(shapes: list[dict[str, str | None]], seed: int) -> None:
    rng = random.Random(seed)
    async with FakeApiServer() as api:
        names = add_nodes(api, 2, "3x A100-80GB")
        sched = await start_scheduler(api, **{"bind.wait_s": 5.0})
        try:
            pods = []
            for i, shape in enumerate(shapes):
                limits = {k: v for k, v in shape.items() if v is not None}
                pods.append(create_pod(api, gpu_pod(f"p{i}", **limits)))
            await sched.settle(api)
            async with __import__("aiohttp").ClientSession() as http:

                async def schedule(p):
                    # Every pod filters and binds at the same time as every other one.
                    result = await sched.post(http, "filter", filter_args(p, names))
                    if not result["NodeNames"]:
                        return None
                    target = rng.choice(result["NodeNames"])
                    await asyncio.sleep(rng.random() * 0.01)
                    return await sched.post(http, "bind", bind_args(p, target))

                with DevicePlugin(api):
                    outcomes = await asyncio.gather(*(schedule(p) for p in pods))
            await sched.settle(api)
            # The truth is what the API server holds: sum every bound pod's slices per device.
            memory: dict[str, int] = defaultdict(int)
            compute: dict[str, int] = defaultdict(int)
            holders: dict[str, int] = defaultdict(int)
            exclusive: dict[str, int] = defaultdict(int)
            bound = 0
            for i in range(len(pods)):
                assignment = assignment_of(api, f"p{i}")
                if assignment is None:
                    continue
                bound += 1
                for container in assignment.containers:
                    for s in container.devices:
                        memory[s.device_id] += s.memory_mib
                        compute[s.device_id] += s.compute_percent
                        holders[s.device_id] += 1
                        exclusive[s.device_id] += s.exclusive
            assert bound == sum(1 for o in outcomes if o == {"Error": ""})
            for device in holders:
                assert memory[device] <= 80 * 1024, device
                assert compute[device] <= 100, device
                assert holders[device] <= 10, device
                if exclusive[device]:
                    assert holders[device] == 1, device
            ledger = sched.scheduler.ledger
            assert ledger.snapshot() == ledger.recount()
            assert not any(e.reserved for e in ledger.entries())
        finally:
            await sched.close()


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(shapes=st.lists(SHAPES, min_size=4, max_size=14), seed=st.integers(0, 2**16))
def test_concurrent_filters_and_binds_never_overcommit(shapes, seed):
    asyncio.run(scenario(shapes, seed))
