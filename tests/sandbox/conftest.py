"""Fixtures for the local sandbox tests: real worker processes, private work roots."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gym_repost.sandbox.config import LocalSandboxConfig
from gym_repost.sandbox.local import LocalSandbox


@pytest.fixture
def work_root(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    return root


@pytest.fixture
def packages_dir(tmp_path: Path) -> Path:
    return tmp_path / "packages"


@pytest.fixture(scope="module")
def warm_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSandbox]:
    """A started two-worker warm sandbox shared by the tests of a module."""
    root = tmp_path_factory.mktemp("warm")
    config = LocalSandboxConfig(
        workers=2, work_root=str(root), packages_dir=str(root / "packages"), total_memory_mb=1024
    )
    sandbox = LocalSandbox(config)
    with sandbox:
        yield sandbox


@contextlib.contextmanager
def probe_environment(modules: dict[str, str]) -> Iterator[str]:
    """A virtual environment holding ``modules`` (file name -> source); its interpreter.
    Outside pytest's private temporary directory, so that the sandbox's unprivileged runs
    can read it."""
    venv = Path(tempfile.mkdtemp(prefix="gym-repost-probe-env-"))
    venv.chmod(0o755)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        for name, source in modules.items():
            Path(purelib, name).write_text(source, encoding="utf-8")
        yield str(python)
    finally:
        shutil.rmtree(venv, ignore_errors=True)
