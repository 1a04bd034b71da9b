"""Execution matrices: run codes against tests, one sandboxed process per code.

>>> matrix = execution_matrix(sandbox, task, codes, suite)
>>> matrix.matrix        # rows are codes, columns tests, 1 = pass
>>> matrix.outcomes      # "pass" / "fail" / "error" / "timeout" per cell

Each code gets one sandbox run of the in-sandbox runner (:mod:`gym_repost.programs.matrix`), which runs
every test in a child process of its own with its own timeout; the run as a whole has a
sandbox timeout too. Assertion failures (``fail``) are kept apart from errors and
timeouts. A code that cannot be placed into the evaluation script (no such function,
a syntax error) is not run: its row carries the reason and counts as ``error``.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from gym_repost.analysis.parsing import parse_python
from gym_repost.data.base import TestSuite
from gym_repost.data.value_tests import PlanCache, ValuePlan, ValueTest, candidate_splits
from gym_repost.errors import CandidateError, TaskError
from gym_repost.harness import assemble
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.programs import ProgramRun, run_program
from gym_repost.task import FunctionTask

logger = logging.getLogger(__name__)

SCRIPT_NAME = "evaluation.py"

DEFAULT_TEST_TIMEOUT = 2.0
"""Seconds one test may take, loading the script included."""

Outcome = Literal["pass", "fail", "error", "timeout"]


@dataclass(frozen=True)
class TestOutcome:
    """What one test did against one code."""

    __test__ = False  # not a pytest test class

    outcome: Outcome
    exception: str | None = None
    message: str = ""
    phase: Literal["load", "test"] = "test"

    @property
    def passed(self) -> bool:
        """True for ``pass``."""
        return self.outcome == "pass"


@dataclass(frozen=True)
class CodeRun:
    """One row of an execution matrix: a code against every test.

    Attributes:
        outcomes: one per test, in the suite's order.
        invalid: why the code could not be placed into the script (then it was not run).
    """

    outcomes: tuple[TestOutcome, ...]
    invalid: str | None = None

    @property
    def passed(self) -> int:
        """Number of tests passed."""
        return sum(o.passed for o in self.outcomes)

    @property
    def pass_rate(self) -> float:
        """Share of tests passed (0.0 for an empty suite)."""
        return self.passed / len(self.outcomes) if self.outcomes else 0.0


@dataclass(frozen=True)
class ExecutionMatrix:
    """Codes (rows) against tests (columns)."""

    rows: tuple[CodeRun, ...]
    n_tests: int
    judged_outside: tuple[bool, ...] = ()
    """Per test: judged outside the codes' processes from their values (see
    :mod:`gym_repost.data.value_tests`), or run whole beside them."""

    @property
    def matrix(self) -> list[list[int]]:
        """1 where the code passes the test, else 0."""
        return [[int(o.passed) for o in row.outcomes] for row in self.rows]

    @property
    def outcomes(self) -> list[list[str]]:
        """The outcome of every cell."""
        return [[o.outcome for o in row.outcomes] for row in self.rows]

    def outcome_counts(self) -> dict[str, int]:
        """How many cells have each outcome."""
        counts = {"pass": 0, "fail": 0, "error": 0, "timeout": 0}
        for row in self.rows:
            for o in row.outcomes:
                counts[o.outcome] += 1
        return counts


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    values = {s.value for s in sides if isinstance(s, ast.Constant)}
    return len(sides) == 2 and names == {"__name__"} and values == {"__main__"}


def without_main_block(script: str) -> str:
    """The script with its top-level ``if __name__ == "__main__":`` blocks removed."""
    tree = parse_python(script)
    lines = script.split("\n")
    for node in reversed(tree.body):
        if _is_main_guard(node):
            del lines[node.lineno - 1 : node.end_lineno]
    return "\n".join(lines)


def imported_modules(script: str) -> list[str]:
    """Top-level modules the script imports at its top level (preloaded by the runner)."""
    names: list[str] = []
    for node in parse_python(script).body:
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return [n for n in dict.fromkeys(names) if n != "__future__"]


FULL_SCRIPT_NAME = "evaluation_full.py"
"""The script with the original beside the code, for the tests that run whole in the code's process."""


TEST_WALL_FACTOR = 3.0
"""A test's ``test_timeout`` counts the CPU seconds of its process; the wall clock stops it
only at this many times as long (a test that waits without computing), so the machine's
load turns no test into a timeout."""


