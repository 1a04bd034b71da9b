"""Environments over the network: ``gym-repost serve``, speaking OpenEnv's protocol.

Owns the server that RL trainers and remote agents drive tasks through: openenv-core's
server (``openenv.core.env_server``) on uvicorn, one session per client connection, each
session an episode of ``gym_repost/Function-v0`` or ``gym_repost/TestFile-v0`` on a sandbox
the whole server shares; idle timeouts, the session limit, the access token, shutdown.
OpenEnv's own clients (``GenericEnvClient``, its ``.sync()`` wrapper) talk to it unchanged.

The contract (``docs/serving.md`` shows it in use):

* ``reset(task_id=ID_OR_NAME, seed=S)`` starts an episode on that task; without
  ``task_id`` a task is drawn with ``seed``. Its ``info`` also holds ``task_view``.
* ``step({"tool": NAME, "args": {...}})`` is the same action as ``env.step`` in-process.
* The observation is ``{"text": ..., "info": {...}, "terminated": ..., "truncated": ...}``;
  the result's ``reward`` and ``done`` (terminated or truncated) are the environment's.

:mod:`gym_repost.serve.trl` is the client side for TRL's ``GRPOTrainer``: ``ServedTask``
(function tasks) and ``ServedTestFileTask`` as its ``environment_factory``, ``reward_func``,
``dataset_rows``, ``close_all``; sessions the server closed are reopened at ``reset``.

Nothing a client receives holds a task's ground truth, evaluation script or tests:
observations come from the environment, the task from its
:class:`~gym_repost.task_view.TaskView`.

openenv-core, FastAPI and uvicorn (the ``serve`` extra) are imported only when a server
is built, so ``import gym_repost`` stays light; without them :func:`require_serve_extra`
raises an error naming ``pip install "gym-repost[serve]"``.

May import: bounded_json, env, errors, sandbox, task, task_view.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from gym_repost.errors import MissingExtraError
from gym_repost.sandbox.base import Sandbox
from gym_repost.serve.config import ServeConfig, read_token
from gym_repost.task import Task


def load_openenv() -> Any:
    """Import openenv-core and return ``openenv.core`` (``GenericEnvClient`` and the server).

    openenv-core's package imports its optional Gradio web interface, which takes seconds
    of CPU and is never used here; it is left out (``openenv.core`` handles its absence),
    unless Gradio is already imported.

    Raises:
        MissingExtraError: openenv-core, FastAPI or uvicorn is missing.
    """
    block = "gradio" not in sys.modules and "openenv.core" not in sys.modules
    if block:
        sys.modules["gradio"] = None  # type: ignore[assignment]  # import gradio -> ModuleNotFoundError
    try:
        for module, package in _NEEDED:
            try:
                importlib.import_module(module)
            except ImportError:
                raise MissingExtraError(package, "serve", "Serving environments (gym-repost serve)") from None
    finally:
        if block:
            del sys.modules["gradio"]
    return importlib.import_module("openenv.core")


_NEEDED = (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("openenv.core.env_server.http_server", "openenv-core"))


def require_serve_extra() -> None:
    """Check that the ``serve`` extra is installed (and import it).

    Raises:
        MissingExtraError: it is not; the message names ``pip install "gym-repost[serve]"``.
    """
    load_openenv()


def create_app(tasks: Sequence[Task], sandbox: Sandbox, config: ServeConfig) -> Any:
    """The ASGI application (see :func:`gym_repost.serve.app.create_app`)."""
    require_serve_extra()
    from gym_repost.serve.app import create_app as build

    return build(tasks, sandbox, config)


def serve(
    tasks: Sequence[Task], sandbox: Sandbox, config: ServeConfig, *, on_ready: Callable[[str], None] | None = None
) -> None:
    """Serve until SIGINT or SIGTERM (see :func:`gym_repost.serve.server.serve`)."""
    require_serve_extra()
    from gym_repost.serve.server import serve as run

    run(tasks, sandbox, config, on_ready=on_ready)


def running(tasks: Sequence[Task], sandbox: Sandbox, config: ServeConfig) -> AbstractContextManager[str]:
    """Serve from a thread for a ``with`` block that gets the URL (see
    :func:`gym_repost.serve.server.running`)."""
    require_serve_extra()
    from gym_repost.serve.server import running as run

    return run(tasks, sandbox, config)


__all__ = ["ServeConfig", "create_app", "load_openenv", "read_token", "require_serve_extra", "running", "serve"]
