"""Reading fleets and workloads: the openb CSV format and our YAML/JSON format."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from xpushare.placement import Placer
from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.plugins.builtin import mock as mock_plugin
from xpushare.scheduling import UsageLedger
from xpushare.simulator import TraceError, read_nodes, read_tasks
from xpushare.simulator.datasets import SAMPLE_NODES, SAMPLE_PODS
from xpushare.simulator.fleet import node_devices, pod_view

NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
openb-node-0001,64000,262144,2,P100
openb-node-0002,96000,393216,8,G2
openb-node-0003,32000,131072,0,
"""
PODS_CSV = (
    (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
    )
    + """openb-pod-0001,12000,16384,1,1000,,LS,Running,0,1,0
openb-pod-0002,6000,12288,1,460,V100M16|V100M32,LS,Running,0,1,0
openb-pod-0003,8000,30517,0,0,,BE,Running,0,1,0
openb-pod-0004,32000,65536,8,1000,G2,LS,Running,0,1,0
"""
)


def test_openb_csv_files_plain_and_gzipped(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    with gzip.open(tmp_path / "pods.csv.gz", "wt") as fh:
        fh.write(PODS_CSV)
    nodes = read_nodes(tmp_path / "nodes.csv")
    assert [(n.name, n.gpus, n.model, n.cpu_milli) for n in nodes] == [
        ("openb-node-0001", 2, "P100", 64000),
        ("openb-node-0002", 8, "G2", 96000),
        ("openb-node-0003", 0, "", 32000),
    ]
    tasks = read_tasks(tmp_path / "pods.csv.gz")
    assert [(t.num_gpu, t.gpu_milli, t.gpu_spec) for t in tasks] == [
        (1, 1000, ()),
        (1, 460, ("V100M16", "V100M32")),
        (0, 0, ()),
        (8, 1000, ("G2",)),
    ]
    assert tasks[1].gpus == pytest.approx(0.46)


def test_multigpu50_style_files_without_the_optional_columns(tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1000,10,2,1000\n"
    )
    [task] = read_tasks(tmp_path / "p.csv")
    assert (task.num_gpu, task.gpu_spec) == (2, ())


def test_our_yaml_format_with_counts(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(
        "nodes:\n"
        "  - {name: a100-, count: 3, cpu_milli: 64000, memory_mib: 262144, gpus: 8,\n"
        "     model: A100, gpu_memory_mib: 81920, share_slots: 10, numa_nodes: 2}\n"
    )
    (tmp_path / "tasks.json").write_text(
        '{"tasks": [{"name": "infer-", "count": 2, "cpu_milli": 4000, "num_gpu": 1,'
        ' "gpu_milli": 250, "gpu_spec": ["A100"]}]}'
    )
    nodes = read_nodes(tmp_path / "fleet.yaml")
    assert [n.name for n in nodes] == ["a100-0", "a100-1", "a100-2"]
    devices = node_devices(nodes[0])
    assert len(devices) == 8 and devices[0].memory_mib == 81920 and devices[0].share_slots == 10
    assert [d.numa_node for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    tasks = read_tasks(tmp_path / "tasks.json")
    assert [t.name for t in tasks] == ["infer-0", "infer-1"] and tasks[0].gpu_spec == ("A100",)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1000,10,2,500\n", "whole GPUs"),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,lots,10,1,500\n",
            "'cpu_milli' must be a number",
        ),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1,10,1,1500\n", "gpu_milli in 0..1000"),
    ],
)
def test_bad_rows_name_the_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "p.csv").write_text(content)
    with pytest.raises(TraceError, match=message) as err:
        read_tasks(tmp_path / "p.csv")
    assert "p.csv:2" in str(err.value)


def test_tasks_become_the_pod_specs_a_user_would_write() -> None:
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("mock", mock_plugin)
    names = host.vendor("mock").spec.resource_names
    placer = Placer(UsageLedger(), "binpack", host=host)
    from xpushare.simulator import TaskSpec

    share = placer.request(
        pod_view(TaskSpec("s", 6000, 12288, 1, 460, ("V100M16", "V100M32")), names)
    )
    [d] = share.demands
    assert (d.memory_percent, d.compute, d.exclusive) == (46, 46, False)
    assert d.include_models == ("V100M16", "V100M32")
    assert (share.cpu_milli, share.memory_mib) == (6000, 12288)
    [w] = placer.request(pod_view(TaskSpec("w", 1000, 10, 4, 1000), names)).demands
    assert (w.count, w.exclusive, w.compute) == (4, True, 100)
    assert not placer.request(pod_view(TaskSpec("c", 1000, 10), names)).demands


def test_the_embedded_sample_is_readable() -> None:
    nodes = read_nodes(SAMPLE_NODES)
    tasks = read_tasks(SAMPLE_PODS)
    assert len(nodes) == 206 and sum(n.gpus for n in nodes) == 1051
    assert len(tasks) == 1379
