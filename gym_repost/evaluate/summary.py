"""Summaries of a run: ``summary.json``'s content, computed from episode records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gym_repost.evaluate.metrics import SampleOutcome, mean_pass_at_k, self_repair_curve
from gym_repost.evaluate.records import Episode, RunConfig


def summarize(episodes: Sequence[Episode], config: RunConfig | None) -> dict[str, Any]:
    """The run's metrics.

    Top-level keys: ``pass@1`` .. ``pass@n`` (n = samples per task), ``self_repair``
    (pass rate after 0..R repairs, keys as strings), ``mean_reward`` (the episodes' mean
    reward: for test-file tasks the metric blend, partial credit pass@k does not show),
    ``infra_errors`` (episodes not scored because the infrastructure failed), and counts.
    Infrastructure errors are left out of every rate.
    """
    scored = [e for e in episodes if e.status != "infra_error"]
    outcomes = [SampleOutcome(e.task_id, e.solved_at) for e in scored]
    n = config.n if config else max((e.sample + 1 for e in episodes), default=1)
    repairs = config.repairs if config else max((len(e.submissions) - 1 for e in scored), default=0)
    summary: dict[str, Any] = {}
    for k in range(1, n + 1):
        summary[f"pass@{k}"] = mean_pass_at_k(outcomes, k)
    summary["self_repair"] = {str(r): v for r, v in self_repair_curve(outcomes, repairs).items()}
    summary["mean_reward"] = sum(e.reward for e in scored) / len(scored) if scored else None
    summary["infra_errors"] = len(episodes) - len(scored)
    summary["episodes"] = len(episodes)
    summary["scored_episodes"] = len(scored)
    summary["tasks"] = len({e.task_id for e in episodes})
    summary["passed_episodes"] = sum(e.status == "passed" for e in scored)
    summary["truncated_episodes"] = sum(e.truncated for e in scored)
    if config is not None:
        summary["policy"] = config.policy
        summary["n"] = config.n
        summary["repairs"] = config.repairs
    return summary
