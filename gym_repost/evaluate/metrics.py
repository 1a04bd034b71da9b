"""Pure functions for the evaluation metrics: pass@k, the self-repair table and the shares
of infrastructure and policy errors."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of Chen et al. (2021), in product form.

    ``1 - C(n - c, k) / C(n, k)``: the probability that at least one of ``k`` samples
    drawn without replacement from ``n`` (of which ``c`` pass) passes.

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


INFRA_WARNING_SHARE = 0.05
"""Above this share of infrastructure errors a run's scored-only figures are not trusted
(and above this share of policy errors, the policy is more broken than it is scored)."""


@dataclass(frozen=True)
class SampleOutcome:
    """One finished, scored episode: which submission (0-based) passed, if any."""

    task_id: str
    solved_at: int | None


def mean_pass_at_k(outcomes: Iterable[SampleOutcome], k: int) -> float | None:
    """pass@k averaged over tasks; tasks with fewer than ``k`` samples are left out.

    Returns None when no task has ``k`` samples.
    """
    per_task: dict[str, list[SampleOutcome]] = defaultdict(list)
    for o in outcomes:
        per_task[o.task_id].append(o)
    scores = [pass_at_k(len(s), sum(o.solved_at is not None for o in s), k) for s in per_task.values() if len(s) >= k]
    return sum(scores) / len(scores) if scores else None


def self_repair_curve(outcomes: Sequence[SampleOutcome], repairs: int) -> dict[int, float]:
    """Pass rate after ``0..repairs`` repair iterations (RepoST's self-repair table).

    After ``r`` repairs a sample passes if one of its first ``r + 1`` submissions
    passed. Rates are pass@1 averaged per task, then over tasks.
    """
    per_task: dict[str, list[SampleOutcome]] = defaultdict(list)
    for o in outcomes:
        per_task[o.task_id].append(o)
    curve: dict[int, float] = {}
    for r in range(repairs + 1):
        rates = [sum(o.solved_at is not None and o.solved_at <= r for o in s) / len(s) for s in per_task.values()]
        curve[r] = sum(rates) / len(rates) if rates else 0.0
    return curve


def infra_error_share(infra_errors: int, episodes: int) -> float:
    """The share of episodes that ended in an infrastructure error (0.0 for no episodes).

    Raises:
        ValueError: unless ``0 <= infra_errors <= episodes``.
    """
    if not 0 <= infra_errors <= episodes:
        raise ValueError(f"need 0 <= infra_errors <= episodes, got {infra_errors} of {episodes}")
    return infra_errors / episodes if episodes else 0.0


def infra_warning(infra_errors: int, episodes: int, threshold: float = INFRA_WARNING_SHARE) -> str | None:
    """A sentence warning that the scored-only figures are unreliable, or None.

    Scored-only pass@k leaves infrastructure errors out, so a policy (or a broken host) that
    turns its failures into infrastructure errors inflates it. Above ``threshold`` of the
    episodes, the figures that count infrastructure errors as failures are the ones to read.
    """
    share = infra_error_share(infra_errors, episodes)
    if share <= threshold:
        return None
    return (
        f"{infra_errors} of {episodes} episodes ({100 * share:.1f}%) ended in an "
        f"infrastructure error, more than {100 * threshold:.0f}%: the scored-only figures "
        "leave them out and may overstate the policy; read the figures that count them as "
        "failures (infra = fail), and rerun the same command to retry them."
    )


def policy_warning(policy_errors: int, episodes: int, threshold: float = INFRA_WARNING_SHARE) -> str | None:
    """A sentence warning that the policy itself keeps failing, or None.

    A policy error (the policy's ``reset`` or ``act`` raised) is a failed episode, so the
    figures count it; above ``threshold`` of the episodes they measure the policy's bugs
    more than its coding. A rerun does not retry them: fix the policy (each episode's
    ``policy_error`` holds its traceback) and rerun with ``--overwrite``.
    """
    share = infra_error_share(policy_errors, episodes)
    if share <= threshold:
        return None
    return (
        f"{policy_errors} of {episodes} episodes ({100 * share:.1f}%) ended in an error of the "
        f"policy's own (its reset() or act() raised), more than {100 * threshold:.0f}%: they count "
        "as failures; each episode's policy_error holds the traceback (see the report)."
    )
