"""The environments' Gymnasium ids and their registration, without importing them.

``import gym_repost`` registers both ids with string entry points, so Gymnasium imports an
environment's module (and its dependencies) only when ``gym.make`` first builds one; the
command line and library code that never builds an environment do not pay for it.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

FUNCTION_ENV_ID = "gym_repost/Function-v0"
TESTFILE_ENV_ID = "gym_repost/TestFile-v0"


_ENTRY_POINTS = {
    FUNCTION_ENV_ID: "gym_repost.env.function_env:FunctionEnv",
    TESTFILE_ENV_ID: "gym_repost.env.testfile_env:TestFileEnv",
}


def register_envs() -> None:
    """Register the environments with Gymnasium (idempotent)."""
    for env_id, entry_point in _ENTRY_POINTS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=entry_point, disable_env_checker=True, order_enforce=False)
