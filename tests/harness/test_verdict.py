"""The verdict from records: what is compared, what counts as nondeterministic, what is shown."""

from __future__ import annotations

import marshal
import re
import signal
import textwrap
from typing import Any

import pytest

from gym_repost.construct.quality import QualityReport, QualityThresholds, _judge
from gym_repost.harness import assemble, do_nothing_candidate, reference_for, replay_cpu_limit, run_function_tests
from gym_repost.harness.function_report import TestReport
from gym_repost.harness.validation import validate_task
from gym_repost.harness.verdict import MAX_RECORD_CHARS, Record, Reference, compare, merge_runs, parse_record
from gym_repost.sandbox.base import RunResult, Sandbox
from gym_repost.sandbox.programs import read_program_output
from gym_repost.task import FunctionTask
from tests.conftest import build_task

UNSTABLE_SCRIPT = textwrap.dedent('''\
    import uuid


    def tag(values):
        """The values doubled; logs a fresh id."""
        print("request", uuid.uuid4().hex)
        return [2 * v for v in values]


    def test_tag():
        for values in ([1, 2], [], [5]):
            assert tag(values) == tag_new_implementation(values)


    if __name__ == "__main__":
        test_tag()
    ''')

MUTATING_SCRIPT = textwrap.dedent('''\
    def normalise(items):
        """Sort ``items`` in place and drop duplicates; return how many were dropped."""
        before = len(items)
        items[:] = sorted(set(items))
        return before - len(items)


    def test_normalise():
        for items in ([3, 1, 3], [], [2, 2, 2]):
            a, b = list(items), list(items)
            assert normalise(a) == normalise_new_implementation(b)


    if __name__ == "__main__":
        test_normalise()
    ''')


CLOCK_SCRIPT = textwrap.dedent('''\
    import datetime
    import time


    def total(values):
        """The values' sum; logs the day, as RepoST-Eval's 450 (a logger) logs the time."""
        print("summed on", datetime.date.today().isoformat(), time.strftime("%A"))
        return sum(values)


    def test_total():
        for values in ([1, 2], [], [5, 6, 7]):
            assert total(values) == total_new_implementation(values)


    if __name__ == "__main__":
        test_total()
    ''')

SPINNING_SCRIPT = textwrap.dedent('''\
    def echo_time():
        """Waits for the sensor's echo (spins on hardware the tests mock)."""
        while True:
            pass


    def is_close(threshold):
        """Whether the sensor sees something nearer than ``threshold``."""
        return echo_time() * 17150 < threshold


    def test_is_close():
        globals()["echo_time"] = lambda: 0.001
        for threshold in (5, 17.15, 20):
            assert is_close(threshold) == is_close_new_implementation(threshold)


    if __name__ == "__main__":
        test_is_close()
    ''')


def _task(script: str, name: str) -> FunctionTask:
    return build_task(script, name, {"m.py": script.split("\n\ndef test_")[0]}, "m.py")


def test_a_nondeterministic_test_is_flagged_and_its_unstable_fields_are_not_compared(sandbox: Sandbox) -> None:
    task = _task(UNSTABLE_SCRIPT, "tag")
    reference = reference_for(sandbox, task)
    assert reference.passed and reference.nondeterministic
    assert all(call["o"] == "*" and call["r"] != "*" for call in reference.calls)  # it prints a fresh id
    assert run_function_tests(sandbox, task, task.ground_truth.replace("2 * v", "v + v")).passed
    assert not run_function_tests(sandbox, task, do_nothing_candidate(task)).passed
    validation = validate_task(sandbox, task, mutants=0)
    assert validation.nondeterministic
    report = _judge(QualityReport(), validation, QualityThresholds.for_split("eval"))
    assert report.reason == "nondeterministic tests (eval split)"
    assert _judge(QualityReport(), validation, QualityThresholds.for_split("train")).passed


