"""pytest fixtures of the testing kit, for test modules that opt in.

Why a plugin module rather than fixtures in each ``conftest.py``: a fixture that must be
shared by every test module of a session (the core's wheel, built once for all plugins'
install tests) has to live in one place that all of them load, and a plugin's own
``conftest.py`` is not loaded by another plugin's tests. Opt in from a test module (or from
your root ``conftest.py``)::

    pytest_plugins = ["xpushare.testing.fixtures"]
"""

from __future__ import annotations

import pytest

from xpushare.testing.wheels import WheelCache

__all__ = ["wheel_cache"]


@pytest.fixture(scope="session")
def wheel_cache(tmp_path_factory: pytest.TempPathFactory) -> WheelCache:
    """Wheels built once per session (see :func:`xpushare.testing.wheels.install_in_fresh_venv`)."""
    return WheelCache(tmp_path_factory.mktemp("wheels"))
