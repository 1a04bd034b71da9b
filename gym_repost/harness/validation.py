"""Task validation: does the ground truth pass, and do the tests reject wrong code?

For each task: the ground truth must pass; trivial candidates (``return None``, return the
first argument, return ``self``, return the ground truth's most common value, raise its
most common exception: :func:`~gym_repost.harness.candidate.trivial_candidates`) and
mutants of the ground truth must fail. The share of mutants the tests kill measures their
strength; a task whose tests accept a trivial candidate is flagged.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_repost.analysis.mutation import (
    AUDIT_OPERATORS,
    OPERATORS,
    Mutant,
    MutationScore,
    generate_mutants,
    mutation_score,
    sample_mutants,
)
from gym_repost.analysis.packages import distribution_for
from gym_repost.executor import Executor, need_sandbox, with_sandbox
from gym_repost.harness import do_nothing_candidate, reference_for, run_function_tests, run_host_made
from gym_repost.harness.candidate import trivial_candidates
from gym_repost.harness.coverage import FunctionCoverage, measure_coverage
from gym_repost.harness.function_report import TestReport
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask

_MISSING = re.compile(r"No module named '([^']+)'")
MIN_MUTANTS = 5
"""Mutants a task's tests are measured on, at least: a small target gets the audit's operators
too (:data:`~gym_repost.analysis.mutation.AUDIT_OPERATORS`); with fewer, "100% killed" may
mean one of one, and the quality stage drops it."""


def target_mutants(ground_truth: str, count: int, seed: int) -> list[Mutant]:
    """A reproducible sample of ``count`` mutants of the ground truth, from more operators
    when the usual ones give fewer (a small target; the builder asks for at least
    :data:`MIN_MUTANTS`)."""
    population = generate_mutants(ground_truth)
    if len(population) < count:
        population = generate_mutants(ground_truth, operators=(*OPERATORS, *AUDIT_OPERATORS))
    return sample_mutants(population, count, seed)


def failure_cause(report: TestReport) -> str:
    """A one-line cause of a failing run, for tables and notes."""
    if report.passed:
        return ""
    if report.status == "timeout":
        head = report.message if report.message.startswith("timed out") else "timed out"
        last = [ln for ln in (report.stderr or report.stdout).strip().split("\n") if ln.strip()]
        if last:
            return f"{head} (last output: {last[-1].strip()[:100]})"
        if report.returncode == -signal.SIGXCPU:  # it computed: it was not waiting
            return head
        return head + " with no output (waiting on the network, which the sandbox blocks?)"
    if report.exception in ("ModuleNotFoundError", "ImportError"):
        found = _MISSING.search(report.message)
        if found:
            module = found.group(1)
            return f"missing package {module} (pip install {distribution_for(module)})"
    text = f"{report.exception}: {report.message}" if report.message else str(report.exception)
    return " ".join(text.split())[:160]


@dataclass
class SurvivingMutant:
    """A mutant the tests accepted."""

    operator: str
    line: int
    original: str
    replacement: str


@dataclass
class TaskValidation:
    """The validation of one task."""

    task_id: str
    task_name: str
    ground_truth: TestReport
    do_nothing: TestReport | None = None
    mutants: MutationScore | None = None
    surviving: list[SurvivingMutant] = field(default_factory=list)
    coverage: FunctionCoverage | None = None
    verdict_mode: str | None = None
    """How candidates are judged: ``inputs`` (recorded calls replayed without the tests) or
    ``driver`` (the tests run beside the candidate, the record taken alongside)."""
    nondeterministic: list[str] = field(default_factory=list)
    """What differed between two runs of the ground truth (not compared; keep out of eval)."""
    returns_callable: bool = False
    """The ground truth returns a function (a factory, a decorator): compared by its name
    only, never by what it does."""
    trivial: dict[str, bool] = field(default_factory=dict)
    """Each trivial candidate beyond ``return None`` (by what it does) and whether the tests
    accepted it."""

    @property
    def passed(self) -> bool:
        """The ground truth passes."""
        return self.ground_truth.passed

    @property
    def accepts_do_nothing(self) -> bool:
        """The tests accept a candidate that does nothing (weak tests)."""
        return self.do_nothing is not None and self.do_nothing.passed

    @property
    def accepts_trivial(self) -> list[str]:
        """The trivial candidates the tests accept (``return None`` included): weak tests."""
        return (["return None"] if self.accepts_do_nothing else []) + [k for k, ok in self.trivial.items() if ok]

    @property
    def cause(self) -> str:
        """Why the ground truth fails ('' when it passes)."""
        return failure_cause(self.ground_truth)

    @property
    def mutants_killed(self) -> int | None:
        """Mutants the tests rejected, timeouts included (None when none were tried)."""
        return self.mutants.killed + self.mutants.timeouts if self.mutants else None

    def record(self) -> dict[str, Any]:
        """The JSON record of ``validate --json``."""
        return {
            "task_id": self.task_id,
            "task": self.task_name,
            "ground_truth_passed": self.passed,
            "cause": self.cause,
            "accepts_do_nothing": self.accepts_do_nothing,
            "accepts_trivial": self.accepts_trivial,
            "returns_callable": self.returns_callable,
            "verdict_mode": self.verdict_mode,
            "nondeterministic": self.nondeterministic,
            "mutants_killed": self.mutants_killed,
            "mutant_timeouts": self.mutants.timeouts if self.mutants else None,
            "mutants_total": self.mutants.total if self.mutants else None,
            "surviving_mutants": [vars(s) for s in self.surviving],
            "branch_coverage": self.coverage.branch_coverage if self.coverage else None,
            "branches": self.coverage.branches if self.coverage else None,
        }


def _mutant_kills(
    sandbox: Sandbox, task: FunctionTask, chosen: list[Mutant], reports: list[TestReport]
) -> tuple[MutationScore, list[SurvivingMutant]]:
    killed = timeouts = 0
    surviving: list[SurvivingMutant] = []
    for mutant, report in zip(chosen, reports):
        if report.passed:
            surviving.append(SurvivingMutant(mutant.operator, mutant.line, mutant.original, mutant.replacement))
        elif report.status == "timeout":
            timeouts += 1
        else:
            killed += 1
    return mutation_score(killed, len(chosen), timeouts), surviving


def validate_task(
    sandbox: Sandbox, task: FunctionTask, *, mutants: int = 10, seed: int = 0, coverage: bool = False
) -> TaskValidation:
    """Run the ground truth, a do-nothing candidate and up to ``mutants`` mutants.

    The checks beyond the ground truth run only when it passes (otherwise they say
    nothing about the tests).

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    result = TaskValidation(task.id, task.name, run_function_tests(sandbox, task, task.ground_truth))
    if not result.passed:
        return result
    reference = reference_for(sandbox, task)
    result.verdict_mode, result.nondeterministic = reference.mode, list(reference.nondeterministic)
    result.returns_callable = any(call.get("k") == "callable" for call in reference.calls)
    trivial = trivial_candidates(task, reference.calls)
    trivial.pop("return None")
    chosen = target_mutants(task.ground_truth, mutants, seed) if mutants > 0 else []
    if chosen:
        codes = [do_nothing_candidate(task), *trivial.values(), *(m.source for m in chosen)]
        reports = run_host_made(sandbox, task, codes)
        result.do_nothing = reports[0]
        result.trivial = {label: report.passed for label, report in zip(trivial, reports[1:])}
        result.mutants, result.surviving = _mutant_kills(sandbox, task, chosen, reports[1 + len(trivial) :])
    else:
        # alone, a batch would run the ground truth again beside it: judged as an agent's
        # empty submission is, in one run
        result.do_nothing = run_function_tests(sandbox, task, do_nothing_candidate(task))
        result.trivial = {label: run_function_tests(sandbox, task, code).passed for label, code in trivial.items()}
        if mutants > 0:
            result.mutants = mutation_score(0, 0, 0)
    if coverage:
        result.coverage = measure_coverage(sandbox, task)
    return result


