"""Gymnasium environments of gym-repost, registered on import.

``gym.make("gym_repost/Function-v0", task=task)`` (or ``"gym_repost/TestFile-v0"`` for a
test-file task) after ``import gym_repost``.

May import: bounded_json, errors, harness, prompting, registration, sandbox, task, task_view, tools.
"""

from __future__ import annotations

from typing import Any

from gym_repost.env.function_env import FunctionEnv, RewardMode
from gym_repost.env.spaces import AnyText
from gym_repost.env.testfile_env import TestFileEnv
from gym_repost.registration import FUNCTION_ENV_ID, TESTFILE_ENV_ID, register_envs
from gym_repost.sandbox.base import Sandbox


def make_task_env(
    task: Any, *, sandbox: Sandbox | None, max_steps: int, max_submissions: int, reward: RewardMode = "binary"
) -> FunctionEnv | TestFileEnv:
    """The environment of the task's kind: ``Function-v0`` or ``TestFile-v0``.

    ``reward`` applies to function tasks (a test-file task's reward is its metric blend).
    """
    if task.kind == "testfile":
        return TestFileEnv(task, sandbox=sandbox, max_steps=max_steps, max_submissions=max_submissions)
    return FunctionEnv(task, sandbox=sandbox, max_steps=max_steps, max_submissions=max_submissions, reward=reward)


register_envs()

__all__ = [
    "AnyText",
    "FUNCTION_ENV_ID",
    "FunctionEnv",
    "TESTFILE_ENV_ID",
    "TestFileEnv",
    "make_task_env",
    "register_envs",
]
