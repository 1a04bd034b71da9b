"""The tracing run's CPU budget: its own, not one evaluation's; a run cut by SIGXCPU keeps
what it recorded and says so. Every figure counts CPU time (work), so a loaded machine
changes how long these tests take, not what they find."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gym_repost.construct.pipeline import _tracing_limits
from gym_repost.construct.testgen import TraceResult, trace_repository
from gym_repost.construct.testgen.explore import SAFETY_NOTE
from gym_repost.construct.testgen.trace import CALL_BUDGET
from gym_repost.sandbox import get_sandbox
from gym_repost.sandbox.base import Sandbox
from tests.busy import busy_machine
from tests.construct.test_testgen import GEOMETRY, candidate, repository

pytestmark = pytest.mark.limits  # run again beside CPU burners in CI (.ci/run)

SPIN = """
import time

def spin(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
"""

HUNGRY_TESTS = """
from shapes.geometry import push_all
from tests.spin import spin

def test_one():
    spin(0.6)
    assert push_all([1], []) == 1

def test_two():
    spin(0.6)
    assert push_all([2], []) == 1

def test_three():
    spin(0.6)
    assert push_all([], [3]) == 1
"""
"""1.8 CPU seconds in all, each test well within its own limit."""

THREADS = """
import threading
from shapes.geometry import push_all

def test_a_first():
    assert push_all([1], []) == 1

def test_b_cut():
    push_all([2], [])
    lock = threading.Lock()
    numbers = iter(range(10**9))

    def consume():
        while True:
            with lock:
                if next(numbers, None) is None:
                    return

    workers = [threading.Thread(target=consume) for _ in range(10)]
    for worker in workers:
        worker.start()
    for worker in workers:
        while worker.is_alive():
            try:
                worker.join()
            except BaseException:  # the per-test timer's exception, as unittest's subTest does
                pass

def test_c_never_run():
    assert push_all([], [3]) == 1
"""
"""A test whose main thread waits for threads that compute, as more-itertools' concurrency
tests do: SIGXCPU goes to a thread that runs, and a signal handler (which Python runs in
the main thread only) would wait for the join, past the SIGKILL one CPU second later."""

SUBTESTS = """
import unittest
from shapes.geometry import push_all
from tests.spin import spin

class Loops(unittest.TestCase):  # unittest runs the methods in the order of their names
    def test_a_first(self):
        assert push_all([1], []) == 1

    def test_b_cut(self):
        push_all([2], [])
        for n in range(10**6):
            with self.subTest(n=n):  # swallows the per-test timer's exception
                spin(0.05)

    def test_c_never_run(self):
        assert push_all([], [3]) == 1
"""
"""A test that overruns its CPU timer, as more-itertools' ``test_primes`` does."""


SLEEPER = """
import time
from shapes.geometry import push_all

def test_a_first():
    assert push_all([1], []) == 1

def test_b_cut():
    push_all([2], [])
    while True:
        try:
            while True:
                try:
                    time.sleep(1)
                except BaseException:  # the timers' exceptions: it never ends by itself
                    pass
        except BaseException:
            pass

def test_c_never_run():
    assert push_all([], [3]) == 1
"""


@pytest.fixture(scope="module")
def stingy_sandbox() -> Iterator[Sandbox]:
    """A local sandbox whose runs may use 1 CPU second each."""
    with get_sandbox("local", workers=1, cpu_seconds=1) as sb:
        yield sb


def _traced(sandbox: Sandbox, tmp_path, tests: str, **options):  # type: ignore[no-untyped-def]
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/__init__.py": "",
            "tests/spin.py": SPIN,
            "tests/test_cpu.py": tests,
        },
    )
    target = candidate(repo.files["shapes/geometry.py"], "push_all", "shapes/geometry.py")
    result = trace_repository(sandbox, repo, [target], **{"timeout": 120, **options})
    return result, [c.args for c in result.calls[target.key]]


def test_a_suite_that_needs_more_cpu_than_one_run_of_the_sandbox_completes(stingy_sandbox, tmp_path):
    probe = stingy_sandbox.run({}, ["python3", "-c", "import resource; print(resource.getrlimit(0)[0])"])
    assert probe.stdout.strip() == "1"  # RLIMIT_CPU: what any other run of this sandbox gets
    result, calls = _traced(stingy_sandbox, tmp_path, HUNGRY_TESTS, test_timeout=5.0)
    assert (result.tests_run, result.tests_failed, result.errors) == (3, 0, [])
    assert not (result.cpu_limited or result.cut or result.timed_out)
    assert calls == ["([1], [])", "([2], [])", "([], [3])"]
    assert 1.8 <= result.cpu_seconds < 30  # the run says what it used: the tests' 1.8 s, and pytest's


MANY_TESTS = "from shapes.geometry import push_all\nfrom tests.spin import spin\n" + "".join(
    f"\ndef test_{i:02d}():\n    push_all([{i}], [])\n    spin(0.2)\n" for i in range(40)
)
"""8 CPU seconds in 40 tests."""


