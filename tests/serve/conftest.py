"""Served environments for the tests: the demo tasks behind a server on a free loopback port.

The server runs in a thread of the test process (``gym_repost.serve.running``) on the
session's shared local sandbox; clients are OpenEnv's own (``GenericEnvClient`` and its
``.sync()`` wrapper). The SIGTERM tests run ``gym-repost serve`` as a subprocess.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from gym_repost.sandbox import Sandbox
from gym_repost.serve import ServeConfig, load_openenv, running
from gym_repost.task import FunctionTask, load_tasks

DEMO = Path(__file__).resolve().parents[2] / "tasks" / "demo.jsonl"


@pytest.fixture(scope="session")
def openenv() -> Any:
    """``openenv.core`` (the clients)."""
    return load_openenv()


@pytest.fixture(scope="session")
def demo_tasks() -> list[FunctionTask]:
    """The shipped demo tasks (15 function tasks over one small repository)."""
    return list(load_tasks(DEMO))  # type: ignore[arg-type]


Serve = Callable[..., AbstractContextManager[str]]


@pytest.fixture
def serve(demo_tasks: list[FunctionTask], sandbox: Sandbox) -> Serve:
    """``with serve(max_sessions=2, ...) as url:`` a server of the demo tasks (or ``tasks=``)."""

    @contextmanager
    def start(tasks: list[Any] | None = None, **settings: Any) -> Iterator[str]:
        config = ServeConfig(host="127.0.0.1", port=0, **settings)
        with running(tasks or demo_tasks, sandbox, config) as url:
            yield url

    return start
