"""Processes that never place pods do not load numpy.

numpy (~15 MiB resident, ~70 ms to import) serves only the fragmentation policies' batch
search; the node agent, which runs on every node with a memory budget, and the CLI's other
commands must not pay for it. The array modules are imported on the first batch.
"""

from __future__ import annotations

import pytest

from xpushare.testing.imports import loaded_by


@pytest.mark.parametrize(
    "module", ["xpushare.cli.main", "xpushare.node.agent", "xpushare.scheduling", "xpushare"]
)
def test_importing_does_not_load_numpy(module: str) -> None:
    assert loaded_by(f"import {module}", ["numpy"]) == [], f"importing {module} loads numpy"


def test_the_first_batch_search_does() -> None:
    code = (
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
    )
    assert loaded_by(code, ["numpy"]) == ["numpy"]


def test_the_scheduler_imports_them_ahead_of_its_first_decision() -> None:
    # scheduler/preload.py: imported at start, in a thread, not on the first /filter.
    code = (
        "from xpushare.scheduler.preload import import_decision_modules\n"
        "import_decision_modules()\n"
    )
    assert loaded_by(code, ["numpy"]) == ["numpy"]
