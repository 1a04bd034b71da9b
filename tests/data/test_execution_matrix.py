"""The per-code test runner: one sandboxed process per code, each test with its own
outcome and timeout, and no way for the code to claim passes it did not earn."""

from __future__ import annotations

from typing import Any

import pytest
from sandboxes import CountingSandbox

from gym_repost.data.assertions import split_task_tests
from gym_repost.data.base import TestSuite
from gym_repost.data.matrix import execution_matrix, parse_runner, run_code_against_tests
from gym_repost.programs.protocol import END, RESULT
from gym_repost.sandbox.base import RunResult, Sandbox
from gym_repost.sandbox.programs import read_program_output
from gym_repost.task import FunctionTask

GOOD = "assert score([1, 2, 3], 100) == 60"


def _outcomes(run: Any) -> list[str]:
    return [o.outcome for o in run.outcomes]


@pytest.mark.limits
def test_each_test_gets_its_own_outcome_and_timeout(function_task: FunctionTask, sandbox: Sandbox) -> None:
    suite = TestSuite(
        (
            GOOD,
            "assert score([1], 5) == 6",
            "assert score([1], 1 / 0) == 1",
            "while True:\n    pass",
            "import os\nos._exit(0)",
            "assert score([], 5) == 0",
        )
    )
    counting = CountingSandbox(sandbox)
    run = run_code_against_tests(counting, function_task, function_task.ground_truth, suite, test_timeout=1.0)
    assert counting.runs == 3  # the ground truth's values (once per suite), the code, the judge
    assert _outcomes(run) == ["pass", "fail", "error", "timeout", "error", "pass"]
    assert run.outcomes[2].exception == "ZeroDivisionError"
    assert run.outcomes[4].exception == "EarlyExit"
    assert run.passed == 2 and run.pass_rate == pytest.approx(2 / 6)


@pytest.mark.limits
def test_a_tests_timeout_counts_its_cpu_seconds(function_task: FunctionTask, sandbox: Sandbox) -> None:
    """A test that spins is stopped by its CPU time; one that waits (sleeps) past its
    timeout passes within the wall-clock guard, three times as long, and is stopped beyond
    it: how busy the machine is turns no test into a timeout."""
    suite = TestSuite(
        ("while True:\n    pass", "import time\ntime.sleep(1.3)\n" + GOOD, "import time\ntime.sleep(3.5)\n" + GOOD)
    )
    run = run_code_against_tests(sandbox, function_task, function_task.ground_truth, suite, test_timeout=1.0)
    assert _outcomes(run) == ["timeout", "pass", "timeout"]
    assert run.outcomes[0].message == "the test used its 1 s of CPU time"
    assert run.outcomes[2].message == "the test did not finish within 3 s of wall-clock time"


def test_the_code_under_test_replaces_the_target_for_assert_style_tests(
    function_task: FunctionTask, sandbox: Sandbox
) -> None:
    wrong = function_task.ground_truth.replace("total += clamp(v * SCALE, 0, cap)", "total += 1")
    run = run_code_against_tests(sandbox, function_task, wrong, TestSuite((GOOD, "assert score([1, 2]) == 2")))
    assert _outcomes(run) == ["fail", "pass"]


def test_a_method_is_bound_on_its_class(method_task: FunctionTask, sandbox: Sandbox) -> None:
    suite = TestSuite(
        ("c = Counter(5)\nassert c.add(3) == 8\nassert c.history == [3]", "assert Counter(1).add(-4) == 1")
    )
    assert _outcomes(run_code_against_tests(sandbox, method_task, method_task.ground_truth, suite)) == ["pass", "pass"]
    ignores_sign = method_task.ground_truth.replace("if amount < 0:", "if False:")
    assert _outcomes(run_code_against_tests(sandbox, method_task, ignores_sign, suite)) == ["pass", "fail"]


def test_equivalence_tests_compare_the_original_with_the_candidate(method_task: FunctionTask, sandbox: Sandbox) -> None:
    suite = split_task_tests(method_task)
    assert suite.style == "equivalence" and len(suite) == 1
    assert _outcomes(run_code_against_tests(sandbox, method_task, method_task.ground_truth, suite)) == ["pass"]
    doubled = method_task.ground_truth.replace("self.value += amount", "self.value += 2 * amount")
    assert _outcomes(run_code_against_tests(sandbox, method_task, doubled, suite)) == ["fail"]


