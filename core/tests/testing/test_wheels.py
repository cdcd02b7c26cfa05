"""The wheel-install helper: a clean environment, a clear error without uv, one build per
project, and a failing command reported with its output."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from xpushare.testing.wheels import (
    CommandFailed,
    UvNotFound,
    WheelCache,
    clean_environ,
    install_in_fresh_venv,
    uv_executable,
)


def test_clean_environ_drops_what_would_leak_the_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH", "XPUSHARE_PLUGINS", "FAKE_X"):
        monkeypatch.setenv(name, "leak")
    monkeypatch.setenv("ROCM_PATH", "/opt/rocm")
    monkeypatch.setenv("HOME", "/home/tester")
    env = clean_environ("ROCM_", XPUSHARE_PLUGINS="acme")
    assert env["XPUSHARE_PLUGINS"] == "acme"
    assert env["HOME"] == "/home/tester"
    leaked = {"VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH", "FAKE_X", "ROCM_PATH"} & env.keys()
    assert not leaked


def test_without_uv_the_error_says_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UV", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UvNotFound, match=r"uv is not on PATH.*Install it"):
        uv_executable()


def _project(root: Path) -> Path:
    (root / "src" / "tiny").mkdir(parents=True)
    (root / "src" / "tiny" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [project]
            name = "tiny"
            version = "0.0.1"

            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [tool.hatch.build.targets.wheel]
            packages = ["src/tiny"]
            """
        )
    )
    return root


def test_a_project_is_built_once_per_cache(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    project = _project(tmp_path / "tiny")
    wheel = cache.wheel(project)
    assert wheel.name.startswith("tiny-0.0.1-") and wheel.suffix == ".whl"
    built_at = wheel.stat().st_mtime_ns
    # The same project again, named another way: the wheel already built.
    assert cache.wheel(project / ".." / "tiny") == wheel
    assert wheel.stat().st_mtime_ns == built_at
    assert len(list((tmp_path / "wheels").iterdir())) == 1


def test_a_failing_build_fails_with_its_output(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "pyproject.toml").write_text("[project\n")
    with pytest.raises(CommandFailed, match="uv build") as failed:
        install_in_fresh_venv(tmp_path, tmp_path / "broken")
    assert failed.value.returncode != 0
    assert failed.value.stderr
