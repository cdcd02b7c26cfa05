"""Install the core and a plugin as wheels in a fresh virtual environment, and run them there.

Why: a vendor plugin must work when installed on its own (``pip install xpushare-acme``):
its entry point found, its dependencies declared, nothing imported from the development
workspace. Only a real install shows that, so each plugin has a test that builds its wheel
and the core's with ``uv build``, installs both into a new virtual environment and runs the
CLI there, in an environment stripped of the variables that would leak the workspace or a
developer's settings in. Those steps are the same for every plugin and are written once
here; the core's wheel, the same for every plugin, is built once per test session when the
tests share a :class:`WheelCache` (the ``wheel_cache`` fixture of
:mod:`xpushare.testing.fixtures`). Example::

    pytest_plugins = ["xpushare.testing.fixtures"]

    @pytest.fixture(scope="module")
    def venv(wheel_cache, tmp_path_factory):
        return install_in_fresh_venv(
            tmp_path_factory.mktemp("acme"), CORE_DIR, PLUGIN_DIR, wheels=wheel_cache
        )

    def test_detect(venv):
        payload = json.loads(venv.run_cli("detect", "--json", env=clean_environ()))

uv must be on ``PATH`` (or named by ``$UV``, as ``uv run`` sets it); dependencies come from
uv's cache when they are there, from the package index otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CommandFailed",
    "FreshEnv",
    "UvNotFound",
    "WheelCache",
    "clean_environ",
    "install_in_fresh_venv",
    "uv_executable",
]

#: Bound of one build, install or CLI run. A wheel builds in seconds and an install from
#: uv's cache in about one; a first install that downloads dependencies (grpcio,
#: kubernetes, ...) takes longer on a slow network. Only stops a hung command.
COMMAND_TIMEOUT_S = 300.0

#: Variables that would let the workspace or the developer's own settings into the fresh
#: environment: the active virtual environment, extra import paths and libraries, xpushare's
#: own settings (``XPUSHARE_PLUGINS``, vendor config files) and the fake vendor libraries'.
LEAKY_PREFIXES = ("XPUSHARE_", "FAKE_", "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH")


class UvNotFound(RuntimeError):
    """uv, which builds the wheels and the environment, is not installed."""


class CommandFailed(AssertionError):
    """A command of the install or the CLI exited with an error (a test failure)."""

    def __init__(self, args: tuple[str, ...], done: subprocess.CompletedProcess[str]) -> None:
        super().__init__(
            f"{' '.join(args)} exited with {done.returncode}:\n"
            f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
        )
        self.returncode = done.returncode
        self.stdout = done.stdout
        self.stderr = done.stderr


def uv_executable() -> str:
    """The uv binary: ``$UV`` (set by ``uv run``), else ``uv`` on ``PATH``."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        raise UvNotFound(
            "uv is not on PATH: it builds the wheels and the fresh environment. Install it "
            "(pip install uv, or https://docs.astral.sh/uv/) and run the tests with `uv run`."
        )
    return found


def _run(
    *args: str | Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        check=False,
        timeout=COMMAND_TIMEOUT_S,
    )


def _checked(*args: str | Path, env: Mapping[str, str] | None = None) -> str:
    done = _run(*args, env=env)
    if done.returncode != 0:
        raise CommandFailed(tuple(str(a) for a in args), done)
    return done.stdout


def clean_environ(*drop_prefixes: str, **extra: str) -> dict[str, str]:
    """This process's environment without :data:`LEAKY_PREFIXES` and *drop_prefixes*
    (e.g. ``"ROCM_"``), with *extra* set (e.g. ``XPUSHARE_PLUGINS="acme"``)."""
    drop = (*LEAKY_PREFIXES, *drop_prefixes)
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


class WheelCache:
    """Wheels built with ``uv build --wheel`` into *out_dir*, each project built once.

    Keyed by the project's resolved directory: within one test session the sources do not
    change, and the core's wheel is the same for every plugin's install.
    """

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._built: dict[Path, Path] = {}

    def wheel(self, project_dir: Path) -> Path:
        """The wheel of the project in *project_dir* (its ``pyproject.toml``'s folder)."""
        project = project_dir.resolve()
        if project not in self._built:
            # A folder per project, so the one wheel in it is this project's.
            out = self.out_dir / f"{len(self._built)}-{project.name}"
            _checked(uv_executable(), "build", "--wheel", "--quiet", "--out-dir", out, project)
            (wheel,) = out.glob("*.whl")
            self._built[project] = wheel
        return self._built[project]


@dataclass(frozen=True)
class FreshEnv:
    """A virtual environment with the wheels installed; commands run from its ``bin``."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def run(
        self, program: str, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run *program* from the environment's ``bin`` (e.g. ``"xpushare"``, the console
        script) with *env* (default: :func:`clean_environ`); the exit code is not checked."""
        return _run(self.root / "bin" / program, *args, env=clean_environ() if env is None else env)

    def run_cli(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        """``python -m xpushare.cli *args`` in the environment; its stdout. Fails the test
        (:class:`CommandFailed`) on a non-zero exit, with the output in the message."""
        command = (str(self.python), "-m", "xpushare.cli", *args)
        done = _run(*command, env=clean_environ() if env is None else env)
        if done.returncode != 0:
            raise CommandFailed(command, done)
        return done.stdout

    def distributions(self) -> set[str]:
        """The names of the distributions installed in the environment."""
        listed = _checked(
            uv_executable(), "pip", "list", "--python", self.python, "--format", "json"
        )
        return {str(p["name"]) for p in json.loads(listed)}


def install_in_fresh_venv(
    root: Path, *project_dirs: Path, wheels: WheelCache | None = None
) -> FreshEnv:
    """Build the projects' wheels, make a virtual environment in ``root/venv`` with this
    interpreter's Python, and install the wheels and their dependencies there.

    *wheels* reuses wheels already built (pass one cache to every install of a session);
    without it the wheels are built into ``root/wheels``. Dependencies come from uv's cache
    (offline) when all are there, from the package index otherwise.
    """
    uv = uv_executable()
    cache = wheels if wheels is not None else WheelCache(root / "wheels")
    built = [cache.wheel(project) for project in project_dirs]
    env_dir = root / "venv"
    _checked(uv, "venv", "--quiet", "--python", sys.executable, env_dir)
    install: tuple[str | Path, ...] = (
        uv,
        "pip",
        "install",
        "--quiet",
        "--python",
        env_dir / "bin" / "python",
        *built,
    )
    if _run(*install, "--offline").returncode != 0:  # a dependency not in uv's cache: fetch it
        _checked(*install)
    return FreshEnv(env_dir)