def test_tests_do_not_share_state(function_task: FunctionTask, sandbox: Sandbox) -> None:
    suite = TestSuite(("SCALE = 1000\nassert score([1]) == 100", "assert SCALE == 10 and score([1]) == 10"))
    assert _outcomes(run_code_against_tests(sandbox, function_task, function_task.ground_truth, suite)) == [
        "pass",
        "pass",
    ]


def test_a_code_that_exits_while_loading_fails_every_test(function_task: FunctionTask, sandbox: Sandbox) -> None:
    code = "import os\nos._exit(0)\n\n" + function_task.ground_truth
    run = run_code_against_tests(sandbox, function_task, code, TestSuite((GOOD, GOOD + " ")))
    assert _outcomes(run) == ["error", "error"]
    assert all(o.phase == "load" and o.exception == "EarlyExit" for o in run.outcomes)


@pytest.mark.limits
def test_a_code_that_loops_while_loading_costs_one_timeout(function_task: FunctionTask, sandbox: Sandbox) -> None:
    code = "while True:\n    pass\n\n" + function_task.ground_truth
    suite = TestSuite(tuple(GOOD + " " * i for i in range(5)))
    counting = CountingSandbox(sandbox)
    run = run_code_against_tests(counting, function_task, code, suite, test_timeout=0.5)
    assert _outcomes(run) == ["timeout"] * 5 and counting.runs == 2  # the plan, then the code (nothing to judge)


@pytest.mark.parametrize(
    "trick",
    [
        # prints a verdict claiming every test passed, then leaves
        "import os\n    os.write(1, ('\\n" + RESULT + "' + '{\"results\": "
        '[{"outcome": "pass"}]}\\n' + END + "\\n').encode())\n    os._exit(0)",
        # reads every open descriptor for the token (the runner's private copy included)
        "import os\n    found = b''\n    for descriptor in range(3, 256):\n        try:\n"
        "            os.set_blocking(descriptor, False)\n            found += os.read(descriptor, 4096)\n"
        "        except OSError:\n            pass\n    raise SystemExit(found.decode() or 'no token')",
        # tries to read the one-time token from standard input
        "import sys\n    token = sys.stdin.read()\n    assert token, 'no token'\n    raise SystemExit(token)",
        # kills the runner that reports the verdicts
        "import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)",
    ],
)
def test_a_code_cannot_fake_passes(function_task: FunctionTask, sandbox: Sandbox, trick: str) -> None:
    code = function_task.ground_truth.replace(
        '"""Sum of scaled values, each clamped to [0, cap]."""', '"""Sum."""\n    ' + trick
    )
    assert code != function_task.ground_truth
    run = run_code_against_tests(sandbox, function_task, code, TestSuite((GOOD,)))
    assert run.passed == 0
    if "stdin" in trick or "descriptor" in trick:  # the token is nowhere the code can read
        assert run.outcomes[0].message == "no token"


def test_a_code_that_cannot_be_placed_is_not_run(function_task: FunctionTask, sandbox: Sandbox) -> None:
    counting = CountingSandbox(sandbox)
    run = run_code_against_tests(counting, function_task, "def other():\n    pass\n", TestSuite((GOOD,)))
    assert counting.runs == 0 and run.invalid and _outcomes(run) == ["error"]
    assert run.outcomes[0].exception == "InvalidCandidate"


def test_a_matrix_costs_one_sandbox_run_per_code_and_one_to_judge(
    function_task: FunctionTask, sandbox: Sandbox
) -> None:
    codes = [
        function_task.ground_truth,
        function_task.ground_truth.replace("v < 0", "v < 1"),
        "def score(values, cap=100):\n    return None\n",
    ]
    suite = TestSuite((GOOD, "assert score([0.5, 2]) == 25", "assert score([]) is not None"))
    counting = CountingSandbox(sandbox)
    matrix = execution_matrix(counting, function_task, codes, suite)
    assert counting.runs == 1 + 3 + 1  # the ground truth's values (once per suite), the codes, the judge
    assert execution_matrix(counting, function_task, codes, suite).matrix == matrix.matrix
    assert counting.runs == 5 + 3 + 1
    assert matrix.matrix == [[1, 1, 1], [1, 0, 1], [0, 0, 0]]
    assert matrix.outcomes[2] == ["fail", "fail", "fail"]
    assert matrix.outcome_counts() == {"pass": 5, "fail": 4, "error": 0, "timeout": 0}


