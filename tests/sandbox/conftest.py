"""Fixtures for the local sandbox tests: real worker processes, private work roots."""

from __future__ import annotations

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
