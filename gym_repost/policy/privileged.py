"""Who is handed the ground truth, and how an episode's policy is reset.

Every caller that starts a policy on a task (the evaluation runner, the rejection
sampler's repair episodes) goes through :func:`reset_policy`: it builds the
:class:`~gym_repost.task_view.TaskView` and passes the ground truth to exactly the shipped
controls listed in :data:`PRIVILEGED_POLICIES` (by exact class, so a subclass defined in a
user's file is not one). Any other :class:`~gym_repost.policy.base.PrivilegedPolicy` is
refused.
"""

from __future__ import annotations

from typing import Any

from gym_repost.errors import ConfigError
from gym_repost.policy.base import PrivilegedPolicy
from gym_repost.task import Task
from gym_repost.task_view import TaskView, task_view

PRIVILEGED_POLICIES = (
    "gym_repost.policy.oracle:OraclePolicy",
    "gym_repost.policy.mutant:MutantPolicy",
    "gym_repost.policy.llm:LLMPolicy",
)
"""The shipped classes that may receive the ground truth (the LLM policy only to write a
docstring from it, with ``docstring=generated``; its solving prompt never shows it)."""


def _shipped_classes() -> tuple[type, ...]:
    from gym_repost.policy.llm import LLMPolicy
    from gym_repost.policy.mutant import MutantPolicy
    from gym_repost.policy.oracle import OraclePolicy

    return OraclePolicy, MutantPolicy, LLMPolicy


def is_shipped_privileged(cls: type) -> bool:
    """Whether ``cls`` is one of :data:`PRIVILEGED_POLICIES` (exactly, not a subclass)."""
    return cls in _shipped_classes()


def check_privilege(cls: Any, spec: str) -> None:
    """Refuse a :class:`PrivilegedPolicy` class that is not a shipped control.

    Raises:
        ConfigError: ``cls`` claims privilege it is not given.
    """
    if isinstance(cls, type) and issubclass(cls, PrivilegedPolicy) and not is_shipped_privileged(cls):
        raise ConfigError(
            f"{spec}: {cls.__name__} is a PrivilegedPolicy, and only the shipped controls "
            f"({', '.join(PRIVILEGED_POLICIES)}) are handed the ground truth; implement the "
            "Policy protocol (reset(task_view, observation, info, *, seed)) instead"
        )


def reset_policy(
    policy: Any, task: Task, observation: str, info: dict[str, Any], *, seed: int, statement: str | None = None
) -> TaskView:
    """Reset ``policy`` for an episode on ``task``; return the view it was given.

    Args:
        policy: the episode's policy.
        task: the task.
        observation: the policy's first observation.
        info: the environment's ``info`` after ``reset`` (budgets are read from it).
        seed: the episode's seed.
        statement: the task statement, when ``observation`` is something else.

    Raises:
        ConfigError: a privileged policy that is not a shipped control.
        Exception: whatever the policy's ``reset`` raises.
    """
    view = task_view(
        task,
        observation if statement is None else statement,
        max_steps=int(info["max_steps"]),
        max_submissions=int(info["max_submissions"]),
    )
    if not isinstance(policy, PrivilegedPolicy):
        policy.reset(view, observation, info, seed=seed)
        return view
    check_privilege(type(policy), type(policy).__name__)
    truth = task.ground_truth if policy.needs_ground_truth else None
    policy.reset(view, observation, info, seed=seed, ground_truth=truth)
    return view
