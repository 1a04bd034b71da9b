"""gym-repost: real Python repositories as sandboxed, executable coding environments.

>>> import gymnasium as gym, gym_repost
>>> tasks = gym_repost.load_tasks("tasks/demo.jsonl")
>>> env = gym.make("gym_repost/Function-v0", task=tasks[0])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gym_repost.errors import GymRepostError
from gym_repost.registration import FUNCTION_ENV_ID, register_envs
from gym_repost.task import FunctionTask, Task, TaskList, load_tasks, save_tasks

if TYPE_CHECKING:
    from gym_repost.env import FunctionEnv

__version__ = "0.1.0"

register_envs()


def __getattr__(name: str) -> Any:
    """``FunctionEnv``, imported on first use: the environments' modules (Gymnasium's
    ``Env``, the tools, the harness) load only for what builds an environment."""
    if name == "FunctionEnv":
        from gym_repost.env import FunctionEnv

        return FunctionEnv
    raise AttributeError(f"module 'gym_repost' has no attribute {name!r}")


__all__ = [
    "FUNCTION_ENV_ID",
    "FunctionEnv",
    "FunctionTask",
    "GymRepostError",
    "Task",
    "TaskList",
    "__version__",
    "load_tasks",
    "save_tasks",
]