def _matrix_config(task: FunctionTask, suite: TestSuite, entries: list[Any], test_timeout: float) -> dict[str, Any]:
    """The matrix program's configuration (:mod:`gym_repost.programs.matrix`) for ``entries``."""
    return {
        "script": SCRIPT_NAME,
        "name": task.target.name,
        "class_name": task.target.class_name,
        "style": suite.style,
        "tests": entries,
        "timeout": test_timeout,
        "wall_factor": TEST_WALL_FACTOR,
        "preload": imported_modules(task.evaluation.script),
    }


def runner_config(
    task: FunctionTask, code: str, suite: TestSuite, test_timeout: float, plan: ValuePlan | None = None
) -> tuple[dict[str, str], dict[str, Any]]:
    """The files and the configuration of one code's runner run.

    Tests split by ``plan`` run only their calls of the code, in a script without the
    original implementation; the others run whole beside it.

    Raises:
        CandidateError: ``code`` cannot be placed into the task's evaluation script.
    """
    splits = plan.splits if plan is not None else (None,) * len(suite)
    files = dict(task.evaluation.files)
    entries: list[Any] = []
    for test, split in zip(suite.tests, splits):
        if split is None:
            entries.append({"test": test, "script": FULL_SCRIPT_NAME})
        else:
            entries.append({"setup": split.setup, "calls": list(split.calls), "script": SCRIPT_NAME})
    if any(s is None for s in splits):
        files[FULL_SCRIPT_NAME] = without_main_block(assemble(task, code, keep_original=True).script)
    if any(s is not None for s in splits):
        files[SCRIPT_NAME] = without_main_block(assemble(task, code).script)
    config = _matrix_config(task, suite, entries, test_timeout)
    return files, config


def run_timeout(n_tests: int, test_timeout: float) -> float:
    """Sandbox timeout of one runner run: every test's wall-clock guard
    (:data:`TEST_WALL_FACTOR` times its CPU seconds) plus a margin."""
    return n_tests * (TEST_WALL_FACTOR * test_timeout + 0.5) + 10.0


def _uniform(n: int, outcome: Outcome, exception: str, message: str) -> tuple[TestOutcome, ...]:
    return tuple(TestOutcome(outcome, exception, message, "load") for _ in range(n))


def parse_runner(run: ProgramRun, n_tests: int) -> tuple[TestOutcome, ...]:
    """The outcome of every test from a runner run.

    The result counts only when the run completed (its last line is the token's) and it
    holds one well-formed outcome per test; otherwise every test is an ``error``
    (``timeout`` when the whole run timed out). A test that returned values (a split test)
    reads ``error`` here: :func:`execution_matrix` has them judged.
    """
    return tuple(o for o, _ in _parse_with_values(run, n_tests))


def _parse_with_values(run: ProgramRun, n_tests: int) -> list[tuple[TestOutcome, list[Any] | None]]:
    outcomes = _outcomes(run.payload, n_tests) if run.completed else None
    if outcomes is not None:
        return outcomes
    if run.result.timed_out:
        return [(o, None) for o in _uniform(n_tests, "timeout", "Timeout", "the test runner ran out of time")]
    logger.debug(
        "runner gave no verdict (%s, status %s): %s", run.problem, run.result.returncode, run.result.stderr[-500:]
    )
    why = f"the test runner ended (status {run.result.returncode}) without a valid verdict"
    return [(o, None) for o in _uniform(n_tests, "error", "NoVerdict", why)]


def _outcomes(data: dict[str, Any] | None, n_tests: int) -> list[tuple[TestOutcome, list[Any] | None]] | None:
    results = data.get("results") if data is not None else None
    if type(results) is not list or len(results) != n_tests:
        return None
    outcomes = []
    for r in results:
        if type(r) is not dict or r.get("outcome") not in (*get_args(Outcome), "values"):
            return None
        exception, message = r.get("exception"), r.get("message", "")
        values = r.get("values") if r["outcome"] == "values" else None
        if r["outcome"] == "values" and type(values) is not list:
            return None
        outcome = TestOutcome(
            "error" if values is not None else r["outcome"],
            exception if type(exception) is str else ("NotJudged" if values is not None else None),
            message if type(message) is str else "",
            "load" if r.get("phase") == "load" else "test",
        )
        outcomes.append((outcome, values))
    return outcomes


_PLANS = PlanCache()


