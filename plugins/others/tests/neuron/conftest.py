"""Neuron fixtures: a fake host (sysfs tree and /dev) and handles on it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from neuron_fakes import neuron_host, node_settings

from xpushare.plugins import VendorHandle
from xpushare_others.neuron import plugin


@pytest.fixture
def neuron(tmp_path: Path, handle_for: Callable[..., VendorHandle]) -> Callable[..., VendorHandle]:
    """``neuron(count=4, host={...}, **config)``: a handle on a fake host of *count* devices."""

    made = iter(range(1000))

    def make(count: int = 4, host: dict[str, Any] | None = None, **config: Any) -> VendorHandle:
        root = neuron_host(tmp_path / f"host{next(made)}", count, **(host or {}))
        return handle_for("awsneuron", plugin, node_settings(root, **config))

    return make
