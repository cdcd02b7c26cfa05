"""A process that never calls NVML does not import pynvml.

pynvml declares NVML's whole API when imported (~16 MiB resident): the scheduler and a node
agent on a node without NVIDIA GPUs load this plugin but must not pay for it (issue 36, the
node agent's 64 MiB budget). The bindings are imported when NVML is first used.
"""

from __future__ import annotations

import pytest

from xpushare.testing.imports import loaded_by, run_fresh


@pytest.mark.parametrize(
    "module", ["xpushare_nvidia.plugin", "xpushare_nvidia.fit", "xpushare_nvidia.detect"]
)
def test_importing_the_plugin_does_not_import_pynvml(module: str) -> None:
    assert loaded_by(f"import {module}", ["pynvml"]) == [], f"importing {module} imports pynvml"


def test_the_first_use_imports_it_and_writes_reach_the_module() -> None:
    code = (
        "import sys\n"
        "from xpushare_nvidia.lazy import pynvml\n"
        "assert 'pynvml' not in sys.modules and 'not imported yet' in repr(pynvml)\n"
        "code = pynvml.NVML_ERROR_GPU_IS_LOST\n"
        "pynvml.xpushare_probe = 1\n"
        "print('pynvml' in sys.modules, sys.modules['pynvml'].xpushare_probe, code > 0)\n"
    )
    assert run_fresh(code).split() == ["True", "1", "True"]
