"""Gymnasium environments of gym-repost, registered on import.

``gym.make("gym_repost/Function-v0", task=task)`` (or ``"gym_repost/TestFile-v0"`` for a
test-file task) after ``import gym_repost``.

May import: bounded_json, errors, harness, prompting, sandbox, task, task_view, tools.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

from gym_repost.env.function_env import FunctionEnv
from gym_repost.env.spaces import AnyText
from gym_repost.env.testfile_env import TestFileEnv

FUNCTION_ENV_ID = "gym_repost/Function-v0"
TESTFILE_ENV_ID = "gym_repost/TestFile-v0"


def register_envs() -> None:
    """Register the environments with Gymnasium (idempotent)."""
    if FUNCTION_ENV_ID not in registry:
        register(
            id=FUNCTION_ENV_ID,
            entry_point="gym_repost.env.function_env:FunctionEnv",
            disable_env_checker=True,
            order_enforce=False,
        )
    if TESTFILE_ENV_ID not in registry:
        register(
            id=TESTFILE_ENV_ID,
            entry_point="gym_repost.env.testfile_env:TestFileEnv",
            disable_env_checker=True,
            order_enforce=False,
        )


register_envs()

__all__ = ["AnyText", "FUNCTION_ENV_ID", "FunctionEnv", "TESTFILE_ENV_ID", "TestFileEnv", "register_envs"]
