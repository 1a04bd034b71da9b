"""Scores of a test file, relative scores and the reward blend, on hand-computed cases."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gym_repost.analysis.mutation import Mutant, generate_mutants
from gym_repost.harness.testfile import (
    CollectionError,
    MutantOutcome,
    TestFileRun,
    TestOutcome,
    statement_lines,
)
from gym_repost.harness.testfile_scoring import (
    RewardConfig,
    blend,
    file_runs,
    metrics_from_run,
    passes,
    relative_metrics,
    weakest_metric,
)
from gym_repost.task import TestFileMetrics

SOURCE = "def f(x):\n    if x > 1:\n        return x + 1\n    return 0\n"
MUTANTS = generate_mutants(SOURCE)


def _tests(**counts: int) -> list[TestOutcome]:
    out = []
    for outcome, n in counts.items():
        out += [TestOutcome(f"t.py::{outcome}{i}", outcome) for i in range(n)]  # type: ignore[arg-type]
    return out


def _mutants(*statuses: str) -> list[MutantOutcome]:
    return [MutantOutcome(MUTANTS[i], s) for i, s in enumerate(statuses)]  # type: ignore[arg-type]


def _run(**kwargs: object) -> TestFileRun:
    base: dict[str, object] = {
        "status": "completed",
        "tests": _tests(passed=3, failed=1, error=0),
        "executed_lines": [1, 2, 3],
        "missing_lines": [4],
        "executed_branches": [(2, 3)],
        "missing_branches": [(2, 4)],
        "mutants": [],
        "population": 0,
    }
    return TestFileRun(**{**base, **kwargs})  # type: ignore[arg-type]


def test_metrics_of_a_run_by_hand() -> None:
    run = _run(
        tests=_tests(passed=6, failed=1, error=1, skipped=2),
        mutants=_mutants("killed", "killed", "timeout", "survived", "uncovered", "unapplied"),
        population=len(MUTANTS),
    )
    m = metrics_from_run(run)
    # 8 tests ran (2 skipped): 7 without an error, 6 passed.
    assert (m.tests, m.passed, m.failed, m.errors, m.skipped) == (10, 6, 1, 1, 2)
    assert m.execution_rate == 7 / 8 and m.pass_rate == 6 / 8
    assert (m.line_coverage, m.branch_coverage, m.lines, m.branches) == (0.75, 0.5, 4, 2)
    # 5 scored mutants (the unapplied one aside): 2 killed + 1 timeout.
    assert (m.mutants_killed, m.mutants_timeouts, m.mutants_total, m.mutants_unapplied) == (2, 1, 5, 1)
    assert m.mutation_score == 3 / 5
    assert m.mutants_population == len(MUTANTS)
    assert m.mutation_ci_low <= 0.6 <= m.mutation_ci_high


@pytest.mark.parametrize(
    "run",
    [
        _run(status="timeout"),
        _run(status="crashed"),
        _run(tests=[]),
        _run(tests=_tests(skipped=2)),
        _run(collection_errors=[CollectionError("t.py", "ImportError: x", "")]),
        _run(tests=_tests(passed=3, timeout=1)),
    ],
    ids=["timeout", "crashed", "no tests", "all skipped", "collection error", "a test hung"],
)
def test_a_file_that_does_not_run_scores_zero(run: TestFileRun) -> None:
    assert not file_runs(run)
    m = metrics_from_run(run)
    assert (m.execution_rate, m.pass_rate, m.line_coverage, m.mutation_score) == (0.0, 0.0, 0.0, None)
    assert blend(m, TestFileMetrics(execution_rate=1, pass_rate=1, line_coverage=1, mutation_score=1)) == 0.0


def test_no_branches_means_no_branch_coverage() -> None:
    m = metrics_from_run(_run(executed_branches=[], missing_branches=[]))
    assert m.branch_coverage is None and m.branches == 0


REFERENCE = TestFileMetrics(
    execution_rate=1.0, pass_rate=1.0, line_coverage=0.8, branch_coverage=0.5, mutation_score=0.6
)


def test_relative_metrics() -> None:
    mine = TestFileMetrics(
        execution_rate=1.0, pass_rate=0.5, line_coverage=0.4, branch_coverage=None, mutation_score=0.9
    )
    assert relative_metrics(mine, REFERENCE) == {
        "execution_rate": 1.0,
        "pass_rate": 0.5,
        "line_coverage": 0.5,
        "branch_coverage": None,
        "mutation_score": pytest.approx(1.5),
    }
    zero_reference = TestFileMetrics(execution_rate=1.0, pass_rate=1.0, line_coverage=0.5, mutation_score=0.0)
    assert relative_metrics(mine, zero_reference)["mutation_score"] is None


def test_default_blend_by_hand() -> None:
    mine = TestFileMetrics(
        execution_rate=1.0, pass_rate=0.8, line_coverage=0.4, branch_coverage=0.5, mutation_score=0.3
    )
    # relative: line 0.5, branch 1.0, mutation 0.5; gates 1.0 * 0.8;
    # (0.25 * 0.5 + 0.25 * 1.0 + 0.5 * 0.5) / 1.0 = 0.625; reward 0.8 * 0.625 = 0.5.
    assert blend(mine, REFERENCE) == pytest.approx(0.5)


def test_blend_caps_relative_scores_and_skips_missing_metrics() -> None:
    mine = TestFileMetrics(
        execution_rate=1.0, pass_rate=1.0, line_coverage=1.0, branch_coverage=None, mutation_score=0.3
    )
    # line 1.0 / 0.8 = 1.25 capped to 1; branch left out; mutation 0.5:
    # (0.25 * 1 + 0.5 * 0.5) / 0.75 = 0.66667.
    assert blend(mine, REFERENCE) == pytest.approx(2 / 3)
    assert blend(mine, REFERENCE, RewardConfig(cap=2.0)) == pytest.approx((0.25 * 1.25 + 0.25) / 0.75)


def test_linear_absolute_blend_by_hand() -> None:
    config = RewardConfig(
        gates=(),
        relative=False,
        weights={"execution_rate": 1, "pass_rate": 1, "line_coverage": 1, "branch_coverage": 1, "mutation_score": 1},
    )
    mine = TestFileMetrics(
        execution_rate=1.0, pass_rate=0.5, line_coverage=0.5, branch_coverage=0.0, mutation_score=0.5
    )
    assert blend(mine, REFERENCE, config) == pytest.approx(2.5 / 5)


def test_the_reference_itself_scores_one_and_passes() -> None:
    assert blend(REFERENCE, REFERENCE) == pytest.approx(1.0)
    assert passes(REFERENCE, 1.0)
    assert not passes(REFERENCE, 0.89)
    assert not passes(REFERENCE.model_copy(update={"pass_rate": 0.9}), 1.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"weights": {"speed": 1.0}},
        {"weights": {"line_coverage": 0.0}},
        {"weights": {"line_coverage": -1.0}},
        {"gates": ["nonsense"]},
        {"cap": 0},
        {"pass_threshold": 1.5},
        {"relative": True, "extra": 1},
    ],
)
def test_reward_config_rejects_bad_settings(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RewardConfig(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mine", "expected"),
    [
        ({"execution_rate": 0.5, "pass_rate": 0.5, "line_coverage": 0.1, "mutation_score": 0.0}, "execution"),
        ({"execution_rate": 1.0, "pass_rate": 0.5, "line_coverage": 0.1, "mutation_score": 0.0}, "failures"),
        (
            {
                "execution_rate": 1.0,
                "pass_rate": 1.0,
                "line_coverage": 0.7,
                "branch_coverage": 0.5,
                "mutation_score": 0.0,
            },
            "coverage",
        ),
        (
            {
                "execution_rate": 1.0,
                "pass_rate": 1.0,
                "line_coverage": 0.8,
                "branch_coverage": 0.2,
                "mutation_score": 0.9,
            },
            "coverage",
        ),
        (
            {
                "execution_rate": 1.0,
                "pass_rate": 1.0,
                "line_coverage": 0.8,
                "branch_coverage": 0.5,
                "mutation_score": 0.5,
            },
            "mutation",
        ),
        (
            {
                "execution_rate": 1.0,
                "pass_rate": 1.0,
                "line_coverage": 0.9,
                "branch_coverage": 0.6,
                "mutation_score": 0.6,
            },
            None,
        ),
    ],
)
def test_weakest_metric_follows_repo_smiths_order(mine: dict[str, float], expected: str | None) -> None:
    assert weakest_metric(TestFileMetrics(**mine), REFERENCE) == expected


def test_statement_lines_map_continuation_lines_to_the_statement() -> None:
    source = "x = (1 +\n     2)\nif (x and\n        x > 1):\n    y = [\n        x]\n"
    lines = statement_lines(source)
    assert lines == {1: 1, 2: 1, 3: 3, 4: 3, 5: 5, 6: 5}
    mutant: Mutant = next(m for m in generate_mutants(source) if m.operator == "compare")
    assert mutant.line == 4 and lines[mutant.line] == 3