def test_what_the_ground_truth_derives_from_the_clock_is_not_compared(sandbox: Sandbox) -> None:
    """RepoST-Eval's 448, 450, 451, 615, 621 and 771 log the time. The reference's first two
    runs, a moment apart, agreed on it, so a correct candidate run a minute (or, from the
    reference store, a day) later failed. The second and third runs now read a clock 400
    days ahead: the time they log differs, and is not compared."""
    task = _task(CLOCK_SCRIPT, "total")
    reference = reference_for(sandbox, task)
    assert reference.passed and reference.nondeterministic
    assert all(call["o"] == "*" and call["r"] != "*" for call in reference.calls), reference.calls
    later = sandbox.clock_ahead(86400 + 7.25)  # candidates judged a day later
    assert later is not None and reference_for(later, task) is reference
    assert run_function_tests(later, task, task.ground_truth.replace("sum(values)", "sum(values, 0)")).passed
    assert not run_function_tests(later, task, task.ground_truth.replace("sum(values)", "sum(values) + 1")).passed
    assert not run_function_tests(later, task, do_nothing_candidate(task)).passed


def test_without_a_clock_ahead_the_clock_is_compared(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a sandbox that cannot put the clock ahead gives (and every sandbox gave before):
    a reference that compares the logged day, which a candidate judged a day later fails."""
    task = _task(CLOCK_SCRIPT.replace("as RepoST-Eval's", "as (unshifted) RepoST-Eval's"), "total")
    later = sandbox.clock_ahead(86400 + 7.25)
    monkeypatch.setattr(sandbox, "clock_ahead", lambda seconds: None)
    reference = reference_for(sandbox, task)
    assert reference.passed and not reference.nondeterministic
    assert later is not None
    assert not run_function_tests(later, task, task.ground_truth.replace("sum(values)", "sum(values, 0)")).passed


def test_arguments_changed_by_the_call_are_compared(sandbox: Sandbox) -> None:
    task = _task(MUTATING_SCRIPT, "normalise")
    assert reference_for(sandbox, task).mode == "inputs"
    # returns the right count but leaves the list as it was: the tests (which compare only
    # the return values) would accept it; the record does not
    lazy = "def normalise(items):\n    return len(items) - len(set(items))\n"
    report = run_function_tests(sandbox, task, lazy)
    assert not report.passed and "arguments (or object) after the call" in report.message
    assert not run_function_tests(sandbox, task, do_nothing_candidate(task)).passed


@pytest.mark.limits
def test_a_replay_that_spins_without_the_tests_mocks_is_stopped_by_cpu_time(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RepoST-Eval's 442: the replay of the recorded calls, without the tests that mock the
    sensor, spins forever. It is stopped by a CPU limit drawn from the recording run's CPU
    time, not after the task's whole timeout, and the task is judged in driver mode."""
    task = _task(SPINNING_SCRIPT, "is_close")
    task = task.model_copy(update={"evaluation": task.evaluation.model_copy(update={"timeout": 60.0})})
    runs: list[tuple[str, float | None, RunResult]] = []

    def spy_on(target: Sandbox) -> Sandbox:
        real_run = target.run

        def spy(files: dict[str, str], command: list[str], **kwargs: Any) -> RunResult:
            result = real_run(files, command, **kwargs)
            runs.append((command[-1], kwargs.get("cpu_seconds"), result))
            return result

        monkeypatch.setattr(target, "run", spy)
        return target

    real_truth = sandbox.ground_truth

    def truth() -> Sandbox:  # the reference's runs, and those on a clock ahead (the second and third)
        view = spy_on(real_truth())
        real_ahead = view.clock_ahead
        monkeypatch.setattr(view, "clock_ahead", lambda seconds: spy_on(real_ahead(seconds)))  # type: ignore[arg-type]
        return view

    monkeypatch.setattr(sandbox, "ground_truth", truth)
    reference = reference_for(sandbox, task)
    assert reference.passed and reference.mode == "driver"
    assert len(runs) == 3  # record, replay (stopped), record again
    _, limit, replayed = runs[1]
    assert limit is not None and limit < 60.0
    assert not replayed.timed_out and replayed.returncode in (-signal.SIGXCPU, -signal.SIGKILL), replayed
    monkeypatch.undo()
    assert run_function_tests(sandbox, task, task.ground_truth).passed
    assert not run_function_tests(sandbox, task, "def is_close(threshold):\n    return threshold > 10\n").passed


def test_the_replay_cpu_limit() -> None:
    assert replay_cpu_limit(None, 30.0) is None  # the run did not say: the sandbox's own limit
    assert replay_cpu_limit(0.01, 30.0) == 2.0  # the floor covers the interpreter and imports
    assert replay_cpu_limit(0.5, 30.0) == 10.0  # 20 times the recording run's
    assert replay_cpu_limit(2.0, 30.0) is None  # not below the timeout: the task's own


def test_the_verdict_never_shows_the_expected_value(sandbox: Sandbox, function_task: FunctionTask) -> None:
    report = run_function_tests(sandbox, function_task, "def score(values, cap=100):\n    return 41\n")
    assert not report.passed and "your code returned 41" in report.to_text()
    expected = str(sum(min(100, v * 10) for v in [1, 2, 3]))
    assert expected not in report.to_text().replace("[1, 2, 3]", "")


def test_hostile_record_lines_are_no_record() -> None:
    line = "\n@@gym-repost@@result "
    for body in [
        "[" * 100_000,
        '{"calls": [{"a": 1}], "overflow": 0, "completed": true, "inputs": null}',
        '{"calls": "x", "overflow": 0, "completed": true}',
        "null",
        '{"calls": []}',
        '{"calls": [], "overflow": 0, "completed": true, "inputs": [1]}',
        "x" * 9_000_000,
    ]:
        run = read_program_output(RunResult(1, line + body + "\n", ""), "tok", max_chars=MAX_RECORD_CHARS)
        assert parse_record(run.payload) is None
    body = '{"calls": [{"a": "1"}], "overflow": 0, "completed": true, "inputs": null}'
    good = parse_record(read_program_output(RunResult(1, line + body + "\n", ""), "tok").payload)
    assert good is not None and good.calls == [{"a": "1"}]


def test_merging_two_runs_masks_what_differs() -> None:
    first = Record([{"a": "1", "r": "2"}, {"a": "3", "r": "4"}], 0, True, None)
    second = Record([{"a": "1", "r": "2"}, {"a": "3", "r": "5"}], 0, True, None)
    calls, notes = merge_runs(first, second)
    assert calls == [{"a": "1", "r": "2"}, {"a": "3", "r": "*"}] and notes == ["call 2: return value"]
    reference = Reference(
        passed=True, report=TestReport(passed=True, status="passed"), calls=calls, nondeterministic=notes
    )
    assert compare(reference, Record([{"a": "1", "r": "2"}, {"a": "3", "r": "anything"}], 0, True, None)) is None
    assert "call 1" in (compare(reference, Record([{"a": "1", "r": "9"}, {"a": "3"}], 0, True, None)) or "")
    assert "called your function 1 time" in (compare(reference, Record([{"a": "1", "r": "2"}], 0, True, None)) or "")


def test_a_correct_candidate_whose_local_shadows_its_own_name_passes(
    sandbox: Sandbox, function_task: FunctionTask
) -> None:
    # Recursive references are renamed to the candidate's new name; a local of the same name
    # (here the accumulator) is not a reference to the function and must keep its meaning.
    code = (
        "def score(values, cap=100):\n"
        "    score = 0\n"
        "    for v in values:\n"
        "        if v >= 0:\n"
        "            score += clamp(v * SCALE, 0, cap)\n"
        "    return math.floor(score)\n"
    )
    assert run_function_tests(sandbox, function_task, code).passed
    assert not run_function_tests(sandbox, function_task, code.replace("v >= 0", "v > 0.5")).passed


def test_the_harness_runs_the_code_the_host_compiled_only_for_the_text_compiled(sandbox: Sandbox) -> None:
    """Driver and reference runs ship the assembled script's code as the host compiled it
    (``CODE_NAME``); the harness runs it, named as the run's own file, when the bytecode
    magic and the script's SHA-256 match, and compiles the text otherwise."""
    import hashlib
    import marshal
    from importlib.util import MAGIC_NUMBER

    from gym_repost.harness import CODE_NAME, PROGRAM_MODULES
    from gym_repost.sandbox.programs import run_program

    text = "print('compiled from the text')\n"
    shipped = compile("def f():\n    print('the host code')\n    raise ValueError(1)\nf()\n", "evaluation.py", "exec")
    digest = hashlib.sha256(text.encode()).hexdigest()

    def run(**code: str) -> str:
        config = {"script": "evaluation.py", "start": 1, "end": 1, "mode": "driver", "inputs": None}
        config["code"] = {"file": CODE_NAME, "magic": MAGIC_NUMBER.hex(), "digest": digest, **code}
        files = {"evaluation.py": text, CODE_NAME: marshal.dumps(shipped)}
        result = run_program(sandbox, "harness", files, config, timeout=10, token=True, modules=PROGRAM_MODULES)
        return result.result.stdout + result.result.stderr

    out = run()
    assert "the host code" in out and "compiled from the text" not in out
    assert re.search(r'File "/[^"]*/evaluation.py", line 3, in f', out), out  # the run's own file
    for other in ({"digest": hashlib.sha256(b"other").hexdigest()}, {"magic": "00000000"}):
        out = run(**other)
        assert "compiled from the text" in out and "the host code" not in out, other


def test_a_replayed_task_checks_and_ships_the_script_that_runs(sandbox: Sandbox, function_task: FunctionTask) -> None:
    """Once its reference is known to replay calls (``inputs`` mode), a candidate's script is
    checked to compile without its tests (the text that runs), that code is shipped, and the
    verdicts and reports are those of the full script's check."""
    from gym_repost.harness import candidate

    assert reference_for(sandbox, function_task).mode == "inputs"
    bad = run_function_tests(sandbox, function_task, "def score(values, cap=100):\n    return 0\nreturn 1\n")
    assert bad.status == "invalid" and "line 3 of your code: 'return' outside function" in (bad.message or "")
    good = (
        "def score(values, cap=100):\n    return math.floor(sum(clamp(v * SCALE, 0, cap) for v in values if v >= 0))\n"
    )
    assert run_function_tests(sandbox, function_task, good).passed
    assembled = assemble(function_task, good, check_stripped=True)
    assert assembled.stripped is not None and candidate.compiled_script(assembled.stripped) is not None
    # a candidate that brings a test of its own: that test is blanked in the replayed text,
    # so the full script is the one checked; the verdict is the same
    with_test = good + "\n\ndef test_mine():\n    assert score([1]) == 10\n"
    assert run_function_tests(sandbox, function_task, with_test).passed
    assert not run_function_tests(sandbox, function_task, good.replace("v >= 0", "v > 0.5")).passed


def test_a_replay_known_from_the_store_is_shipped_from_the_first_call(
    sandbox: Sandbox, function_task: FunctionTask, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later process (``eval`` after ``validate``) reads the reference from the store before
    checking the first candidate, so that candidate's replayed script is the text checked,
    and its code is shipped; no reference is made for an invalid candidate."""
    import gym_repost.harness as harness
    from gym_repost.harness.verdict import ReferenceCache

    monkeypatch.setenv("GYM_REPOST_REFERENCES", str(tmp_path))
    monkeypatch.setattr(harness, "_REFERENCES", ReferenceCache())
    made = []
    record = harness.record_reference
    monkeypatch.setattr(harness, "record_reference", lambda *a: made.append(1) or record(*a))
    assert run_function_tests(sandbox, function_task, "def score(values, cap=100):\nreturn 1\n").status == "invalid"
    assert made == []
    reference_for(sandbox, function_task)  # made and stored
    monkeypatch.setattr(harness, "_REFERENCES", ReferenceCache())  # a new process
    shipped: list[bool] = []
    real = harness.compiled_script
    monkeypatch.setattr(harness, "compiled_script", lambda text: shipped.append(real(text) is not None) or real(text))
    good = (
        "def score(values, cap=100):\n    return math.floor(sum(clamp(v * SCALE, 0, cap) for v in values if v >= 0))\n"
    )
    assert run_function_tests(sandbox, function_task, good).passed
    assert shipped == [True] and made == [1]


def test_a_replayed_run_finds_no_tests_in_the_code_shipped_to_it(sandbox: Sandbox, function_task: FunctionTask) -> None:
    """Attack: a candidate of a replayed task (``inputs`` mode: the tests never run beside it)
    reads the code the host shipped for its script, looking for the tests. It holds the
    script without them, so this candidate answers correctly only when the file is there and
    no test is in it."""
    assert reference_for(sandbox, function_task).mode == "inputs"
    spy = (
        "def score(values, cap=100):\n"
        "    import os\n"
        "    name = '_gym_repost_code.bin'\n"
        "    shipped = open(name, 'rb').read() if os.path.exists(name) else b''\n"
        "    wanted = [''.join(p).encode() for p in (('test', '_score'), ('ca', 'ses'))]  # not literals\n"
        "    if not shipped or any(w in shipped for w in wanted):\n"
        "        return -1\n"
        "    return math.floor(sum(clamp(v * SCALE, 0, cap) for v in values if v >= 0))\n"
    )
    assert run_function_tests(sandbox, function_task, spy).passed
    # what it looks for is in the full script: compiled, its tests' names would be in the code
    assert "test_score" in function_task.evaluation.script
    assert b"test_score" in marshal.dumps(compile(function_task.evaluation.script, "e.py", "exec"))


GENERATOR_SCRIPT = textwrap.dedent('''\
    def evens(n):
        """The even numbers below ``n``, lazily."""
        for i in range(n):
            if i % 2 == 0:
                yield i


    def test_evens():
        for n in (0, 5, 30001):
            assert list(evens(n)) == list(evens_new_implementation(n))


    if __name__ == "__main__":
        test_evens()
    ''')


@pytest.mark.parametrize(
    ("body", "passes"),
    [
        ("    return (i for i in range(0, n, 2))\n", True),  # another iterator, the same items
        ("    return filter(lambda i: i % 2 == 0, range(n))\n", True),
        ("    return iter(range(0, n, 2))\n", True),
        ("    yield from ()\n", False),
        ("    return (i for i in range(0, n + 1, 2))\n", False),  # one item too many
        ("    return map(lambda i: i if i != 5000 else -1, range(0, n, 2))\n", False),  # item 2,500 of 15,001
        ("    return iter(list(range(0, n, 2))[:10000])\n", False),  # the first 10,000 only
        ("    return list(range(0, n, 2))\n", False),  # not an iterator
    ],
)
def test_returned_iterators_are_compared_item_by_item(sandbox: Sandbox, body: str, passes: bool) -> None:
    """A returned generator (or built-in iterator) is drained and its items compared, up to the
    record's bound; a long one is never judged by its repr (issue 32)."""
    task = _task(GENERATOR_SCRIPT, "evens")
    report = run_function_tests(sandbox, task, f"def evens(n):\n{body}")
    assert report.passed is passes, report.to_text()[:500]


STREAM_SCRIPT = textwrap.dedent('''\
    import io


    def write_rows(rows, out):
        """Write each row as a comma-separated line; the number of rows written."""
        count = 0
        for row in rows:
            out.write(SEP.join(str(cell) for cell in row) + END)
            count += 1
        return count


    def test_write_rows():
        for rows in ([[1, 2], [3]], [], [["a", "b", "c"]]):
            assert write_rows(rows, STREAM()) == write_rows_new_implementation(rows, STREAM())


    if __name__ == "__main__":
        test_write_rows()
    ''')


@pytest.mark.parametrize("kind", ["text", "bytes"])
@pytest.mark.parametrize(
    ("body", "passes"),
    [
        ("    return len(rows)\n", False),  # the count, nothing written
        ("    for r in rows:\n        out.write(SEP.join(str(c) for c in r))\n    return len(rows)\n", False),
        ("    out.write(SEP * len(rows))\n    return len(rows)\n", False),
        (
            "    whole = [SEP.join(str(c) for c in r) + END for r in rows]\n"
            "    out.write(whole[0][:0].join(whole) if whole else END[:0])\n    return len(rows)\n",
            True,
        ),
    ],
)
def test_what_a_call_writes_to_an_in_memory_stream_is_compared(
    sandbox: Sandbox, kind: str, body: str, passes: bool
) -> None:
    """A stream argument (``io.StringIO``, ``io.BytesIO``) was compared as an iterator: the
    lines after its position, none once a call has written to it; so what the call wrote
    was never seen, and a candidate returning the right count while writing nothing, or
    the wrong text, was rewarded. Its whole contents and position are compared."""
    if kind == "text":
        names = 'SEP, END, STREAM = ",", "\\n", io.StringIO\n\n\n'
    else:
        names = 'SEP, END, STREAM = b",", b"\\n", io.BytesIO\n\n\n'
    script = STREAM_SCRIPT.replace("def write_rows(", names + "def write_rows(", 1)
    if kind == "bytes":
        script = script.replace("str(cell)", "str(cell).encode()")
        body = body.replace("str(c)", "str(c).encode()")
    task = _task(script, "write_rows")
    assert run_function_tests(sandbox, task, task.ground_truth).passed
    report = run_function_tests(sandbox, task, f"def write_rows(rows, out):\n{body}")
    assert report.passed is passes, report.to_text()[:500]