def value_plan(
    sandbox: Sandbox, task: FunctionTask, suite: TestSuite, *, test_timeout: float = DEFAULT_TEST_TIMEOUT
) -> ValuePlan:
    """Which tests of ``suite`` are judged outside the code's process (made once per task and suite).

    A test whose shape allows it is split when the ground truth's calls in it return plain
    data: decided by the ground truth, never by the code being judged.

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    key = _PLANS.key(task, suite, {k: v for k, v in sandbox.describe().items() if k != "workers"})
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    shapes = candidate_splits(task, suite)
    splits: list[ValueTest | None] = [None] * len(suite)
    if any(shapes):
        try:
            files, config = runner_config(task, task.ground_truth, suite, test_timeout, ValuePlan(shapes))
        except CandidateError:
            return ValuePlan(tuple(splits))
        run = run_program(
            sandbox.ground_truth(),
            "matrix",
            files,
            config,
            timeout=run_timeout(len(suite), test_timeout),
            token=True,
            modules=("values",),
        )
        for i, (_, values) in enumerate(_parse_with_values(run, len(suite))):
            if shapes[i] is not None and values is not None:
                splits[i] = shapes[i]
    plan = ValuePlan(tuple(splits))
    _PLANS.put(key, plan)
    return plan


def run_code_against_tests(
    sandbox: Sandbox, task: FunctionTask, code: str, suite: TestSuite, *, test_timeout: float = DEFAULT_TEST_TIMEOUT
) -> CodeRun:
    """Run every test of ``suite`` against ``code``: one sandboxed run, and one to judge its values.

    Raises:
        SandboxError: the sandbox itself failed (an infrastructure error).
    """
    return execution_matrix(sandbox, task, [code], suite, test_timeout=test_timeout).rows[0]


def execution_matrix(
    sandbox: Sandbox,
    task: FunctionTask,
    codes: Sequence[str],
    suite: TestSuite,
    *,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
) -> ExecutionMatrix:
    """Run every code against every test, judging split tests outside the codes' processes.

    ``len(codes)`` sandbox runs of the codes, one run that judges their values (beside
    the ground truth, in a process no code ran in), and once per task and suite the
    ground truth's run that decides which tests are split (:func:`value_plan`).

    Raises:
        SandboxError: the sandbox itself failed (an infrastructure error).
    """
    if not suite.tests:
        return ExecutionMatrix(tuple(CodeRun(()) for _ in codes), 0)
    plan = (
        value_plan(sandbox, task, suite, test_timeout=test_timeout)
        if any(_placeable(task, c) for c in codes)
        else ValuePlan((None,) * len(suite))
    )
    raw = [_code_run(sandbox, task, code, suite, plan, test_timeout) for code in codes]
    judged = _judge(sandbox, task, suite, plan, raw, test_timeout)
    rows = tuple(
        CodeRun(tuple(judged.get((i, j), o) for j, (o, _) in enumerate(cells)), invalid)
        for i, (cells, invalid) in enumerate(raw)
    )
    return ExecutionMatrix(rows, len(suite), tuple(split is not None for split in plan.splits))


_Cells = list[tuple[TestOutcome, list[Any] | None]]


def _placeable(task: FunctionTask, code: str) -> bool:
    try:
        assemble(task, code)
    except (CandidateError, TaskError):
        return False
    return True


def _code_run(
    sandbox: Sandbox, task: FunctionTask, code: str, suite: TestSuite, plan: ValuePlan, test_timeout: float
) -> tuple[_Cells, str | None]:
    try:
        files, config = runner_config(task, code, suite, test_timeout, plan)
    except CandidateError as exc:
        return [(o, None) for o in _uniform(len(suite), "error", "InvalidCandidate", str(exc)[:300])], str(exc)
    # the ground truth among the codes (a sampler may put it there) runs where ground truths do
    box = sandbox.ground_truth() if code == task.ground_truth else sandbox
    run = run_program(
        box, "matrix", files, config, timeout=run_timeout(len(suite), test_timeout), token=True, modules=("values",)
    )
    return _parse_with_values(run, len(suite)), None


def _judge(
    sandbox: Sandbox,
    task: FunctionTask,
    suite: TestSuite,
    plan: ValuePlan,
    raw: list[tuple[_Cells, str | None]],
    test_timeout: float,
) -> dict[tuple[int, int], TestOutcome]:
    """The verdict of every cell that returned values, from one run beside the ground truth."""
    cells = [
        (i, j, values)
        for i, (row, _) in enumerate(raw)
        for j, (_, values) in enumerate(row)
        if values is not None and plan.splits[j] is not None
    ]
    if not cells:
        return {}
    entries = [{"test": plan.splits[j].judge, "values": values} for _, j, values in cells]  # type: ignore[union-attr]
    files = {**task.evaluation.files, SCRIPT_NAME: without_main_block(assemble(task, task.ground_truth).script)}
    config = _matrix_config(task, suite, entries, test_timeout)
    run = run_program(
        sandbox.ground_truth(),
        "matrix",
        files,
        config,
        timeout=run_timeout(len(entries), test_timeout),
        token=True,
        modules=("values",),
    )
    verdicts = parse_runner(run, len(entries))
    return {(i, j): verdict for (i, j, _), verdict in zip(cells, verdicts)}
