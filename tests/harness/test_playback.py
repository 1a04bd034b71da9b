"""The task's own tests judge return values that differ from the reference's (issue 14).

Where the tests are the task's specification (HumanEval's ``check``), a candidate may
return another valid answer than the ground truth's: another root, a float within the
tests' tolerance. Its record differs from the reference's only in those return values,
so the tests run again in a ``playback`` run that holds the ground truth and the
recorded values, never the candidate's code. Wrong values still fail, tasks whose tests
compare with the original (RepoST's equivalence tests) are still judged by the record
alone, and nothing of the playback reaches the agent.
"""

from __future__ import annotations

import textwrap

import pytest
from sandboxes import CountingSandbox

from gym_repost.harness import playback_accepts, reference_for, run_function_tests, run_host_made
from gym_repost.harness.candidate import playback_script
from gym_repost.harness.verdict import Record, playback_answers
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask
from tests.conftest import build_task

ROOT_FINDER = """\
def find_zero(xs: list):
    begin, end = -1., 1.
    while poly(xs, begin) * poly(xs, end) >= 0:
        begin *= 2.0
        end *= 2.0
    while end - begin > 1e-10:
        center = (begin + end) / 2.0
        if poly(xs, center) * poly(xs, begin) > 0:
            begin = center
        else:
            end = center
    return begin
"""
"""HumanEval/32's canonical solution with ``>=`` for ``>``: another root on some inputs, which ``check`` accepts."""


def _tolerance_task(test_body: str, helper: str = "") -> FunctionTask:
    script = textwrap.dedent("""\
        def mean(xs):
            return sum(xs) / len(xs)

        {helper}
        def test_mean():
        {body}


        if __name__ == "__main__":
            test_mean()
        """).format(helper=helper, body=textwrap.indent(textwrap.dedent(test_body), "    "))
    files = {"tiny/stats.py": "def mean(xs):\n    return sum(xs) / len(xs)\n"}
    return build_task(script, "mean", files, "tiny/stats.py")


SPEC_TESTS = """\
for xs in ([1, 2, 3], [10, 20], [0.5, 0.25, 4.0, 7.0]):
    assert abs(mean_new_implementation(xs) - sum(xs) / len(xs)) < 0.01
"""
EQUIVALENCE_TESTS = """\
for xs in ([1, 2, 3], [10, 20], [0.5, 0.25, 4.0, 7.0]):
    assert abs(mean_new_implementation(xs) - mean(xs)) < 0.01
"""
CLOSE = "def mean(xs):\n    return sum(xs) / len(xs) + 0.001\n"
FAR = "def mean(xs):\n    return sum(xs) / len(xs) + 1.0\n"


@pytest.fixture(scope="module")
def find_zero(humaneval_tasks: list[FunctionTask]) -> FunctionTask:
    return next(t for t in humaneval_tasks if t.name == "HumanEval/32")


def test_another_valid_root_passes_as_the_official_harness_says(find_zero: FunctionTask, sandbox: Sandbox) -> None:
    report = run_function_tests(sandbox, find_zero, ROOT_FINDER)
    assert report.passed, report.to_text()


def test_a_batch_of_host_made_candidates_runs_beside_the_tests_and_needs_no_playback(
    find_zero: FunctionTask, sandbox: Sandbox
) -> None:
    codes = [ROOT_FINDER, ROOT_FINDER.replace("-1., 1.", "-1.5, 1.5"), "def find_zero(xs: list):\n    return 0.0\n"]
    codes.append("def find_zero(xs: list):\n    return None\n")
    counting = CountingSandbox(sandbox)
    reference_for(counting, find_zero)
    made = counting.runs
    assert [r.passed for r in run_host_made(counting, find_zero, codes)] == [True, True, False, False]
    assert counting.runs == made + 1  # one batch: the tests judged the other roots where they ran
    assert [run_function_tests(sandbox, find_zero, code).passed for code in codes] == [True, True, False, False]


SIDE_EFFECT_SCRIPT = """\
SEEN = []


def mean(xs):
    SEEN.append(len(xs))
    return sum(xs) / len(xs)


def test_mean():
    for xs in ([1, 2, 3], [10, 20]):
        assert abs(mean_new_implementation(xs) - sum(xs) / len(xs)) < 0.01
    assert SEEN == [3, 2]


if __name__ == "__main__":
    test_mean()
"""


