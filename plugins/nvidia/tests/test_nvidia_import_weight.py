"""A process that never calls NVML does not import pynvml.

pynvml declares NVML's whole API when imported (~16 MiB resident): the scheduler and a node
agent on a node without NVIDIA GPUs load this plugin but must not pay for it (issue 36, the
node agent's 64 MiB budget). The bindings are imported when NVML is first used.
"""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module", ["xpushare_nvidia.plugin", "xpushare_nvidia.fit", "xpushare_nvidia.detect"]
)
def test_importing_the_plugin_does_not_import_pynvml(module: str) -> None:
    code = f"import sys, {module}; print('pynvml' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False", f"importing {module} imports pynvml"


def test_the_first_use_imports_it_and_writes_reach_the_module() -> None:
    code = (
        "import sys\n"
        "from xpushare_nvidia.lazy import pynvml\n"
        "assert 'pynvml' not in sys.modules and 'not imported yet' in repr(pynvml)\n"
        "code = pynvml.NVML_ERROR_GPU_IS_LOST\n"
        "pynvml.xpushare_probe = 1\n"
        "print('pynvml' in sys.modules, sys.modules['pynvml'].xpushare_probe, code > 0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["True", "1", "True"]
