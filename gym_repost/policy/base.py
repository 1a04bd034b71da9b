"""The policy seam: what an agent must implement to act in a gym-repost environment.

A policy is anything with ``reset`` and ``act``::

    class MyAgent:
        def reset(self, task, observation, info, *, seed):
            self.file = task.repository.target_file   # ``task`` is a TaskView
        def act(self, observation, info):
            return {"tool": "read_file", "args": {"path": self.file}}

``reset`` receives a :class:`~gym_repost.task_view.TaskView`: the statement, the
repository view, the dependency context, the target's name, signature and docstring (or
the test file to write) and the budgets; never the ground truth, the evaluation script or
the tests. The runner creates one policy object per episode (so policies need not be
thread-safe) by calling the class with no arguments, or with the ``--policy-arg
key=value`` options as keyword arguments. ``act`` returns a tool call as a dict (or a JSON
string). A policy may also define ``close()`` (called when the episode ends),
``stats()`` returning a JSON-able dict (token usage, cost) that the runner stores with the
episode, and ``transcript()`` returning its conversation so far as a list of messages,
oldest first::

    {"role": "system" | "user" | "assistant" | "tool", "content": str,
     "tool_calls": [{"id": str, "name": str, "arguments": str}],   # optional
     "tokens_in": int, "tokens_out": int, "seconds": float}         # optional, a model reply

After ``reset`` and after each ``act`` the runner records the messages added since the
previous call with the step (a tool result that repeats an observation is kept as a
pointer to it), and the run viewer shows them: a model's reasoning, not only its actions
(:mod:`gym_repost.evaluate.transcript`). The LLM policy keeps one.

The shipped controls (the oracle and the mutant policy, and the LLM policy when it
writes docstrings from the original) are :class:`PrivilegedPolicy` objects: the runner
hands them the ground truth as a separate argument. Only the shipped classes get it
(:mod:`gym_repost.policy.privileged`); the loader refuses any other ``PrivilegedPolicy``.

An exception a policy raises (in its constructor, ``reset`` or ``act``) is the policy's
own error: the episode ends there and is recorded as a failed one, with the traceback in
its ``policy_error`` (counted apart as ``policy_errors``; a policy that cannot be built
at all stops the run before it starts). Only an
:class:`~gym_repost.errors.InfrastructureError` it lets through (an LLM endpoint that is
down) is an infrastructure error: not scored, retried by a rerun. A bad *action* is the
agent's mistake and becomes an observation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol, runtime_checkable

from gym_repost.task_view import TaskView
from gym_repost.tools import tool_call  # noqa: F401 - re-exported: policies build actions with it

Action = dict[str, Any] | str
"""A tool call: ``{"tool": name, "args": {...}}`` or its JSON text."""


@runtime_checkable
class Policy(Protocol):
    """Chooses tool calls for one episode at a time."""

    def reset(self, task: TaskView, observation: str, info: dict[str, Any], *, seed: int) -> None:
        """Begin an episode on the task ``task`` views; ``observation`` is the task statement."""

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        """The next tool call, given the last observation and info."""


class PrivilegedPolicy(ABC):
    """A shipped policy that is handed the ground truth: a control, not an agent.

    ``reset`` takes the ground truth as an extra keyword argument, given by the runner
    only to the classes listed in :data:`gym_repost.policy.privileged.PRIVILEGED_POLICIES`
    and only when :attr:`needs_ground_truth` is true (``None`` otherwise).
    """

    @property
    def needs_ground_truth(self) -> bool:
        """Whether this episode's ``reset`` needs the ground truth."""
        return True

    @abstractmethod
    def reset(
        self, task: TaskView, observation: str, info: dict[str, Any], *, seed: int, ground_truth: str | None = None
    ) -> None:
        """Begin an episode; ``ground_truth`` is the task's answer (None when not needed)."""

    @abstractmethod
    def act(self, observation: str, info: dict[str, Any]) -> Action:
        """The next tool call, given the last observation and info."""