def test_a_batch_leaves_to_a_run_of_its_own_what_the_tests_see_beyond_the_record(sandbox: Sandbox) -> None:
    """Every call of the candidate below equals the reference's, but the tests check a side
    effect the record does not hold: a run of its own (the calls replayed without the
    tests) passes it, so the batch, whose tests failed, lets such a run decide."""
    files = {"tiny/stats.py": SIDE_EFFECT_SCRIPT.split("\n\n\ndef test_mean")[0] + "\n"}
    task = build_task(SIDE_EFFECT_SCRIPT, "mean", files, "tiny/stats.py")
    no_side_effect = "def mean(xs):\n    return sum(xs) / len(xs)\n"
    counting = CountingSandbox(sandbox)
    assert reference_for(counting, task).mode == "inputs"
    made = counting.runs
    alone = run_function_tests(sandbox, task, no_side_effect)
    assert [r.passed for r in run_host_made(counting, task, [no_side_effect, FAR])] == [alone.passed, False]
    assert counting.runs == made + 2  # the batch, then the candidate's own run


@pytest.mark.parametrize(
    "body", ["    return 0.0\n", "    return None\n", "    return [x for x in xs][0]\n", "    return 1e9\n"]
)
def test_wrong_answers_still_fail(body: str, find_zero: FunctionTask, sandbox: Sandbox) -> None:
    report = run_function_tests(sandbox, find_zero, "def find_zero(xs: list):\n" + body)
    assert not report.passed
    assert report.exception == "WrongBehaviour" and "a correct implementation differs" in report.message


def test_a_value_within_the_tests_tolerance_passes_and_one_outside_fails(sandbox: Sandbox) -> None:
    task = _tolerance_task(SPEC_TESTS)
    assert playback_script(task) is not None
    assert run_function_tests(sandbox, task, CLOSE).passed
    far = run_function_tests(sandbox, task, FAR)
    assert not far.passed
    assert "0.01" not in far.to_text() and "assert" not in far.to_text()  # nothing of the playback's test shown


def test_the_same_values_from_another_candidate_are_not_played_again(sandbox: Sandbox) -> None:
    """Two candidates written differently that return the same values: the first gets a
    playback run, the second the outcome the tests gave it. Other values are played."""
    task = _tolerance_task(SPEC_TESTS + "# a task of its own: no outcome kept from the tests above\n")
    counting = CountingSandbox(sandbox)
    reference_for(counting, task)
    same_as_close = "def mean(xs):\n    total = sum(xs)\n    return total / len(xs) + 0.001\n"
    same_as_far = "def mean(xs):\n    return 1.0 + sum(xs) / len(xs)\n"
    verdicts, runs = [], []
    for code in (CLOSE, same_as_close, FAR, same_as_far, FAR.replace("1.0", "2.0")):
        before = counting.runs
        verdicts.append(run_function_tests(counting, task, code).passed)
        runs.append(counting.runs - before)
    assert verdicts == [True, True, False, False, False]
    assert runs == [2, 1, 2, 1, 2]  # the candidate's run, and a playback for values not seen


@pytest.mark.limits
def test_a_playback_stopped_by_a_limit_is_not_kept_for_later_candidates(sandbox: Sandbox) -> None:
    """Attack on the kept outcomes: values that send the tests into a loop. Their playback is
    stopped by its limit, which decides nothing about the values: the outcome is not kept,
    so a later candidate with the same values is played again (and fails again)."""
    spins = """\
for xs in ([1, 2, 3], [10, 20]):
    value = mean_new_implementation(xs)
    while value > 1e6:
        pass
    assert abs(value - sum(xs) / len(xs)) < 0.01
"""
    task = _tolerance_task(spins)
    counting = CountingSandbox(sandbox)
    assert reference_for(counting, task).mode == "inputs"
    runs = []
    for code in ("def mean(xs):\n    return 1e9\n", "def mean(xs):\n    return 1e9 + 0 * len(xs)\n"):
        before = counting.runs
        assert not run_function_tests(counting, task, code, timeout=1.0).passed
        runs.append(counting.runs - before)
    assert runs == [2, 2]  # each: its own run, and a playback, stopped at its limit


PATCHES_THE_TESTS = (
    "def mean(xs):\n    import builtins\n    builtins.sum = lambda v, *a: 99.0 * len(v)\n    return 99.0\n"
)
"""A wrong value, and ``sum`` (with which the tests compute the expected mean) patched to agree."""


