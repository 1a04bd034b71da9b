"""One session's environment, as openenv-core's server drives it.

:class:`SessionEnvironment` is an ``openenv.core.env_server.Environment``: the server
makes one per client connection and calls its ``reset`` and ``step`` on a thread of its
own. ``reset(task_id=..., seed=...)`` picks a task of the served set and starts a
``Function-v0`` or ``TestFile-v0`` episode on the server's shared sandbox; ``step``
passes the action to the Gymnasium environment unchanged, so an action means what it
means in-process and anything malformed is an error observation, never an exception.

What leaves the server is the environment's observation text and ``info``, and, at
``reset``, the task's :class:`~gym_repost.task_view.TaskView`: never the ground truth,
the evaluation script or the tests.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import ConfigDict, Field

from gym_repost.env import make_task_env
from gym_repost.env.base import ToolEnv
from gym_repost.errors import GymRepostError
from gym_repost.sandbox.base import Sandbox
from gym_repost.serve.config import CLOSED_SESSION, ServeConfig
from gym_repost.task import Task
from gym_repost.task_view import task_view


class SessionError(GymRepostError, ValueError):
    """A client asked for something the session cannot do (the message says what)."""


class ToolCallAction(Action):
    """A tool call, ``{"tool": NAME, "args": {...}}``, exactly as ``env.step`` takes it.

    Every field the client sent reaches the environment as sent (``name``/``arguments``
    are accepted too); the environment, not this model, decides what is malformed.
    """

    model_config = ConfigDict(extra="allow")

    tool: Any = Field(default=None, description="The tool: list_files, read_file, search, write_code, ...")
    args: Any = Field(default=None, description="The tool's arguments (an object).")


class TaskObservation(Observation):
    """What a step returns: the environment's text and ``info``.

    ``done`` is ``terminated or truncated``; both are given apart too.
    """

    text: str = Field(description="The observation text (what a model reads).")
    info: dict[str, Any] = Field(description="The environment's info dict (at reset also task_view).")
    terminated: bool = Field(default=False, description="The episode ended: solved, or submissions spent.")
    truncated: bool = Field(default=False, description="The step budget ran out (or the sandbox failed).")


class EpisodeState(State):
    """The session's current episode."""

    task_id: str | None = None
    task_name: str | None = None
    done: bool = False


class TaskCatalog:
    """The served tasks, found by id or by name.

    Args:
        tasks: the task set (ids unique; a name shared by several tasks can only be
            asked for by id).
    """

    def __init__(self, tasks: Sequence[Task]) -> None:
        if not tasks:
            raise SessionError("no tasks to serve")
        self.tasks = list(tasks)
        self._by_id = {t.id: t for t in self.tasks}
        self._by_name: dict[str, list[Task]] = {}
        for task in self.tasks:
            self._by_name.setdefault(task.name, []).append(task)

    def listing(self) -> list[dict[str, str]]:
        """Id, name and kind of every task (what ``GET /tasks`` returns)."""
        return [{"id": t.id, "name": t.name, "kind": t.kind} for t in self.tasks]

    def pick(self, task_id: Any, seed: int | None) -> Task:
        """The task ``task_id`` names (an id or a name), else one drawn with ``seed``."""
        if task_id is None:
            return self.tasks[random.Random(seed).randrange(len(self.tasks))]
        if type(task_id) is not str:
            raise SessionError(f"reset: task_id must be a task's id or name (a string), got {type(task_id).__name__}")
        if task_id in self._by_id:
            return self._by_id[task_id]
        named = self._by_name.get(task_id, [])
        if len(named) == 1:
            return named[0]
        if named:
            ids = ", ".join(t.id for t in named)
            raise SessionError(f"reset: {len(named)} tasks are named {task_id!r}; ask for one by id ({ids})")
        shown = task_id if len(task_id) <= 80 else task_id[:80] + "..."
        raise SessionError(
            f"reset: no task with id or name {shown!r} among the {len(self.tasks)} served (GET /tasks lists them)"
        )


