"""Stage 7: is a built task good enough to keep?

RepoST's sanity checks for sandboxing and for tests (the target is present and unchanged,
``test_{name}`` uses both the original and the candidate, at least three assertions, a
``__main__`` block that calls the test outside any try/except), then measurements: the
ground truth passes, branch coverage of the target alone (coverage.py), and, beyond
RepoST, test strength: trivial candidates (``return None``, the first argument, ``self``,
the ground truth's most common value, its most common exception) must fail and enough
mutants of the target must be killed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Literal

from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source import dedent_code, find_function
from gym_repost.harness.coverage import FunctionCoverage
from gym_repost.harness.validation import MIN_MUTANTS, TaskValidation, validate_task
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask

Split = Literal["train", "eval"]
MIN_MEASURED = 3
"""Branch arcs (mutants) below which a task's branch coverage (kill rate) is reported as n/a."""
Functionality = Literal["same", "yes", "no"]


@dataclass(frozen=True)
class QualityThresholds:
    """What a task must reach to be kept."""

    min_branch_coverage: float = 0.8
    min_kill_rate: float = 0.5
    min_assertions: int = 3
    mutants: int = 10
    seed: int = 0
    reject_nondeterministic: bool = False
    """Drop tasks whose ground truth behaves differently in two runs (the eval split)."""

    @classmethod
    def for_split(cls, split: Split, **overrides: Any) -> QualityThresholds:
        """RepoST's thresholds: branch coverage >= 80% for train, 100% for eval; eval is deterministic."""
        return cls(
            min_branch_coverage=1.0 if split == "eval" else 0.8,
            reject_nondeterministic=split == "eval",
            **overrides,
        )


@dataclass
class QualityReport:
    """The checks' results; ``reason`` is the first failed check's drop category."""

    checks: dict[str, bool] = field(default_factory=dict)
    branch_coverage: float | None = None
    branches: int | None = None
    kill_rate: float | None = None
    mutants: int = 0
    reason: str | None = None
    detail: str = ""
    validation: TaskValidation | None = None

    @property
    def passed(self) -> bool:
        """Every check passed."""
        return self.reason is None


def _test_function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def _names_used(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.add(sub.attr)
    return names


def _main_calls_test(tree: ast.Module, test_name: str) -> bool:
    """A top-level ``if __name__ == "__main__":`` calls the test outside any try."""
    for node in tree.body:
        if not (isinstance(node, ast.If) and "__name__" in _names_used(node.test)):
            continue
        for stmt in node.body:
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
                and test_name in _names_used(stmt.value.func)
            ):
                return True
    return False


def sanity_checks(task: FunctionTask, original_source: str) -> dict[str, bool]:
    """RepoST's sanity checks, by name (True = passed)."""
    tree = parse_python(task.evaluation.script)
    name = task.target.name
    span = find_function(task.evaluation.script, task.target.qualname, tree)
    test = _test_function(tree, task.evaluation.test_function)
    used = _names_used(test) if test is not None else set()
    try:
        unchanged = ast.dump(parse_python(dedent_code(original_source))) == ast.dump(parse_python(task.target.source))
    except SyntaxError:
        unchanged = False
    return {
        "target present": span is not None,
        "target unchanged (AST)": unchanged,
        "test calls both functions": {name, f"{name}_new_implementation"} <= used,
        "at least 3 assertions": task.metadata.num_asserts >= 3,
        "main calls the test outside try": _main_calls_test(tree, task.evaluation.test_function),
    }


@dataclass(frozen=True)
class Judgement:
    """A model's verdicts on a built script (the LLM builder's last step, RepoST's checks).

    Attributes:
        functionality: ``same`` (the target and what it uses are the repository's code,
            only imports resolved and the outside world mocked), ``yes`` (edited, but
            equivalent) or ``no`` (the script's target behaves differently).
        tests_correct: the equivalence tests are sound (they compare the two functions on
            meaningful inputs, and the ground truth passing them is no accident).
        notes: the model's explanation.
    """

    functionality: Functionality
    tests_correct: bool
    notes: str = ""


