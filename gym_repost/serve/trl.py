"""Served tasks as TRL environments: ``GRPOTrainer(environment_factory=...)`` over ``gym-repost serve``.

How TRL's ``GRPOTrainer`` (1.16) uses an ``environment_factory``:

* When the trainer is built it calls the factory once, lists the *public functions of the
  instance's class* (every name not starting with ``_``, but ``reset`` and ``get_reward``)
  and offers each to the model as a tool, its schema read from the type hints and the
  Google-style docstring. Any public method is a tool: :class:`ServedTask` has exactly the
  six tools of a function task, :class:`ServedTestFileTask` those of a test-file task, and
  nothing else (no ``close``).
* Environments are made once and reused: before each generation batch the trainer takes
  one environment per rollout of the batch from a pool (the first one built, the pool
  growing only when a batch needs more) and calls ``reset(**row)`` with the dataset row's
  columns. A string ``reset`` returns is appended to the last message of the row's prompt,
  as is (:meth:`ServedEnvironment.reset` puts a blank line between them).
* The model's tool calls run the methods one after another; a method that raises is
  answered to the model with ``{"error": message}``. Reward functions get the batch's
  environments (``reward_func(environments=...)``). The trainer never closes them.

So a run holds as many sessions as one generation batch has rollouts (per process), for
the whole run, and each sits idle while the model trains on the batch. A step longer than
the server's ``--session-timeout`` (600 s by default) gets them closed by the server; the
next ``reset`` then opens a new connection and starts the episode there, transparently.
A session lost in the middle of an episode (the server restarted, a timeout) ends that
episode: the tool call returns a message saying so, the reward is what the episode
earned, and the next ``reset`` reconnects. Sessions are closed by :func:`close_all`
(after ``trainer.train()``), by ``with`` on an environment, when an environment is
garbage-collected, and at the latest when the interpreter exits.

Usage (``gym-repost serve tasks.jsonl --port 8000`` running)::

    import functools
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from gym_repost.serve.trl import ServedTask, close_all, dataset_rows, reward_func

    url = "http://127.0.0.1:8000"
    trainer = GRPOTrainer(
        model=model,
        train_dataset=Dataset.from_list(dataset_rows(url, kind="function")),
        reward_funcs=reward_func,
        environment_factory=functools.partial(ServedTask, url),
        args=GRPOConfig(...),
    )
    try:
        trainer.train()
    finally:
        close_all()

For a task set of both kinds, pass ``environment_factory={"function": functools.partial(ServedTask, url),
"testfile": functools.partial(ServedTestFileTask, url)}``: the rows of :func:`dataset_rows`
carry the ``environment`` column that selects one per row.

Nothing here imports TRL: the classes only have the shape it asks for. OpenEnv's client
(the ``serve`` extra) is imported when an environment first connects.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.parse
import urllib.request
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from gym_repost.errors import ConfigError
from gym_repost.serve import load_openenv
from gym_repost.serve.config import CLOSED_SESSION

logger = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:8000"
URL_VARIABLE = "GYM_REPOST_SERVER_URL"
"""The environment variable an environment built without ``url`` reads its server from."""
DEFAULT_PROMPT = "Solve the coding task below with the tools; submit when the tests pass."
"""The user message of :func:`dataset_rows` (the task statement follows it)."""


def _lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection holds no session any more: the server closed it
    (idle, shutting down), or the connection itself failed (closed, refused, no reply in
    time: ``OSError`` covers ``ConnectionError`` and ``TimeoutError``)."""
    if isinstance(exc, RuntimeError):
        return CLOSED_SESSION in str(exc)
    if isinstance(exc, OSError):
        return True
    try:
        from websockets.exceptions import ConnectionClosed
    except ImportError:
        return False
    return isinstance(exc, ConnectionClosed)


class _Connection:
    """One environment's client, opened on first use and closed once (thread-safe)."""

    def __init__(self, url: str, message_timeout_s: float) -> None:
        self.url = url
        self.message_timeout_s = message_timeout_s
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = (
                    load_openenv().GenericEnvClient(base_url=self.url, message_timeout_s=self.message_timeout_s).sync()
                )
                _OPEN.add(self)
            return self._client

    @property
    def is_open(self) -> bool:
        return self._client is not None

    def close(self) -> None:
        """Close the session (best effort: the server may be gone already)."""
        with self._lock:
            client, self._client = self._client, None
            _OPEN.discard(self)
        if client is not None:
            try:
                client.close()
            except Exception:
                logger.debug("closing a session of %s failed", self.url, exc_info=True)


