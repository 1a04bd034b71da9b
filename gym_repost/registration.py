"""The environments' Gymnasium ids and their registration, without importing them.

``import gym_repost`` registers both ids with string entry points, so Gymnasium imports an
environment's module (and its dependencies) only when ``gym.make`` first builds one; the
command line and library code that never builds an environment do not pay for it.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

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
