"""``xpushare simulate --mig``: the same workload on A100s shared by HAMi-core and cut by MIG."""

from __future__ import annotations

import pytest

from xpushare.plugins import PluginHost
from xpushare.simulator import NodeSpec, Simulation, TaskSpec

A100 = NodeSpec(name="a100-0", cpu_milli=96000, memory_mib=786432, gpus=1, model="A100")


def run(mig: tuple[str, ...]) -> tuple[int, int]:
    # Ten tenth-of-a-GPU tasks on one A100 (arrivals stop at 100 % of the fleet's GPUs).
    tasks = [TaskSpec(name=f"t{i}", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=100)
             for i in range(10)]  # fmt: skip
    host = PluginHost.from_environment()
    sim = Simulation([A100], tasks, host=host, inflation=1.0, mig_models=mig)
    result = sim.run("binpack", seed=1)
    return result.tasks_placed, result.tasks_arrived


def test_hami_core_shares_what_mig_must_round_up() -> None:
    # HAMi-core: ten shares of 10 % fit one GPU. MIG: each task takes a 1g instance (13 % of
    # the SMs, 9.5 GiB): seven fit, the eighth finds no placement.
    assert run(()) == (10, 10)
    assert run(("A100",)) == (7, 10)


def test_a_model_without_a_geometry_is_refused() -> None:
    with pytest.raises(ValueError, match="no MIG geometry for GPU model"):
        run(("T4",))


def test_a_mig_gpu_counts_its_free_slices_not_its_free_shares() -> None:
    # Six tenth-of-a-GPU tasks on one A100 (arrivals stop at 60 %). HAMi-core: 400 units
    # free, all usable by the 10 % shape. MIG: six 1g instances leave one compute slice
    # (1000 // 7 = 142 units, not the 220 their rounded shares leave), and a seventh 1g
    # fits there: none fragmented.
    tasks = [TaskSpec(name=f"t{i}", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=100)
             for i in range(6)]  # fmt: skip
    host = PluginHost.from_environment()
    for mig, free in (((), 0.4), (("A100",), 0.142)):
        sim = Simulation([A100], tasks, host=host, inflation=0.6, target=0.6, mig_models=mig)
        result = sim.run("fgd-cpu", seed=1)
        assert result.tasks_placed == 6
        assert result.free_gpus == pytest.approx(free)
        assert result.fragmentation_gpus == 0


def test_a_fleet_with_gpus_outside_mig_replays() -> None:
    # A100s in MIG mode beside T4s shared by HAMi-core: the NVIDIA fit decides on the A100s,
    # the core's on the T4s, whose verdicts the nodes share per state (the replay raised
    # KeyError reading them from the nodes' own memos, which only the first node of a
    # state gets).
    t4s = [NodeSpec(name=f"t4-{n}", cpu_milli=96000, memory_mib=786432, gpus=4, model="T4")
           for n in range(3)]  # fmt: skip
    tasks = [TaskSpec(name=f"t{i}", cpu_milli=1000, memory_mib=1024, num_gpu=1,
                      gpu_milli=100 * (1 + i % 5)) for i in range(20)]  # fmt: skip
    host = PluginHost.from_environment()
    sim = Simulation([A100, *t4s], tasks, host=host, inflation=1.0, mig_models=("A100",))
    for policy in ("binpack", "fgd-cpu"):
        result = sim.run(policy, seed=1)
        assert result.tasks_placed > 7  # more than the A100's seven 1g instances