_OPEN: weakref.WeakSet[_Connection] = weakref.WeakSet()
"""The connections of this process that hold a session."""


class ServedEnvironment:
    """One rollout's environment: a session of a ``gym-repost serve`` server.

    Use :class:`ServedTask` (function tasks) or :class:`ServedTestFileTask` (test-file
    tasks); this base has the tools both kinds share. TRL builds environments without
    arguments: give the URL with ``functools.partial(ServedTask, url)``, or set
    ``GYM_REPOST_SERVER_URL``.

    Args:
        url: the server (``http://host:port``; with a token, ``http://user:TOKEN@host:port``).
            Default: ``$GYM_REPOST_SERVER_URL``, else ``http://127.0.0.1:8000``.
        message_timeout_s: how long to wait for one reply (a test run, a submission).

    Attributes:
        reward: the episode's return so far.
        done: whether the episode is over (later tool calls raise).
        info: the environment's latest ``info``.
        task_view: the episode's task as a policy may see it (``TaskView``'s JSON form).
        lost: why the session was lost mid-episode, or None.
        reconnections: how many times ``reset`` replaced a lost session.
    """

    kind: ClassVar[str] = ""
    """The task kind this class has the tools of."""

    def __init__(self, url: str | None = None, *, message_timeout_s: float = 600.0) -> None:
        url = (url or os.environ.get(URL_VARIABLE) or DEFAULT_URL).rstrip("/")
        self._connection = _Connection(url, message_timeout_s)
        weakref.finalize(self, self._connection.close)  # also at exit, if still open
        self.reward = 0.0
        self.done = True
        self.info: dict[str, Any] = {}
        self.task_view: dict[str, Any] = {}
        self.lost: str | None = None
        self.reconnections = 0

    @property
    def url(self) -> str:
        """The server."""
        return self._connection.url

    def reset(self, task_id: str | None = None, seed: int | None = None, **row: Any) -> str:
        """Start an episode on the row's task; returns the task statement.

        A session the server closed (idle too long) or a connection that failed is
        replaced by a new one, once. The statement starts with a blank line when the
        row's prompt ends with text, so that TRL's concatenation keeps them apart.

        Raises:
            ConfigError: the task is of the other kind than this class's tools.
            RuntimeError: the server refused (an unknown task, the server is full).
            ConnectionError: the server cannot be reached.
        """
        try:
            result = self._reset_session(task_id, seed)
        except Exception as exc:
            if not _lost(exc):
                raise
            logger.info("the session at %s was lost (%s); reconnecting", self.url, exc)
            result = self._reset_session(task_id, seed)
            self.reconnections += 1
        info = result.observation["info"]
        kind = info["task_view"]["kind"]
        if self.kind and kind != self.kind:
            self.done = True
            raise ConfigError(
                f"task {info.get('task_id')} is a {kind} task and {type(self).__name__} has the tools of "
                f"{self.kind} tasks; use {_CLASS_OF.get(str(kind), 'the class of its kind')} for it "
                "(dataset_rows(url, kind=...) keeps one kind)"
            )
        self.reward, self.done, self.info, self.lost = 0.0, False, info, None
        self.task_view = info["task_view"]
        return _separator(row.get("prompt")) + result.observation["text"]

    def _reset_session(self, task_id: str | None, seed: int | None) -> Any:
        try:
            return self._connection.client().reset(task_id=task_id, seed=seed)
        except Exception:
            self._connection.close()  # the next reset starts from a new connection
            raise

    def _call(self, tool: str, **args: Any) -> str:
        if self.done:
            raise ValueError("The episode is over: stop calling tools.")
        action = {"tool": tool, "args": {k: v for k, v in args.items() if v is not None}}
        try:
            result = self._connection.client().step(action)
        except Exception as exc:
            if not _lost(exc):
                raise
            self._connection.close()
            self.done, self.lost = True, str(exc)
            logger.warning("the session at %s was lost mid-episode (%s); the episode ends", self.url, exc)
            return f"The episode is over: the session ended ({exc})."
        self.reward += result.reward or 0.0
        self.done, self.info = result.done, result.observation["info"]
        return result.observation["text"]

    def list_files(self, path: str = "") -> str:
        """List the repository's files.

        Args:
            path: a directory of the repository (default: its root).
        """
        return self._call("list_files", path=path or None)

    def read_file(self, path: str, start: int | None = None, end: int | None = None) -> str:
        """Read a file of the repository, with line numbers.

        Args:
            path: the file, relative to the repository's root.
            start: first line to show (1-based).
            end: last line to show.
        """
        return self._call("read_file", path=path, start=start, end=end)

    def search(self, pattern: str, path: str = "") -> str:
        """Search the repository for a regular expression.

        Args:
            pattern: the regular expression.
            path: a file or directory to search in (default: everywhere).
        """
        return self._call("search", pattern=pattern, path=path or None)

    def run_tests(self) -> str:
        """Run the tests on what was written; returns the report."""
        return self._call("run_tests")

    def submit(self) -> str:
        """Submit what was written for scoring; returns the verdict."""
        return self._call("submit")

    def __enter__(self) -> ServedEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self._connection.close()


