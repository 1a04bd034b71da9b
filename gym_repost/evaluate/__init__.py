"""Evaluation: the rollout runner, pass@k, self-repair curves and reports.

May import: bounded_json, env, errors, executor, policy, sandbox, task.
"""

from gym_repost.evaluate.metrics import pass_at_k, self_repair_curve
from gym_repost.evaluate.run_dir import Episode, RunConfig, RunDir, Trajectory
from gym_repost.evaluate.runner import evaluate, run_episode
from gym_repost.evaluate.summary import summarize

__all__ = [
    "Episode",
    "RunConfig",
    "RunDir",
    "Trajectory",
    "evaluate",
    "pass_at_k",
    "run_episode",
    "self_repair_curve",
    "summarize",
]
