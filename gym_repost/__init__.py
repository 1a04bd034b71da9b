"""gym-repost: real Python repositories as sandboxed, executable coding environments.

>>> import gymnasium as gym, gym_repost
>>> tasks = gym_repost.load_tasks("tasks/demo.jsonl")
>>> env = gym.make("gym_repost/Function-v0", task=tasks[0])
"""

from __future__ import annotations

from gym_repost.env import FUNCTION_ENV_ID, FunctionEnv
from gym_repost.errors import GymRepostError
from gym_repost.task import FunctionTask, Task, TaskList, load_tasks, save_tasks

__version__ = "0.1.0"

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