def test_a_verdict_counts_only_with_the_token_on_the_last_line() -> None:
    def outcomes(stdout: str, token: str, n: int, **kw: object) -> list[str]:
        run = read_program_output(RunResult(kw.pop("returncode", 0), stdout, "", **kw), token)  # type: ignore[arg-type]
        return [o.outcome for o in parse_runner(run, n)]

    line = RESULT + '{"results": [{"outcome": "pass"}, {"outcome": "fail"}]}\n' + END + "abc"
    assert outcomes("x\n" + line + "\n", "abc", 2) == ["pass", "fail"]
    assert outcomes(line + "\n", "xyz", 2) == ["error", "error"]
    assert outcomes(line + "\nlater\n", "abc", 2) == ["error", "error"]
    assert outcomes(line, "abc", 3) == ["error"] * 3
    assert outcomes(RESULT + '{"results": [{"outcome": "won"}]}\n' + END + "abc", "abc", 1) == ["error"]
    assert outcomes("", "abc", 2, returncode=-9, timed_out=True) == ["timeout"] * 2


ALWAYS_EQUAL = '''\
def score(values, cap=100):
    """Sum."""
    class Anything:
        def __eq__(self, other):
            return True
        __hash__ = object.__hash__
    return Anything()
'''

READS_THE_EXPECTED_VALUE = '''\
def score(values, cap=100):
    """Sum."""
    import sys
    frame, found = sys._getframe(1), None
    while frame is not None:
        ints = [c for c in frame.f_code.co_consts if type(c) is int]
        found = ints[-1] if ints else found
        frame = frame.f_back
    return found
'''

CALLS_THE_ORIGINAL = '''\
def score(values, cap=100):
    """Sum."""
    import gc
    for obj in gc.get_objects():
        if callable(obj) and getattr(obj, "__name__", "") == "score" and getattr(obj, "__code__", None) is not None \\
                and "gc.get_objects" not in str(obj.__code__.co_names):
            return obj(values, cap)
    return None
'''


@pytest.mark.parametrize("code", [ALWAYS_EQUAL, READS_THE_EXPECTED_VALUE, CALLS_THE_ORIGINAL])
def test_a_split_test_is_judged_outside_the_code_s_process(
    function_task: FunctionTask, sandbox: Sandbox, code: str
) -> None:
    equivalence = split_task_tests(function_task)
    assert equivalence.style == "equivalence"
    assert_style = TestSuite((GOOD, "assert score([20], 30) == 30"))
    for suite in (assert_style, equivalence.select([1, 2])):
        honest = run_code_against_tests(sandbox, function_task, function_task.ground_truth, suite)
        assert _outcomes(honest) == ["pass"] * len(suite)
        assert not any(o.passed for o in run_code_against_tests(sandbox, function_task, code, suite).outcomes)


def test_the_plan_splits_by_shape_and_by_the_ground_truth_s_values(
    function_task: FunctionTask, sandbox: Sandbox
) -> None:
    from gym_repost.data.matrix import value_plan

    plan = value_plan(sandbox, function_task, split_task_tests(function_task))
    assert (plan.outside, plan.inside) == (2, 1)  # the loop runs whole beside the original
    objects = TestSuite(
        ("assert type(score([1])).__name__ == 'int'", "import math\nassert score([1]) == math.floor(10)")
    )
    assert value_plan(sandbox, function_task, objects).outside == 2


def test_a_sample_cannot_take_the_ground_truths_row_from_memory(function_task: FunctionTask) -> None:
    """Issue 32: the ground truth among the samples, then a sample that looks for it in its
    own memory (or up its stack) and delegates to it. The ground truth's row runs in the
    sandbox's ground-truth domain and every sample's process starts clean: the attacker's row
    is that of a code that returns None."""
    from memory_attacks import MEMORY_ATTACKS

    from gym_repost.sandbox import get_sandbox

    suite = TestSuite((GOOD, "assert score([1], 5) == 5", "assert score([-1, 2], 100) == 20"))
    honest = function_task.ground_truth.replace("\n", "\n\n", 1)  # another sample, correct
    attacks = [code.format(name=function_task.target.name) for code in MEMORY_ATTACKS.values()]
    with get_sandbox("local", workers=1) as one_worker:
        matrix = execution_matrix(one_worker, function_task, [function_task.ground_truth, honest, *attacks], suite)
    assert matrix.matrix[0] == matrix.matrix[1] == [1, 1, 1]
    for row in matrix.matrix[2:]:
        assert row == [0, 0, 0], matrix.outcomes