def _check_seed(seed: Any) -> int | None:
    if seed is None or (type(seed) is int and 0 <= seed < 2**63):
        return seed
    raise SessionError(f"reset: seed must be a non-negative integer below 2**63 or null, got {seed!r:.80}")


class SessionEnvironment(Environment[ToolCallAction, TaskObservation, EpisodeState]):
    """One client's environment (see the module docstring).

    Args:
        catalog: the served tasks.
        sandbox: the server's started sandbox, shared by every session (not closed here).
        config: budgets and reward.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, catalog: TaskCatalog, sandbox: Sandbox, config: ServeConfig) -> None:
        super().__init__()
        self._catalog = catalog
        self._sandbox = sandbox
        self._config = config
        self._env: ToolEnv | None = None
        self._state = EpisodeState()
        self._closed: str | None = None

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None, **unknown: Any
    ) -> TaskObservation:
        """Start an episode on the task ``task_id`` names, or on one drawn with ``seed``."""
        self._check_open()
        if unknown:
            raise SessionError(f"reset: unknown argument(s) {sorted(unknown)}; it takes task_id, seed, episode_id")
        seed = _check_seed(seed)
        if episode_id is not None and (type(episode_id) is not str or len(episode_id) > 255):
            raise SessionError("reset: episode_id must be a string of at most 255 characters")
        task = self._catalog.pick(task_id, seed)
        self._close_env()
        config = self._config
        env = make_task_env(
            task,
            sandbox=self._sandbox,
            max_steps=config.max_steps,
            max_submissions=config.max_submissions,
            reward=config.reward,
        )
        self._env = env
        text, info = env.reset(seed=seed)
        view = task_view(task, text, max_steps=env.max_steps, max_submissions=env.max_submissions)
        info["task_view"] = view.model_dump(mode="json")
        self._state = EpisodeState(episode_id=episode_id or uuid.uuid4().hex, task_id=task.id, task_name=task.name)
        return TaskObservation(text=text, info=info, reward=None, done=False)

    def step(self, action: ToolCallAction, timeout_s: float | None = None, **kwargs: Any) -> TaskObservation:
        """Run one tool call; the result is the environment's (``step`` never raises for
        the action's sake; only a session that is closed or not reset refuses)."""
        self._check_open()
        if self._env is None:
            raise SessionError('step: no episode yet; call reset() first (reset(task_id="ID or name", seed=S))')
        payload = action.model_dump(exclude_unset=True, exclude={"metadata"})
        text, reward, terminated, truncated, info = self._env.step(payload)
        self._state.step_count += 1
        self._state.done = terminated or truncated
        return TaskObservation(
            text=text,
            info=info,
            reward=reward,
            done=terminated or truncated,
            terminated=terminated,
            truncated=truncated,
        )

    @property
    def state(self) -> EpisodeState:
        """Episode id, steps taken, the task's id and name, whether the episode is over."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """What the server serves (no task contents)."""
        kinds = sorted({t.kind for t in self._catalog.tasks})
        return EnvironmentMetadata(
            name="gym-repost",
            description=(
                f"{len(self._catalog.tasks)} coding task(s) ({', '.join(kinds)}) as Gymnasium environments: "
                'reset(task_id=ID_OR_NAME, seed=S), step({"tool": NAME, "args": {...}}); GET /tasks lists them'
            ),
        )

    def retire(self, reason: str) -> None:
        """Refuse every later call with ``reason`` (the server then closes the session)."""
        self._closed = self._closed or reason

    def close(self) -> None:
        """End the episode; the session refuses later calls."""
        self.retire("the session is closed")
        self._close_env()

    def _close_env(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def _check_open(self) -> None:
        if self._closed is not None:
            raise SessionError(f"{self._closed}; {CLOSED_SESSION}")
