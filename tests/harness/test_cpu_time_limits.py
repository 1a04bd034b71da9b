"""A function task's ``timeout`` counts CPU seconds, so verdicts do not depend on the load.

Each process of a harness run may use ``timeout`` CPU seconds (RLIMIT_CPU); the wall clock
only guards, at :data:`~gym_repost.harness.WALL_FACTOR` times as long, against code that
waits without computing. A busy machine stretches a run's wall-clock time, never its CPU
time. A process that is not running (here: sleeping, as one the scheduler does not run)
meets no limit until the guard.
"""

from __future__ import annotations

import textwrap

import pytest

from gym_repost.harness import WALL_FACTOR, run_function_tests
from gym_repost.harness.candidate import do_nothing_candidate
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask
from tests.conftest import build_task

pytestmark = pytest.mark.limits  # run again beside CPU burners in CI (.ci/run)

SCRIPT = textwrap.dedent('''\
    def churn(n):
        """A sum that takes a while: ~0.25 CPU seconds for n = 5,000,000."""
        total = 0
        for i in range(n):
            total += i % 7
        return total


    def test_churn():
        assert churn(5_000_000) == churn_new_implementation(5_000_000)
        assert churn(10) == churn_new_implementation(10)


    if __name__ == "__main__":
        test_churn()
    ''')

CORRECT = "def churn(n):\n    return sum(i % 7 for i in range(n))\n"
ENDLESS = "def churn(n):\n    while True:\n        pass\n"
IGNORES_SIGXCPU = (
    "def churn(n):\n    import signal\n    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
    "    while True:\n        pass\n"
)


def churn_task(timeout: float, note: str = "") -> FunctionTask:
    """The task; ``note``, a comment at the script's end, makes it another task (with a
    reference record of its own)."""
    script = SCRIPT + (f"# {note}\n" if note else "")
    task = build_task(script, "churn", {"tiny/churn.py": SCRIPT.split("\n\ndef test_churn")[0]}, "tiny/churn.py")
    task.evaluation.timeout = timeout
    return task.with_id()


def test_an_endless_loop_is_stopped_by_its_cpu_time_and_the_report_says_so(sandbox: Sandbox) -> None:
    task = churn_task(1.0)
    report = run_function_tests(sandbox, task, ENDLESS)
    assert report.status == "timeout" and not report.passed
    assert report.message == "timed out: the CPU time limit (1 s) stopped the run"
    assert "Tests timed out: the CPU time limit (1 s) stopped the run" in report.to_text()
    # a candidate that ignores SIGXCPU is killed at the hard limit, a second later
    report = run_function_tests(sandbox, task, IGNORES_SIGXCPU)
    assert not report.passed and report.status in ("timeout", "error"), report.to_text()


@pytest.mark.parametrize(("sleep", "passes"), [(1.2, True), (WALL_FACTOR * 2.0 / 2 + 0.5, False)])
def test_the_wall_clock_guard_stops_only_what_waits_past_it(sandbox: Sandbox, sleep: float, passes: bool) -> None:
    """Waiting costs no CPU: a candidate that sleeps past its 2 s (at each of the two calls
    with a large ``n``: the script's original name is the candidate too) passes within the
    guard (three times as long), and times out beyond it, saying how long it ran."""
    task = churn_task(2.0)
    sleeper = f"def churn(n):\n    import time\n    if n > 10:\n        time.sleep({sleep})\n"
    sleeper += "    return sum(i % 7 for i in range(n))\n"
    report = run_function_tests(sandbox, task, sleeper)
    assert report.passed is passes, report.to_text()
    if not passes:
        assert report.status == "timeout" and "s of wall-clock time" in report.message, report.message


def test_the_ground_truth_and_a_correct_candidate_pass_under_their_cpu_time(sandbox: Sandbox) -> None:
    task = churn_task(2.0)
    candidates = [task.ground_truth, CORRECT, ENDLESS, do_nothing_candidate(task)]
    reports = [run_function_tests(sandbox, task, c) for c in candidates]
    assert [r.status for r in reports] == ["passed", "passed", "timeout", "failed"], [r.to_text() for r in reports]


RAISES_ITS_LIMIT = """\
def churn(n):
    import resource, signal, time
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        while True:
            pass
    while time.process_time() < 1.5:  # the limit is gone: compute past the timeout, then answer
        pass
    return sum(i % 7 for i in range(n))
"""


def test_a_candidate_cannot_raise_its_cpu_limit(sandbox: Sandbox) -> None:
    """The attack: ignore SIGXCPU and lift RLIMIT_CPU to compute past the timeout, then give
    the right answer (a pass, had it worked). The hard limit is the kernel's and cannot be
    raised by the run's unprivileged user: the process is killed there, and the run fails.
    No wall-clock bound is asserted: the attack, had it worked, shows as a pass."""
    task = churn_task(1.0)
    report = run_function_tests(sandbox, task, RAISES_ITS_LIMIT)
    assert not report.passed and report.status in ("timeout", "error"), report.to_text()
