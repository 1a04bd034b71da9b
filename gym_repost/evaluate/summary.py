"""Summaries of a run: ``summary.json``'s content, computed from episode records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gym_repost.evaluate.metrics import (
    SampleOutcome,
    infra_error_share,
    infra_warning,
    mean_pass_at_k,
    policy_warning,
    self_repair_curve,
)
from gym_repost.evaluate.run_dir import Episode, RunConfig


def rates(outcomes: Sequence[SampleOutcome], n: int, repairs: int) -> dict[str, Any]:
    """``pass@1`` .. ``pass@n`` and ``self_repair`` (keys as strings) of some outcomes."""
    figures: dict[str, Any] = {f"pass@{k}": mean_pass_at_k(outcomes, k) for k in range(1, n + 1)}
    figures["self_repair"] = {str(r): v for r, v in self_repair_curve(outcomes, repairs).items()}
    return figures


def repairs_by_test_runs(scored: Sequence[Episode]) -> dict[str, float] | None:
    """Pass rate after ``r`` failing test runs (``run_tests`` calls and submissions, in
    order; keys as strings), over the scored episodes that record their test runs, or None
    when none does. ``self_repair`` counts failed *submissions* only, so an agent that
    repairs after ``run_tests`` and submits once shows there as passing with r=0; here each
    failing test run before the pass counts as a repair."""
    recorded = [e for e in scored if e.test_runs is not None]
    if not recorded:
        return None
    outcomes = [
        SampleOutcome(e.task_id, runs.index(True) if True in runs else None)
        for e in recorded
        if (runs := e.test_runs) is not None
    ]
    longest = max((len(e.test_runs) - 1 for e in recorded if e.test_runs), default=0)
    return {str(r): v for r, v in self_repair_curve(outcomes, longest).items()}


def summarize(episodes: Sequence[Episode], config: RunConfig | None) -> dict[str, Any]:
    """The run's metrics.

    Top-level keys: ``pass@1`` .. ``pass@n`` (n = samples per task) and ``self_repair``
    (pass rate after 0..R repairs, keys as strings), both over *scored* episodes only;
    ``self_repair_by_test_runs``: pass rate after r failing test runs, ``run_tests``
    included (:func:`repairs_by_test_runs`); ``with_infra_errors``: the same figures
    with every infrastructure error counted as a failed episode (what a policy that
    provokes infrastructure errors cannot inflate);
    ``infra_errors`` (count), ``infra_error_share`` (of all episodes) and ``infra_warning``
    (a sentence when the share is above 5%, else None); ``policy_errors`` (scored, failed
    episodes that the policy's own error ended), ``policy_error_share`` and
    ``policy_warning`` (likewise); ``mean_reward`` (the scored
    episodes' mean reward: for test-file tasks the metric blend, partial credit pass@k does
    not show), and counts.
    """
    scored = [e for e in episodes if e.status != "infra_error"]
    outcomes = [SampleOutcome(e.task_id, e.solved_at) for e in scored]
    all_outcomes = [SampleOutcome(e.task_id, None if e.status == "infra_error" else e.solved_at) for e in episodes]
    n = config.n if config else max((e.sample + 1 for e in episodes), default=1)
    repairs = config.repairs if config else max((len(e.submissions) - 1 for e in scored), default=0)
    infra = len(episodes) - len(scored)
    summary: dict[str, Any] = rates(outcomes, n, repairs)
    summary["with_infra_errors"] = rates(all_outcomes, n, repairs)
    by_test_runs = repairs_by_test_runs(scored)
    if by_test_runs is not None:
        summary["self_repair_by_test_runs"] = by_test_runs
    summary["mean_reward"] = sum(e.reward for e in scored) / len(scored) if scored else None
    summary["infra_errors"] = infra
    summary["infra_error_share"] = infra_error_share(infra, len(episodes))
    summary["infra_warning"] = infra_warning(infra, len(episodes))
    policy_errors = sum(e.policy_error is not None for e in scored)
    summary["policy_errors"] = policy_errors
    summary["policy_error_share"] = infra_error_share(policy_errors, len(episodes))
    summary["policy_warning"] = policy_warning(policy_errors, len(episodes))
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