class ServedTask(ServedEnvironment):
    """A served function task: ``list_files``, ``read_file``, ``search``, ``write_code``,
    ``run_tests``, ``submit`` (see :class:`ServedEnvironment`)."""

    kind: ClassVar[str] = "function"

    def write_code(self, code: str) -> str:
        """Write the target function: its whole source, signature included.

        Args:
            code: the function's full source.
        """
        return self._call("write_code", code=code)


class ServedTestFileTask(ServedEnvironment):
    """A served test-file task: ``list_files``, ``read_file``, ``search``, ``write_tests``,
    ``run_tests``, ``submit`` (see :class:`ServedEnvironment`)."""

    kind: ClassVar[str] = "testfile"

    def write_tests(self, code: str) -> str:
        """Write the test file: the whole pytest file.

        Args:
            code: the test file's source.
        """
        return self._call("write_tests", code=code)


_CLASS_OF = {"function": "ServedTask", "testfile": "ServedTestFileTask"}


def reward_func(environments: Sequence[ServedEnvironment], **kwargs: Any) -> list[float]:
    """TRL's reward function: each environment's return (0.0 for an episode the model
    never finished)."""
    return [env.reward for env in environments]


def close_all(environments: Iterable[ServedEnvironment] | None = None) -> int:
    """Close the sessions of ``environments``, or every session this process holds.

    Call it when training ends (TRL never closes its environments); an environment used
    again afterwards opens a new session. Returns how many sessions were closed.
    """
    if environments is None:
        connections = list(_OPEN)
    else:
        connections = [env._connection for env in environments if env._connection.is_open]
    for connection in connections:
        connection.close()
    return len(connections)


def open_sessions() -> int:
    """How many sessions this process holds."""
    return len(_OPEN)


def served_tasks(url: str) -> list[dict[str, str]]:
    """The server's tasks (``GET /tasks``): id, name, kind."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    address = urllib.parse.urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path + "/tasks", "", ""))
    request = urllib.request.Request(address)
    if parts.password:
        request.add_header("Authorization", f"Bearer {urllib.parse.unquote(parts.password)}")
    with urllib.request.urlopen(request) as response:
        return list(json.loads(response.read())["tasks"])


def dataset_rows(
    url: str, *, kind: str | None = None, prompt: str = DEFAULT_PROMPT, limit: int | None = None
) -> list[dict[str, Any]]:
    """A training dataset over the served tasks, one row per task (``Dataset.from_list``).

    Each row: ``prompt`` (one user message, ``prompt``; the environment's ``reset``
    appends the task statement to it), ``task_id``, and ``environment`` (the task's kind:
    the key of ``environment_factory={"function": ..., "testfile": ...}``).

    Args:
        url: the server.
        kind: only tasks of this kind (``function`` or ``testfile``).
        prompt: the user message before the statement.
        limit: at most this many rows.
    """
    tasks = [t for t in served_tasks(url) if kind is None or t["kind"] == kind]
    return [
        {"prompt": [{"role": "user", "content": prompt}], "task_id": t["id"], "environment": t["kind"]}
        for t in tasks[:limit]
    ]


def _separator(prompt: Any) -> str:
    """What goes between the row's prompt and the statement TRL appends to it."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        prompt = prompt[-1].get("content")
    if not isinstance(prompt, str) or not prompt.strip() or prompt.endswith("\n\n"):
        return ""
    return "\n" if prompt.endswith("\n") else "\n\n"


__all__ = [
    "ServedEnvironment",
    "ServedTask",
    "ServedTestFileTask",
    "close_all",
    "dataset_rows",
    "open_sessions",
    "reward_func",
    "served_tasks",
]