@dataclass(frozen=True)
class ValidateWork:
    """The unit of work of :func:`validate_tasks`: one task's validation (picklable)."""

    mutants: int = 10
    seed: int = 0
    coverage: bool = False

    def __call__(self, task: FunctionTask, sandbox: Sandbox | None) -> TaskValidation:
        return validate_task(
            need_sandbox(sandbox, "validation"), task, mutants=self.mutants, seed=self.seed, coverage=self.coverage
        )


def validate_tasks(
    sandbox: Sandbox | None,
    tasks: Sequence[FunctionTask],
    *,
    mutants: int = 10,
    seed: int = 0,
    coverage: bool = False,
    executor: Executor | None = None,
    on_result: Callable[[TaskValidation], None] | None = None,
) -> list[TaskValidation]:
    """:func:`validate_task` for every task, in task order, on ``executor`` (default: two
    threads over ``sandbox``; an executor with sandboxes of its own needs no ``sandbox``)."""
    work = ValidateWork(mutants=mutants, seed=seed, coverage=coverage)
    return with_sandbox(executor, sandbox).map(work, tasks, on_result)


def validation_totals(results: Sequence[TaskValidation]) -> dict[str, Any]:
    """The totals of a validation: what passed, what the tests let through, kill rate, coverage."""
    passed = [r for r in results if r.passed]
    killed = sum(r.mutants_killed or 0 for r in passed)
    total = sum(r.mutants.total for r in passed if r.mutants)
    covs = [r.coverage.branch_coverage for r in passed if r.coverage is not None]
    return {
        "tasks": len(results),
        "ground_truth_passed": len(passed),
        "ground_truth_failed": [{"task": r.task_name, "cause": r.cause} for r in results if not r.passed],
        "accepts_do_nothing": [r.task_name for r in passed if r.accepts_do_nothing],
        "accepts_trivial": {r.task_name: r.accepts_trivial for r in passed if r.accepts_trivial},
        "nondeterministic": [r.task_name for r in passed if r.nondeterministic],
        "verdict_modes": {mode: sum(r.verdict_mode == mode for r in passed) for mode in ("inputs", "driver")},
        "mutants_killed": killed,
        "mutants_total": total,
        "mutant_kill_rate": killed / total if total else None,
        "mean_branch_coverage": sum(covs) / len(covs) if covs else None,
    }