def test_a_candidate_that_patches_what_the_tests_use_earns_nothing(sandbox: Sandbox) -> None:
    """Beside the tests it would fool them (so host-made batches, which run there, are
    never given a policy's code); its own run replays its calls without the tests, and
    the playback of its value runs without its code."""
    task = _tolerance_task(SPEC_TESTS)
    report = run_function_tests(sandbox, task, PATCHES_THE_TESTS)
    assert not report.passed and report.exception == "WrongBehaviour", report.to_text()
    assert run_host_made(sandbox, task, [PATCHES_THE_TESTS])[0].passed  # why run_host_made is host-made only


def test_tests_that_compare_with_the_original_are_judged_by_the_record_alone(sandbox: Sandbox) -> None:
    task = _tolerance_task(EQUIVALENCE_TESTS)
    assert playback_script(task) is None
    assert not run_function_tests(sandbox, task, CLOSE).passed
    assert run_function_tests(sandbox, task, task.ground_truth).passed


def test_a_helper_that_calls_the_original_rules_out_playback() -> None:
    helper = "def spread(xs):\n    return max(xs) - mean(xs)\n"
    task = _tolerance_task("assert spread([1, 2, 3]) == 1.0\n" + SPEC_TESTS, helper)
    assert playback_script(task) is None


def test_a_record_qualifies_only_when_it_differs_in_return_values(sandbox: Sandbox) -> None:
    task = _tolerance_task(SPEC_TESTS)
    reference = reference_for(sandbox, task)
    calls = [dict(c) for c in reference.calls]
    assert playback_answers(reference, Record(calls, 0, True, None)) is None  # nothing differs
    changed = [dict(c, r="0" * 24, rl='["f","2.001"]') if i == 0 else dict(c) for i, c in enumerate(calls)]
    answers = playback_answers(reference, Record(changed, 0, True, None))
    assert answers is not None and answers[0][1] == '["f","2.001"]' and all(a is None for _, a in answers[1:])
    assert playback_accepts(sandbox, task, reference, Record(changed, 0, True, None))
    unasked = [*changed, dict(changed[0])]
    assert playback_answers(reference, Record(unasked, 0, True, None)) is None  # one call more
    for key, value in (("o", "1" * 24), ("p", "1" * 24), ("x", "builtins.ValueError")):
        other = [dict(changed[0], **{key: value}), *changed[1:]]
        assert playback_answers(reference, Record(other, 0, True, None)) is None, key
    no_value = [dict(changed[0], rl=""), *changed[1:]]
    assert playback_answers(reference, Record(no_value, 0, True, None)) is None
    assert playback_answers(reference, Record(changed, 0, False, None)) is None  # the run did not complete


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ('["f","5.0"]', "a wrong value"),
        ('["C","builtins","object"]', "a class: its metaclass could claim equality"),
        ('["l",[["C","builtins","object"]]]', "a class inside a list"),
        ('["zz"]', "not plain data"),
        ("[", "not JSON"),
    ],
)
def test_forged_answers_are_refused(answer: str, why: str, sandbox: Sandbox) -> None:
    task = _tolerance_task(SPEC_TESTS)
    reference = reference_for(sandbox, task)
    forged = [dict(c, r="0" * 24, rl=answer) if i == 0 else dict(c) for i, c in enumerate(reference.calls)]
    assert not playback_accepts(sandbox, task, reference, Record(forged, 0, True, None)), why


def test_an_answer_for_arguments_the_tests_never_pass_fails(sandbox: Sandbox) -> None:
    task = _tolerance_task(SPEC_TESTS)
    reference = reference_for(sandbox, task)
    calls = [dict(c, a="f" * 24) if i == 0 else dict(c) for i, c in enumerate(reference.calls)]
    elsewhere = reference.model_copy(update={"calls": calls})  # as if the reference had seen other arguments
    record = Record(
        [dict(c, r="0" * 24, rl='["f","2.0"]') if i == 0 else dict(c) for i, c in enumerate(calls)], 0, True, None
    )
    assert playback_answers(elsewhere, record) is not None
    assert not playback_accepts(sandbox, task, elsewhere, record)  # the tests' own call finds no answer


def test_a_forged_record_gets_no_playback_where_the_tests_compare_with_the_original(sandbox: Sandbox) -> None:
    task = _tolerance_task(EQUIVALENCE_TESTS)
    reference = reference_for(sandbox, task)
    forged = [dict(c, r="0" * 24, rl='["f","2.0"]') for c in reference.calls]  # values a forger would claim
    assert not playback_accepts(sandbox, task, reference, Record(forged, 0, True, None))
