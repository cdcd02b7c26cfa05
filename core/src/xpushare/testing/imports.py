"""Which modules an import loads, asked of a fresh interpreter.

Why: a process that never needs a heavy module (numpy, a vendor's bindings, the official
Kubernetes client) must not import it, and the test process has imported everything
already; only a new interpreter shows what one import pulls in. A plugin checks its own
weight the same way (``loaded_by("import my_plugin", ["my_vendor_bindings"]) == []``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["FRESH_TIMEOUT_S", "loaded_by", "run_fresh"]

#: A fresh interpreter importing the scheduler takes ~2 s; a loaded 2-core CI machine, many
#: times that. Only there so a hung child fails the test instead of the suite's timeout.
FRESH_TIMEOUT_S = 60.0

#: The last line of the child's output: which of the watched modules it holds.
_REPORT = (
    "\nimport sys as _sys, json as _json\n"
    "print(_json.dumps([m for m in {watched!r} if m in _sys.modules]))\n"
)


def run_fresh(code: str, *, timeout_s: float = FRESH_TIMEOUT_S) -> str:
    """What *code* prints when a fresh interpreter (this one's executable) runs it; an
    AssertionError carrying its stderr when it fails."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        raise AssertionError(
            f"a fresh interpreter running {code[:200]!r} exited with {done.returncode}:\n"
            f"{done.stderr[-4000:]}"
        )
    return done.stdout


def loaded_by(
    code: str, watched: Sequence[str], *, timeout_s: float = FRESH_TIMEOUT_S
) -> list[str]:
    """Those of the *watched* module names a fresh interpreter holds after running *code*
    (an import, or a few lines that use what they import), in the order given."""
    out = run_fresh(code + _REPORT.format(watched=list(watched)), timeout_s=timeout_s)
    found: list[str] = json.loads(out.splitlines()[-1])
    return found
