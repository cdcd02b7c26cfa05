"""Processes that never place pods do not load numpy.

numpy (~15 MiB resident, ~70 ms to import) serves only the fragmentation policies' batch
search; the node agent, which runs on every node with a memory budget, and the CLI's other
commands must not pay for it. The array modules are imported on the first batch.
"""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module", ["xpushare.cli.main", "xpushare.node.agent", "xpushare.scheduling", "xpushare"]
)
def test_importing_does_not_load_numpy(module: str) -> None:
    code = f"import sys, {module}; print('numpy' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False", f"importing {module} loads numpy"


def test_the_first_batch_search_does() -> None:
    code = (
        "import sys\n"
        "from xpushare.models import ContainerRequest, Device\n"
        "from xpushare.placement import Placer\n"
        "from xpushare.scheduling import PodRequest, UsageLedger\n"
        "ledger = UsageLedger()\n"
        "for n in range(8):\n"
        "    ledger.set_node(f'n{n}', [Device(vendor='mock', id=f'n{n}-{i}', index=i,\n"
        "        model='A100', memory_mib=1000) for i in range(n % 4 + 1)])\n"
        "pod = PodRequest.build([ContainerRequest(vendor='mock', memory_percent=30,\n"
        "    compute_percent=30)])\n"
        "Placer(ledger, 'fgd-cpu').select(pod)\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "True"