def test_the_suite_stops_between_tests_when_its_own_cpu_budget_is_spent(sandbox, tmp_path):
    # 8 CPU seconds: the suite stops before the next test at 6 (a quarter is the margin, for
    # pytest's own report of the failures)
    result, calls = _traced(sandbox, tmp_path, MANY_TESTS, test_timeout=5.0, cpu_seconds=8, max_calls_per_target=40)
    assert result.cpu_limited and not result.cut and not result.timed_out
    assert 1 <= result.tests_run < 40 and not result.errors
    assert 6 <= result.cpu_seconds < 8  # stopped between tests, once 6 s were spent, before the kill at 8
    assert calls == [f"([{i}], [])" for i in range(result.tests_run)]


@pytest.mark.parametrize("tests", [THREADS, SUBTESTS], ids=["main-thread-waits", "timer-swallowed"])
def test_a_run_cut_by_sigxcpu_keeps_what_it_recorded_and_says_so(sandbox, tmp_path, tests):
    result, calls = _traced(sandbox, tmp_path, tests, test_timeout=0.5, cpu_seconds=3)
    assert result.cut and result.cpu_limited and not result.timed_out
    assert result.tests_run == 1  # the cut test never finished
    assert calls == ["([1], [])", "([2], [])"]
    assert "the CPU time limit (3 s) cut the run during tests/test_cpu.py::" in result.errors[0]
    assert "test_b_cut" in result.errors[0] and "calls recorded so far are kept" in result.errors[0]


def test_a_run_still_going_near_its_timeout_is_cut_and_keeps_what_it_recorded(sandbox, tmp_path):
    # no CPU to speak of: the wall clock's deadline (a safety limit) cuts it 5 s before the
    # timeout; the suite's own deadline, 15 s before it (7 s in), leaves a loaded machine time
    # to start pytest and reach test_b_cut
    repo_result, calls = _traced(sandbox, tmp_path, SLEEPER, test_timeout=0.5, timeout=22)
    assert repo_result.cut and repo_result.timed_out and not repo_result.cpu_limited
    assert repo_result.tests_run == 1 and calls == ["([1], [])", "([2], [])"]
    assert "the wall clock's deadline cut the run during tests/test_cpu.py::test_b_cut" in repo_result.errors[0]


COUNTED_TESTS = "from shapes.geometry import push_all\n\ndef work(n):\n    return n\n" + "".join(
    f"\ndef test_{i:02d}():\n    push_all([{i}], [])\n    [work(n) for n in range(2000)]\n" for i in range(40)
)
"""40 tests of 2,000 Python calls each, and little CPU time."""


def test_the_call_budget_stops_the_suite_at_the_same_test_on_a_busy_machine(sandbox, tmp_path):
    """The tracing budget counts the Python calls the hook sees: work, which a loaded machine
    does not change, so the suite stops after the same test, quiet or beside four burners,
    and the same inputs are kept (a CPU-time budget stopped more-itertools' suite at test
    758 of 884 beside other builds, and ran all of it alone)."""
    whole, _ = _traced(sandbox, tmp_path, COUNTED_TESTS, max_calls_per_target=40)
    assert whole.tests_run == 40 and whole.events > 40 * 2000 and not whole.budget_limited
    budget = whole.events // 2
    quiet, quiet_calls = _traced(sandbox, tmp_path, COUNTED_TESTS, max_calls_per_target=40, max_events=budget)
    with busy_machine(4):
        busy, busy_calls = _traced(sandbox, tmp_path, COUNTED_TESTS, max_calls_per_target=40, max_events=budget)
    assert quiet.budget_limited and not (quiet.cpu_limited or quiet.cut or quiet.timed_out)
    assert 10 <= quiet.tests_run <= 30  # about half the suite's calls: half its tests
    assert (busy.tests_run, busy_calls, busy.budget_limited) == (quiet.tests_run, quiet_calls, True)
    assert quiet_calls == [f"([{i}], [])" for i in range(quiet.tests_run)]
    note = _tracing_limits(quiet)
    assert note == [
        f"tracing: the call budget ({CALL_BUDGET:,} calls) stopped the repository's tests after "
        f"{quiet.tests_run} test(s); the inputs recorded until then are kept, those of the rest are missing"
    ]


def test_the_suite_stops_once_every_target_has_its_calls(sandbox, tmp_path):
    # one call kept per target: a pool of three; the test that finds it full is the last
    result, calls = _traced(sandbox, tmp_path, COUNTED_TESTS, max_calls_per_target=1)
    assert result.tests_run == 4 and len(calls) == 1
    assert not (result.budget_limited or result.cpu_limited or result.timed_out)
    assert _tracing_limits(result) == []  # not a limit: nothing more was to be recorded


def test_the_build_says_which_limit_stopped_the_tracing():
    cut_by_cpu = _tracing_limits(
        TraceResult(calls={}, tests_run=7, cpu_limited=True, cut=True, cpu_seconds=1799.6, events=61_234_567)
    )
    assert cut_by_cpu == [
        "tracing: the run's CPU-time limit (a safety limit) stopped the repository's tests after 7 test(s) "
        "(the last one was cut), 1800 CPU seconds and 61,234,567 calls in; the inputs recorded until then are "
        "kept, those of the rest are missing, and where it stops varies from run to run"
    ]
    stopped_by_wall = _tracing_limits(TraceResult(calls={}, tests_run=3, timed_out=True))
    assert len(stopped_by_wall) == 1 and SAFETY_NOTE in stopped_by_wall[0]  # listed in --stats' safety_limits
    assert "the wall clock stopped the repository's tests after 3 test(s);" in stopped_by_wall[0]
    assert _tracing_limits(TraceResult(calls={})) == []
