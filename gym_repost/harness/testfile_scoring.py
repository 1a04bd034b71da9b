"""Scores of a test file, scores relative to the ground truth, and the reward blend (pure).

Five metrics (:data:`METRICS`), each in [0, 1]:

* ``execution_rate``: share of the tests that ran (skipped ones aside) without an error.
  0 when the file does not *run*: it does not parse, import or collect, has no test that
  ran, crashed, or hung (the whole file, or one test past its time limit);
* ``pass_rate``: share of the tests that ran that passed;
* ``line_coverage`` and ``branch_coverage`` of the focal file (coverage.py), counted over
  the tests that passed plus the lines run at import time; ``branch_coverage`` is None
  for a file without branches;
* ``mutation_score`` of the focal file over the task's seeded mutant sample, None when no
  mutant was scored.

Relative scores divide by the ground truth's score (undefined, None, when the ground
truth scores 0 or the metric is None).

The reward (:func:`blend`), with :class:`RewardConfig`::

    reward = prod(gates) * sum(w[m] * v[m]) / sum(w[m])     over the weighted metrics m
                                                             whose value is not None
    v[m] = min(relative[m], cap)   when relative=True and relative[m] is defined
         = metric[m]               otherwise

Defaults: gates ``execution_rate`` and ``pass_rate``; weights line 0.25, branch 0.25,
mutation 0.5; relative, capped at 1. The repository's own test file therefore scores 1.0;
a file whose tests run and pass but check nothing scores its coverage share only. A
linear blend of all five metrics is ``RewardConfig(gates=(), weights={...all five...})``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gym_repost.harness.testfile import TestFileRun
from gym_repost.task import TestFileMetrics

METRICS: tuple[str, ...] = ("execution_rate", "pass_rate", "line_coverage", "branch_coverage", "mutation_score")
"""The metric names, in report order."""

RepairKind = Literal["execution", "failures", "coverage", "mutation"]
"""What a repair round asks to improve (see :func:`weakest_metric`)."""


def file_runs(run: TestFileRun) -> bool:
    """The file ran: collected without errors, at least one test ran, nothing hung or crashed."""
    ran = [t for t in run.tests if t.outcome != "skipped"]
    return (
        run.status == "completed"
        and not run.collection_errors
        and bool(ran)
        and not any(t.outcome == "timeout" for t in ran)
    )


def _ratio(hit: int, total: int) -> float:
    return hit / total if total else 0.0


def metrics_from_run(run: TestFileRun) -> TestFileMetrics:
    """The metrics of one run (see the module docstring for their definitions)."""
    counts = {o: run.count(o) for o in ("passed", "failed", "error", "timeout", "skipped")}
    ran = len(run.tests) - counts["skipped"]
    runs = file_runs(run)
    lines = len(run.executed_lines) + len(run.missing_lines)
    branches = len(run.executed_branches) + len(run.missing_branches)
    score = run.mutation if runs else None
    return TestFileMetrics(
        tests=len(run.tests),
        passed=counts["passed"],
        failed=counts["failed"],
        errors=counts["error"] + counts["timeout"],
        skipped=counts["skipped"],
        execution_rate=_ratio(counts["passed"] + counts["failed"], ran) if runs else 0.0,
        pass_rate=_ratio(counts["passed"], ran) if runs else 0.0,
        line_coverage=_ratio(len(run.executed_lines), lines) if runs else 0.0,
        branch_coverage=(_ratio(len(run.executed_branches), branches) if runs else 0.0) if branches else None,
        lines=lines,
        branches=branches,
        mutation_score=score.score if score else None,
        mutants_killed=score.killed if score else 0,
        mutants_timeouts=score.timeouts if score else 0,
        mutants_total=score.total if score else 0,
        mutants_population=run.population,
        mutants_unapplied=run.count_mutants("unapplied"),
        mutation_ci_low=score.ci_low if score else 0.0,
        mutation_ci_high=score.ci_high if score else 1.0,
    )


def relative_metrics(metrics: TestFileMetrics, reference: TestFileMetrics) -> dict[str, float | None]:
    """Each metric divided by the reference's; None where that is undefined.

    Undefined: the metric or the reference's is None, or the reference's is 0.
    """
    out: dict[str, float | None] = {}
    for name in METRICS:
        value, ref = getattr(metrics, name), getattr(reference, name)
        out[name] = None if value is None or ref is None or ref <= 0 else value / ref
    return out


class RewardConfig(BaseModel):
    """How the metrics of a test file blend into one reward in [0, 1] (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: dict[str, float] = Field(
        default_factory=lambda: {"line_coverage": 0.25, "branch_coverage": 0.25, "mutation_score": 0.5}
    )
    """Weight of each blended metric (names from :data:`METRICS`)."""
    gates: tuple[str, ...] = ("execution_rate", "pass_rate")
    """Metrics that multiply the blend (a file that does not run earns nothing)."""
    relative: bool = True
    """Use each metric relative to the ground truth's (where defined)."""
    cap: float = Field(default=1.0, gt=0)
    """Largest relative value counted (beating the ground truth earns no more than this)."""
    pass_threshold: float = Field(default=0.9, ge=0, le=1)
    """A submission *passes* when the file runs, every test passes and the reward is at
    least this (the task's pass@k and ``terminated``)."""

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, weights: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(weights) - set(METRICS))
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known: {list(METRICS)}")
        if any(w < 0 for w in weights.values()) or not any(w > 0 for w in weights.values()):
            raise ValueError("weights must be non-negative, at least one positive")
        return weights

    @field_validator("gates")
    @classmethod
    def _check_gates(cls, gates: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(gates) - set(METRICS))
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known: {list(METRICS)}")
        return gates


