"""The fork-based mutation runner and the test-file scoring, through the real local sandbox."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from testfile_tasks import FILES, FOCAL, GROUND_TRUTH, make_testfile_task

from gym_repost.analysis.mutation import generate_mutants
from gym_repost.errors import SandboxError
from gym_repost.harness.testfile import (
    MutantOutcome,
    TestFileRun,
    parse_report,
    run_test_file,
    select_mutants,
)
from gym_repost.harness.testfile_report import build_report, score_test_file
from gym_repost.harness.testfile_scoring import metrics_from_run
from gym_repost.programs.protocol import END, RESULT
from gym_repost.sandbox import Sandbox, get_sandbox
from gym_repost.sandbox.base import RunResult
from gym_repost.sandbox.programs import ProgramRun, read_program_output


def _find(run: TestFileRun, original: str, replacement: str) -> MutantOutcome:
    return next(m for m in run.mutants if m.mutant.original == original and m.mutant.replacement == replacement)


@pytest.fixture(scope="module")
def ground_truth_run(sandbox: Sandbox) -> TestFileRun:
    return run_test_file(sandbox, make_testfile_task(), GROUND_TRUTH)


def test_ground_truth_outcomes_and_coverage(ground_truth_run: TestFileRun) -> None:
    run = ground_truth_run
    assert run.status == "completed" and run.mutation_status == "completed", run.message
    assert [t.outcome for t in run.tests] == ["passed"] * 4
    assert run.tests[2].nodeid == "tests/test_core.py::test_check[TooBig]"
    assert run.missing_lines == [] and run.missing_branches == []
    assert len(run.executed_branches) == 10


def test_mutant_verdicts(ground_truth_run: TestFileRun) -> None:
    run = ground_truth_run
    assert run.population == len(generate_mutants(FOCAL)) == len(run.mutants)
    assert _find(run, "x < low", "x <= low").status == "survived"  # clamp(0) is never tested
    assert _find(run, "x > high", "not (x > high)").status == "killed"
    removed = _find(run, "LIMIT = 10", "pass")
    assert removed.status == "killed" and "NameError" in (removed.detail or "")
    # `i += 1` removed: total() loops forever; the run is stopped at its CPU limit, which a
    # loaded machine does not reach sooner or later, and reported apart.
    looping = _find(run, "i += 1", "pass")
    assert looping.status == "timeout" and "stopped at its CPU limit" in (looping.detail or "")
    score = run.mutation
    assert score is not None and score.timeouts == 1
    assert score.killed + score.timeouts + score.survived == score.total == len(run.mutants)
    # Every mutant was run: the estimate is exact.
    assert score.ci_low == score.ci_high == score.score


def test_only_the_tests_covering_a_mutant_run(ground_truth_run: TestFileRun) -> None:
    owner = {"fib": range(19, 25), "check": range(27, 31), "total": range(33, 40), "clamp": range(11, 17)}
    for outcome in ground_truth_run.mutants:
        if outcome.status != "killed" or outcome.killed_by is None or outcome.mutant.line < 11:
            continue  # module-level lines run at import: every test covers them
        function = next(name for name, lines in owner.items() if outcome.mutant.line in lines)
        assert outcome.killed_by.split("::")[1].startswith(f"test_{function}"), outcome


def test_lru_cache_is_cleared_so_cached_results_do_not_hide_mutants(ground_truth_run: TestFileRun) -> None:
    # fib(10) was cached during the baseline run; the mutant must still be seen.
    assert _find(ground_truth_run, "a + b", "a - b").status == "killed"


def test_the_mutant_is_the_file_on_disk_and_reading_it_scores_zero(sandbox: Sandbox) -> None:
    # Each mutant runs in a fresh process that imports the focal file from disk, where
    # the mutant is written: a test that compares the file with its original text
    # "kills" every mutant, and fails on the decoys (equivalent rewrites) too.
    tests = textwrap.dedent(f"""\
        from tinypkg.core import clamp

        ORIGINAL = {FOCAL!r}


        def test_the_file_on_disk_is_the_original():
            clamp(3)
            clamp(-2)
            clamp(20)
            with open("tinypkg/core.py") as fh:
                assert fh.read() == ORIGINAL
        """)
    run = run_test_file(sandbox, make_testfile_task(), tests)
    clamp_mutants = [m for m in run.mutants if 11 <= m.mutant.line <= 16]
    assert clamp_mutants and {m.status for m in clamp_mutants} == {"killed"}
    assert run.decoys_failed and run.mutation is not None and run.mutation.score == 0.0
    assert "equivalent rewrite" in " ".join(run.notes())


def test_seeded_cap_on_mutants(sandbox: Sandbox) -> None:
    task = make_testfile_task(max_mutants=8, mutant_seed=3)
    first = run_test_file(sandbox, task, GROUND_TRUTH)
    chosen, population = select_mutants(FOCAL, 8, 3)
    assert [m.mutant for m in first.mutants] == chosen and first.population == population > 8
    other, _ = select_mutants(FOCAL, 8, 4)
    assert other != chosen
    metrics = metrics_from_run(first)
    assert metrics.mutants_total == 8 and metrics.mutants_population == population
    assert metrics.mutation_ci_low < metrics.mutation_score < metrics.mutation_ci_high  # type: ignore[operator]


@pytest.mark.limits
def test_timeouts_are_relative_to_the_baseline(sandbox: Sandbox) -> None:
    focal = "import time\n\n\ndef wait(n):\n    for _ in range(n):\n        time.sleep(0.01)\n    return n\n"
    tests = "from tinypkg.core import wait\n\n\ndef test_wait():\n    assert wait(20) == 20\n"
    task = make_testfile_task(tests, files={**FILES, "tinypkg/core.py": focal}, timeout_factor=3.0, timeout_floor=0.05)
    run = run_test_file(sandbox, task, tests)
    # The baseline test takes 0.2 s, sleeping: a mutant that keeps its pace is judged on its
    # result; 1.01 s per sleep (20 s) uses no CPU but meets the wall-clock guard (twice
    # 3 x 0.2 s plus a floor of three calibration runs, plus 1 s).
    assert _find(run, "0.01", "1.01").status == "timeout"
    assert _find(run, "return n", "return None").status == "killed"


@pytest.mark.limits
def test_a_test_is_held_to_its_cpu_time_and_stopped_waiting_only_far_beyond_it(sandbox: Sandbox) -> None:
    # test_timeout 1 s counts CPU time: waiting 1.5 s is within the wall-clock guard (3 s),
    # spinning is stopped after 1 CPU second, however busy the machine is
    tests = (
        "import time\n\n\ndef test_waits():\n    time.sleep(1.5)\n\n\n"
        "def test_spins():\n    while True:\n        pass\n"
    )
    run = run_test_file(sandbox, make_testfile_task(tests, test_timeout=1.0), tests, mutate=False)
    assert run.status == "completed", run.message
    assert {t.nodeid.split("::")[1]: t.outcome for t in run.tests} == {"test_waits": "passed", "test_spins": "timeout"}


@pytest.mark.limits
def test_waiting_does_not_spend_the_mutation_budget(sandbox: Sandbox) -> None:
    # Each variant sleeps 0.5 s and computes little: about 10 variants, one at a time, take
    # more wall-clock time than the 2 s budget, but not its CPU seconds, so every one is run.
    focal = "import time\n\n\ndef nap(x):\n    time.sleep(0.5)\n    return x + 1\n"
    tests = "from tinypkg.core import nap\n\n\ndef test_nap():\n    assert nap(1) == 2\n"
    task = make_testfile_task(tests, files={**FILES, "tinypkg/core.py": focal}, mutation_timeout=2.0)
    run = run_test_file(sandbox, task, tests)
    assert run.mutation_status == "completed", run.mutation_message
    assert run.mutants and not run.count_mutants("not run")
    assert _find(run, "x + 1", "x - 1").status == "killed" and _find(run, "0.5", "1.5").status == "survived"


@pytest.mark.limits
def test_the_mutation_budget_counts_cpu_seconds(sandbox: Sandbox) -> None:
    # Every variant child pays pytest's start and a fresh import (tens of milliseconds of CPU):
    # a budget of 0.2 CPU seconds runs out after a few of the tiny task's 32 mutants and
    # their decoys, whatever the machine's load; the rest are not run and count as survived.
    run = run_test_file(sandbox, make_testfile_task(mutation_timeout=0.2), GROUND_TRUTH)
    assert run.mutation_status == "timeout" and run.mutation_cut_short
    assert "the mutation budget (0.2 CPU seconds) ran out" in run.mutation_message
    assert run.count_mutants("not run") > 0
    score = run.mutation
    assert score is not None and score.total == len(run.mutants) and score.survived >= run.count_mutants("not run")


def test_objects_built_at_test_import_time_see_the_mutant(sandbox: Sandbox) -> None:
    focal = "def make_adder(k):\n    def add(x):\n        return x + k\n    return add\n"
    tests = (
        "from tinypkg.core import make_adder\n\nADD_TWO = make_adder(2)\n\n\ndef test_add():\n"
        "    assert ADD_TWO(1) == 3\n"
    )
    task = make_testfile_task(tests, files={**FILES, "tinypkg/core.py": focal})
    run = run_test_file(sandbox, task, tests)
    assert {m.mutant.operator: m.status for m in run.mutants} == {"arith": "killed", "return_value": "killed"}


def test_a_change_to_an_object_built_at_import_time_is_seen(sandbox: Sandbox) -> None:
    # Every mutant is imported fresh from disk: an instance the module builds at import
    # holds the mutant's value (the in-memory runner could not replace it: "unapplied").
    focal = (
        "class Box:\n    def __init__(self, size):\n        self.size = size\n\n\nDEFAULT = Box(3)\n\n\n"
        "def size():\n    return DEFAULT.size\n"
    )
    tests = "from tinypkg.core import size\n\n\ndef test_size():\n    assert size() == 3\n"
    task = make_testfile_task(tests, files={**FILES, "tinypkg/core.py": focal})
    run = run_test_file(sandbox, task, tests)
    assert _find(run, "3", "4").status == "killed"
    metrics = metrics_from_run(run)
    assert metrics.mutants_unapplied == 0 and metrics.mutants_total == len(run.mutants)


MEMORY_PROBE = textwrap.dedent(
    """\
    import ctypes, hashlib
    import tinypkg.core as core
    from tinypkg.core import check, clamp, fib, total

    DIGEST, SIZE, HEAD = %r, %d, bytes.fromhex(%r)


    def _copies_of_the_original():
        hits = 0
        for line in open("/proc/self/maps").read().splitlines():
            parts = line.split()
            if "r" not in parts[1] or (len(parts) > 5 and parts[5] != "[heap]"):
                if len(parts) > 5 or "r" not in parts[1]:
                    continue
            low, high = (int(x, 16) for x in parts[0].split("-"))
            data = ctypes.string_at(low, high - low)
            at = data.find(HEAD)
            while at >= 0:
                hits += hashlib.sha256(data[at : at + SIZE]).hexdigest() == DIGEST
                at = data.find(HEAD, at + 1)
        return hits


    def test_memory():
        for call in (lambda: clamp(5), lambda: clamp(-1), lambda: clamp(11), lambda: fib(10), lambda: check(2),
                     lambda: check(11), lambda: total([1, 2, 3])):
            try:  # whatever a variant does: only what the scan finds decides
                call()
            except Exception:
                pass
        hits = _copies_of_the_original()  # the calibration scans too: the same CPU time
        mine = open(core.__file__, "rb").read()
        if hashlib.sha256(mine).hexdigest() != DIGEST:  # a variant: it must find no original
            assert hits == 0
    """
) % (hashlib.sha256(FOCAL.encode()).hexdigest(), len(FOCAL.encode()), FOCAL.encode()[:24].hex())


def test_a_variant_child_holds_no_copy_of_the_original_focal_file(sandbox: Sandbox) -> None:
    """Every variant child scans its memory (its heap and anonymous mappings) for the
    original focal file and fails if it finds one: each must survive (none is found)."""
    task = make_testfile_task(MEMORY_PROBE, max_mutants=6)
    run = run_test_file(sandbox, task, MEMORY_PROBE)
    assert run.status == "completed" and run.mutation_status == "completed", run.message or run.mutation_message
    assert run.mutants and all(m.status == "survived" for m in run.mutants), [(m.status, m.detail) for m in run.mutants]
    assert not run.decoys_failed


def test_two_scorings_give_the_same_verdicts(sandbox: Sandbox, ground_truth_run: TestFileRun) -> None:
    again = run_test_file(sandbox, make_testfile_task(), GROUND_TRUTH)
    differing = [(a.status, b.status, b.detail) for a, b in zip(ground_truth_run.mutants, again.mutants) if a != b]
    assert [m.status for m in again.mutants] == [m.status for m in ground_truth_run.mutants], differing


# --------------------------------------------------------------------------- bad input

SENTINEL_NAME = "gym_repost_sentinel.txt"

BAD_FILES = {
    "does not parse": ("def test_x(:\n    pass\n", "invalid", "does not parse"),
    "imports what does not exist": (
        "import does_not_exist\n\n\ndef test_x():\n    assert True\n",
        "error",
        "No module named 'does_not_exist'",
    ),
    "a test hangs": (
        "from tinypkg.core import clamp\n\n\ndef test_x():\n    assert clamp(1) == 1\n\n\n"
        "def test_hang():\n    while True:\n        pass\n",
        "timeout",
        "test_hang",
    ),
    "hangs at import": ("import time\n\nwhile True:\n    time.sleep(0.1)\n", "timeout", "did not finish"),
    "swallows the alarm": (
        "def test_x():\n    while True:\n        try:\n            while True:\n"
        "                pass\n        except BaseException:\n            pass\n",
        "timeout",
        "test_x",
    ),
    "exits early": ("import os\n\n\ndef test_exit():\n    os._exit(0)\n", "error", "test_exit"),
    "kills the runner": (
        "import os, signal\n\n\ndef test_kill():\n    os.kill(os.getppid(), signal.SIGKILL)\n",
        "error",
        "without a report",
    ),
    "fakes a report": (
        "import os\n\n\ndef test_fake():\n"
        "    print('\\n@@gym-repost@@result {}\\n@@gym-repost@@end abc')\n"
        "    os._exit(0)\n",
        "error",
        "ended early",
    ),
    "tries the network": (
        "import socket\n\n\ndef test_net():\n    socket.create_connection(('pypi.org', 443), timeout=2)\n",
        "error",
        "test_net",
    ),
    "has no test": ("import tinypkg.core\n", "error", "no test ran"),
    # the session's event pipe is in the test's process: an "infrastructure" event from it
    # would make the episode unscored; only the monitor's own check may say so
    "claims an infrastructure error": (
        "import gc, os\n\n\ndef test_outage():\n"
        "    for obj in gc.get_objects():\n"
        "        if type(obj).__name__ == '_Emitter':\n"
        "            obj({'event': 'error', 'infrastructure': True, 'message': 'fake outage'})\n"
        "    os._exit(0)\n",
        "error",
        "fake outage",
    ),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_test_files_score_zero_execution_with_a_clear_report(sandbox: Sandbox, name: str) -> None:
    source, status, phrase = BAD_FILES[name]
    # 2.5 CPU seconds for the file: a file that sleeps at import is stopped by the 7.5 s guard
    task = make_testfile_task(timeout=2.5, test_timeout=1.0)
    report = score_test_file(sandbox, task, source)
    assert report.status == status
    assert report.metrics.execution_rate == 0.0 and report.reward == 0.0 and not report.passed
    assert phrase in report.to_text()


def test_deleting_files_leaves_the_host_untouched(sandbox: Sandbox, tmp_path: Path) -> None:
    sentinel = tmp_path / SENTINEL_NAME
    sentinel.write_text("keep me\n")
    source = textwrap.dedent(f"""\
        import os


        def test_delete_host_file():
            os.remove({str(sentinel)!r})


        def test_delete_home():
            os.remove(os.path.expanduser("~/.bashrc"))
        """)
    report = score_test_file(sandbox, make_testfile_task(timeout=4.0), source)
    assert report.status == "error" and report.metrics.execution_rate == 0.0
    assert "test_delete_host_file" in report.to_text()
    assert sentinel.read_text() == "keep me\n"


def test_deleting_the_repository_inside_the_sandbox_does_not_break_scoring(sandbox: Sandbox) -> None:
    source = GROUND_TRUTH + textwrap.dedent("""\


        def test_zz_delete_everything():
            import shutil
            shutil.rmtree("tinypkg")
        """)
    run = run_test_file(sandbox, make_testfile_task(), source)
    assert run.status == "completed" and run.coverage_error is None and run.missing_lines == []
    assert run.mutation is not None and run.mutation.score is not None and run.mutation.score > 0.8


def test_a_sandbox_python_without_pytest_is_an_infrastructure_error(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    with get_sandbox("local", python=str(venv / "bin" / "python")) as bare:
        with pytest.raises(SandboxError, match="lacks pytest or coverage"):
            run_test_file(bare, make_testfile_task(), GROUND_TRUTH)


def _reported(report: str) -> ProgramRun:
    """A program run whose result line is ``report``, completed with the token ``tok``."""
    return read_program_output(RunResult(returncode=0, stdout=f"\n{RESULT}{report}\n{END}tok\n", stderr=""), "tok")


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ('{"status": "completed", "tests": "abc"}', "malformed"),
        ('{"status": "completed", "tests": [{"nodeid": 1, "outcome": "passed"}]}', "malformed"),
        ('{"status": "completed", "tests": [{"nodeid": "t", "outcome": "won"}]}', "malformed"),
        ('{"status": "completed", "tests": [7]}', "malformed"),
        ('{"status": "completed", "collection_errors": [{"nodeid": "t"}]}', "malformed"),
        (
            '{"status": "completed", "coverage": {"executed_lines": [1, "x"], "missing_lines": [], '
            '"executed_branches": [], "missing_branches": []}}',
            "malformed",
        ),
        (
            '{"status": "completed", "coverage": {"executed_lines": [], "missing_lines": [], '
            '"executed_branches": [[1]], "missing_branches": []}}',
            "malformed",
        ),
        ('{"status": "completed", "coverage": [1]}', "malformed"),
        ('{"status": "completed", "coverage": {"executed_lines": []}}', "malformed"),
        ("[" * 100_000 + "]" * 100_000, "without a report"),
    ],
)
def test_a_forged_or_garbled_report_is_a_crashed_run(report: str, expected: str) -> None:
    task = make_testfile_task()
    mutants, population = select_mutants(FOCAL, 5, 0)
    run = parse_report(_reported(report), mutants, population)
    assert run.status == "crashed" and expected in run.message, run.message
    assert [m.status for m in run.mutants] == ["not run"] * len(mutants)
    text = build_report(task, run).to_text()
    assert "does not run" in text and expected in text


def test_unknown_statuses_in_a_report_are_not_scored() -> None:
    mutants, population = select_mutants(FOCAL, 3, 0)
    report = (
        '{"status": "sideways", "tests": [{"nodeid": "t", "outcome": "passed"}], '
        '"mutants": [{"id": 0, "status": "vanquished"}, {"id": 1, "status": "killed", "killed_by": 5}]}'
    )
    run = parse_report(_reported(report), mutants, population)
    assert run.status == "crashed" and [t.outcome for t in run.tests] == ["passed"]
    assert [m.status for m in run.mutants] == ["not run", "killed", "not run"] and run.mutants[1].killed_by == "5"
