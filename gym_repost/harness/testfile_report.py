"""What ``run_tests`` and ``submit`` tell the agent about a test file, and the runner.

>>> report = score_test_file(sandbox, task, test_source)
>>> report.reward, report.passed, report.to_text()

The report names the tests that errored or failed (with the end of pytest's traceback),
the focal file's lines and branches no passing test reaches, and the mutants that
survived, as diffs. It holds no wall-clock timings, so seeded episodes reproduce.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from gym_repost.harness.testfile import TestFileRun, run_test_file
from gym_repost.harness.testfile_scoring import (
    METRICS,
    RewardConfig,
    blend,
    file_runs,
    metrics_from_run,
    passes,
    relative_metrics,
)
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import TestFileMetrics, TestFileTask

ReportStatus = Literal["passed", "failed", "error", "timeout", "invalid"]
_SHOWN_TESTS = 8
_SHOWN_MUTANTS = 5
_SHOWN_LINES = 40
_LONGREPR = 900
_LABELS = {
    "execution_rate": "execution",
    "pass_rate": "tests passing",
    "line_coverage": "line coverage",
    "branch_coverage": "branch coverage",
    "mutation_score": "mutation score",
}


class FailedTest(BaseModel):
    """A test that did not pass."""

    nodeid: str
    outcome: str
    exception: str | None = None
    message: str = ""
    traceback: str = ""


class SurvivingMutant(BaseModel):
    """A mutant of the focal file that no test failed on."""

    line: int
    operator: str
    status: str
    """``survived`` (tests ran and passed) or ``uncovered`` (no passing test runs the line)."""
    diff: str


class TestFileReport(BaseModel):
    """The scoring of one test file.

    ``status`` describes the run: ``passed`` (every test passed), ``failed`` (assertions
    failed), ``error`` (the file does not import or collect, has no test, crashed, or a
    test raised), ``timeout`` (the file or a test hung), ``invalid`` (it does not parse).
    ``passed`` is the task's verdict: the file runs, every test passes and the reward
    reaches the configured threshold.
    """

    __test__ = False  # not a pytest test class

    passed: bool
    status: ReportStatus
    exception: str | None = None
    message: str = ""
    metrics: TestFileMetrics
    relative: dict[str, float | None]
    reward: float
    reference: TestFileMetrics
    failing: list[FailedTest] = Field(default_factory=list)
    missing_lines: list[int] = Field(default_factory=list)
    missing_branches: list[tuple[int, int]] = Field(default_factory=list)
    surviving_mutants: list[SurvivingMutant] = Field(default_factory=list)
    mutation_status: str = "not run"
    notes: list[str] = Field(default_factory=list)
    """What the run found beyond the figures (a test that failed on a decoy, tests that
    fail in a fresh process, calls that could not be replayed for coverage)."""
    focal_file: str = ""
    focal_lines: dict[int, str] = Field(default_factory=dict)
    """Source of the missing lines shown in the text (line number -> text)."""

    def to_text(self) -> str:
        """The report as the agent reads it."""
        parts = [self._headline(), self._scores_text(), "\n".join(self.notes)]
        parts += [self.failing_text(), self.coverage_text(), self.mutants_text()]
        return "\n\n".join(p for p in parts if p)

    def _headline(self) -> str:
        m = self.metrics
        if self.status == "invalid":
            return f"Your test file could not be run: {self.message}"
        if self.status in ("timeout", "error") and m.execution_rate == 0.0:
            return f"Your test file does not run ({self.status}): {self.message}"
        counts = (
            f"{m.passed} passed, {m.failed} failed, {m.errors} errors"
            + (f", {m.skipped} skipped" if m.skipped else "")
            + f" of {m.tests} tests"
        )
        verdict = "accepted" if self.passed else "below the bar" if self.status == "passed" else "not passing"
        return f"Tests: {counts}. Reward {self.reward:.3f} ({verdict})."

    def _scores_text(self) -> str:
        if self.status == "invalid":
            return ""
        rows = ["Scores (yours / the repository's own tests):"]
        for name in METRICS:
            mine, ref = getattr(self.metrics, name), getattr(self.reference, name)
            if mine is None and ref is None:
                continue
            rows.append(f"  {_LABELS[name]:<16} {_pct(mine):>6} / {_pct(ref):>6}")
        m = self.metrics
        if m.mutation_score is not None:
            rows.append(
                f"  mutants: {m.mutants_killed} killed, {m.mutants_timeouts} timed out, "
                f"{m.mutants_total - m.mutants_killed - m.mutants_timeouts} survived of "
                f"{m.mutants_total} sampled from {m.mutants_population} "
                f"(95% interval {_pct(m.mutation_ci_low)}-{_pct(m.mutation_ci_high)})"
            )
        if self.mutation_status in ("timeout", "crashed", "error"):
            rows.append(
                f"  (mutation testing stopped early: {self.mutation_status}; the mutants not run count as survived)"
            )
        return "\n".join(rows)

    def failing_text(self) -> str:
        if not self.failing:
            return ""
        out = [f"Tests that did not pass ({len(self.failing)}):"]
        for test in self.failing[:_SHOWN_TESTS]:
            cause = f"{test.exception}: {test.message}" if test.exception else test.message
            out.append(f"- {test.nodeid}: {test.outcome}" + (f" ({cause})" if cause else ""))
            if test.traceback:
                out.append("    " + test.traceback.strip().replace("\n", "\n    "))
        if len(self.failing) > _SHOWN_TESTS:
            out.append(f"[{len(self.failing) - _SHOWN_TESTS} more not shown]")
        return "\n".join(out)

    def coverage_text(self) -> str:
        if self.status == "invalid" or (not self.missing_lines and not self.missing_branches):
            return ""
        out = []
        if self.missing_lines:
            out.append(f"Lines of {self.focal_file} no passing test runs: {_ranges(self.missing_lines)}")
            out += [f"  {n:>5}  {self.focal_lines[n]}" for n in self.missing_lines if n in self.focal_lines]
        if self.missing_branches:
            shown = ", ".join(_branch(a, b) for a, b in self.missing_branches[:30])
            more = f" and {len(self.missing_branches) - 30} more" if len(self.missing_branches) > 30 else ""
            out.append(f"Branches not taken (line->line): {shown}{more}")
        return "\n".join(out)

    def mutants_text(self) -> str:
        if not self.surviving_mutants:
            return ""
        out = [
            f"Mutants of {self.focal_file} no test detects ({len(self.surviving_mutants)}); a good test fails on each:"
        ]
        for mutant in self.surviving_mutants[:_SHOWN_MUTANTS]:
            note = " (no passing test runs this line)" if mutant.status == "uncovered" else ""
            out.append(f"line {mutant.line}, {mutant.operator}{note}:\n{mutant.diff.rstrip()}")
        if len(self.surviving_mutants) > _SHOWN_MUTANTS:
            out.append(f"[{len(self.surviving_mutants) - _SHOWN_MUTANTS} more not shown]")
        return "\n".join(out)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _branch(a: int, b: int) -> str:
    return f"{a}->exit" if b < 0 else f"{a}->{b}"


def _ranges(lines: list[int]) -> str:
    spans: list[str] = []
    start = prev = lines[0]
    following: list[int | None] = [*lines[1:], None]
    for n in following:
        if n is not None and n == prev + 1:
            prev = n
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(spans)


def _state(run: TestFileRun) -> tuple[ReportStatus, str | None, str]:
    if run.status == "invalid":
        return "invalid", "SyntaxError", run.message
    if run.status == "timeout" or any(t.outcome == "timeout" for t in run.tests):
        hung = run.running or next((t.nodeid for t in run.tests if t.outcome == "timeout"), None)
        return "timeout", None, run.message or f"{hung} did not finish within its time limit"
    if run.collection_errors:
        first = run.collection_errors[0]
        return "error", None, f"{first.nodeid} could not be collected: {first.message}"
    if run.status != "completed":
        return "error", None, run.message or f"the test run {run.status}"
    if not file_runs(run):
        return "error", None, "no test ran (name test functions test_*; classes Test*)"
    if run.count("error"):
        return "error", None, f"{run.count('error')} test(s) raised an error"
    if run.count("failed"):
        return "failed", "AssertionError", f"{run.count('failed')} test(s) failed"
    return "passed", None, ""


def build_report(task: TestFileTask, run: TestFileRun, config: RewardConfig | None = None) -> TestFileReport:
    """Score ``run`` against the task's reference and describe it."""
    config = config or RewardConfig()
    metrics = metrics_from_run(run)
    reward = blend(metrics, task.reference, config)
    state, exception, message = _state(run)
    focal = task.repository.files.get(task.evaluation.focal_file, "").split("\n")
    shown = run.missing_lines[:_SHOWN_LINES]
    return TestFileReport(
        passed=passes(metrics, reward, config),
        status=state,
        exception=exception,
        message=message,
        metrics=metrics,
        relative=relative_metrics(metrics, task.reference),
        reward=reward,
        reference=task.reference,
        failing=_failing(run),
        missing_lines=run.missing_lines,
        missing_branches=run.missing_branches,
        mutation_status=run.mutation_status,
        surviving_mutants=[
            SurvivingMutant(
                line=m.mutant.line,
                operator=m.mutant.operator,
                status=m.status,
                diff=m.mutant.diff(task.evaluation.focal_file),
            )
            for m in run.surviving()
        ]
        if file_runs(run)
        else [],
        notes=run.notes() if file_runs(run) else [],
        focal_file=task.evaluation.focal_file,
        focal_lines={n: focal[n - 1] for n in shown if 0 < n <= len(focal)},
    )


def _failing(run: TestFileRun) -> list[FailedTest]:
    failing = [
        FailedTest(nodeid=e.nodeid, outcome="collection error", message=e.message, traceback=e.longrepr[-_LONGREPR:])
        for e in run.collection_errors
    ]
    for test in run.tests:
        if test.outcome in ("failed", "error", "timeout"):
            failing.append(
                FailedTest(
                    nodeid=test.nodeid,
                    outcome=test.outcome,
                    exception=test.exception,
                    message=test.message,
                    traceback=test.longrepr[-_LONGREPR:],
                )
            )
    return failing


def score_test_file(
    sandbox: Sandbox, task: TestFileTask, test_source: str, config: RewardConfig | None = None
) -> TestFileReport:
    """Run ``test_source`` as the task's test file and score it.

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    return build_report(task, run_test_file(sandbox, task, test_source), config)