def metric_value(
    name: str, metrics: TestFileMetrics, relative: Mapping[str, float | None], config: RewardConfig
) -> float | None:
    """The value metric ``name`` contributes to the blend (None: left out)."""
    value = getattr(metrics, name)
    if value is None:
        return None
    if config.relative and relative.get(name) is not None:
        return min(float(relative[name]), config.cap)  # type: ignore[arg-type]
    return float(value)


def blend(metrics: TestFileMetrics, reference: TestFileMetrics, config: RewardConfig | None = None) -> float:
    """The reward of a test file with ``metrics`` against the ground truth's ``reference``."""
    config = config or RewardConfig()
    relative = relative_metrics(metrics, reference)
    gate = 1.0
    for name in config.gates:
        value = metric_value(name, metrics, relative, config)
        gate *= 1.0 if value is None else value
    terms = [(w, metric_value(m, metrics, relative, config)) for m, w in config.weights.items() if w > 0]
    present = [(w, v) for w, v in terms if v is not None]
    if not present:
        return gate
    return gate * sum(w * v for w, v in present) / sum(w for w, _ in present)


def passes(metrics: TestFileMetrics, reward: float, config: RewardConfig | None = None) -> bool:
    """A passing submission: the file runs, every test that ran passed, reward >= threshold."""
    config = config or RewardConfig()
    return metrics.execution_rate == 1.0 and metrics.pass_rate == 1.0 and reward >= config.pass_threshold


def weakest_metric(metrics: TestFileMetrics, reference: TestFileMetrics, *, target: float = 1.0) -> RepairKind | None:
    """What a repair round should fix first, as Repo-Smith's selection orders it.

    Execution errors first (the file does not run, or a test raises), then failing
    tests, then coverage (line or branch, relative to the reference, below ``target``),
    then the mutation score (relative, below ``target``). None: nothing to repair.
    Where a relative value is undefined the absolute one is compared with ``target``.
    """
    if metrics.execution_rate < 1.0:
        return "execution"
    if metrics.pass_rate < 1.0:
        return "failures"
    relative = relative_metrics(metrics, reference)

    def below(name: str) -> bool:
        value = relative[name] if relative[name] is not None else getattr(metrics, name)
        return value is not None and value < target

    if below("line_coverage") or below("branch_coverage"):
        return "coverage"
    if below("mutation_score"):
        return "mutation"
    return None