def judged_drop_reason(split: Split, target_unchanged: bool, judgement: Judgement) -> str | None:
    """RepoST's keep rule per split; the drop reason, or None to keep.

    Eval keeps a task only when the target's AST is unchanged and the tests are judged
    correct; train also keeps a task whose target was edited when the model judges the
    functionality equivalent. Either split drops a task judged not equivalent (the mocks
    changed what the target does).
    """
    if not judgement.tests_correct:
        return "tests judged incorrect"
    if judgement.functionality == "no":
        return "judged not equivalent"
    if not target_unchanged and split == "eval":
        return "target AST changed (eval split)"
    return None


def check_quality(
    sandbox: Sandbox,
    task: FunctionTask,
    original_source: str,
    thresholds: QualityThresholds,
    *,
    allow_changed_target: bool = False,
    coverage: FunctionCoverage | None = None,
) -> QualityReport:
    """Run every check; stop measuring at the first failure.

    Args:
        allow_changed_target: do not fail on ``target unchanged (AST)`` (a train task
            whose edited target was judged equivalent); the check is still recorded.
        coverage: the ground truth's coverage, already measured on this very task in this
            sandbox (the builder's last ``run_script``): used, not measured again; below the
            threshold, no mutant is run (the task is rejected for coverage whatever they do).

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    report = QualityReport(checks=sanity_checks(task, original_source))
    failed = [
        name
        for name, ok in report.checks.items()
        if not ok and not (allow_changed_target and name == "target unchanged (AST)")
    ]
    if task.metadata.num_asserts < thresholds.min_assertions:
        failed.append(f"at least {thresholds.min_assertions} assertions")
    if failed:
        report.reason, report.detail = "sanity check failed", failed[0]
        return report
    short = coverage is not None and coverage.branch_coverage < thresholds.min_branch_coverage
    validation = validate_task(
        sandbox, task, mutants=0 if short else thresholds.mutants, seed=thresholds.seed, coverage=coverage is None
    )
    if coverage is not None and validation.passed:
        validation.coverage = coverage
    report.validation = validation
    return _judge(report, validation, thresholds)


def _judge(report: QualityReport, validation: TaskValidation, thresholds: QualityThresholds) -> QualityReport:
    if not validation.passed:
        report.reason, report.detail = "ground truth fails", validation.cause
        return report
    if validation.coverage is not None:
        report.branches = validation.coverage.branches
        # fewer than 3 arcs: n/a, not "100%" of nothing
        report.branch_coverage = validation.coverage.branch_coverage if report.branches >= MIN_MEASURED else None
    if validation.mutants is not None and validation.mutants.total:
        report.mutants = validation.mutants.total
        report.kill_rate = validation.mutants.score if report.mutants >= MIN_MEASURED else None
    if validation.accepts_do_nothing:
        report.reason, report.detail = "tests accept a do-nothing candidate", ""
    elif validation.accepts_trivial:
        report.reason, report.detail = "tests accept a trivial candidate", ", ".join(validation.accepts_trivial)
    elif validation.returns_callable:
        report.reason = "returns a function (compared by its name, not by what it does)"
    elif thresholds.reject_nondeterministic and validation.nondeterministic:
        report.reason = "nondeterministic tests (eval split)"
        report.detail = "; ".join(validation.nondeterministic[:3])
    elif validation.mutants is not None and thresholds.mutants >= MIN_MUTANTS and report.mutants < MIN_MUTANTS:
        report.reason = f"fewer than {MIN_MUTANTS} mutants"
        report.detail = f"{report.mutants}: too small a target to tell strong tests from weak ones"
    elif report.branch_coverage is not None and report.branch_coverage < thresholds.min_branch_coverage:
        report.reason = "branch coverage below threshold"
        report.detail = f"{100 * report.branch_coverage:.0f}% < {100 * thresholds.min_branch_coverage:.0f}%"
    elif report.kill_rate is not None and report.kill_rate < thresholds.min_kill_rate:
        report.reason = "mutant kill rate below threshold"
        report.detail = f"{100 * report.kill_rate:.0f}% < {100 * thresholds.min_kill_rate:.0f}%"
    return report
