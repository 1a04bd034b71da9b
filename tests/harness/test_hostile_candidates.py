"""Hostile candidates through the real harness and sandbox: a verdict, nothing left over.

Each candidate replaces the target of a small task; the run must end with a failing
report of the right kind, the host must be untouched, and no process of the sandbox's
user may survive the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gym_repost.harness import run_function_tests
from gym_repost.sandbox import Sandbox, get_sandbox
from gym_repost.sandbox.conformance import processes_of_uid
from gym_repost.task import FunctionTask
from tests.conftest import build_task

HOST_FILE = Path("/tmp/gym-repost-hostile-candidate-was-here")

HOSTILE = {
    "infinite loop": ("while True:\n        pass", {"timeout"}),
    "memory": ("x = bytearray(20 * 1024 ** 3)\n    return len(x)", {"error"}),
    "fork bomb": ("import os\n    while True:\n        os.fork()", {"error", "timeout"}),
    "output flood": ("import sys\n    while True:\n        sys.stdout.write('x' * 65536)", {"error", "timeout"}),
    "network": ("import socket\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n    return 0", {"error"}),
    "write /etc": ("open('/etc/gym-repost-hostile', 'w').write('x')\n    return 0", {"error"}),
    # /tmp inside the sandbox is a throwaway tmpfs: the write succeeds there, never on the host
    "write /tmp": (f"open({str(HOST_FILE)!r}, 'w').write('x')\n    return 0", {"failed"}),
    "orphan": (
        "import os, time\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(600)\n    return None",
        {"failed"},
    ),
    "exit 0": ("import os\n    os._exit(0)", {"error"}),
    "kill parent": ("import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 0", {"error", "failed"}),
}


@pytest.fixture(scope="module")
def one_worker() -> Iterator[tuple[Sandbox, int]]:
    with get_sandbox("local", workers=1) as sb:
        probe = sb.run({"p.py": "import os\nprint(os.getuid())"}, ["python3", "p.py"], timeout=10)
        yield sb, int(probe.stdout)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_candidate_gets_a_verdict_and_leaves_nothing(
    name: str, one_worker: tuple[Sandbox, int], function_task: FunctionTask
) -> None:
    sandbox, uid = one_worker
    body, statuses = HOSTILE[name]
    task = function_task.model_copy(deep=True)
    task.evaluation.timeout = 4.0
    report = run_function_tests(sandbox, task, f"def score(values, cap=100):\n    {body}\n")
    assert not report.passed and report.status in statuses, report.to_text()
    assert not HOST_FILE.exists() and not Path("/etc/gym-repost-hostile").exists()
    deadline = time.monotonic() + 2
    while processes_of_uid(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of_uid(uid) == [], f"{name}: processes left running"
    assert run_function_tests(sandbox, task, task.ground_truth).passed  # the sandbox still works


def test_reports_say_what_happened(one_worker: tuple[Sandbox, int], function_task: FunctionTask) -> None:
    sandbox, _ = one_worker
    task = function_task.model_copy(deep=True)
    task.evaluation.timeout = 3.0
    report = run_function_tests(sandbox, task, "def score(values, cap=100):\n    while True:\n        pass\n")
    assert "timed out" in report.to_text()
    report = run_function_tests(sandbox, task, "def score(values, cap=100):\n    import os\n    os._exit(0)\n")
    assert "before the tests finished" in report.to_text()
    report = run_function_tests(sandbox, task, "def score(values, cap=100):\n    return values[10]\n")
    assert report.status == "error" and report.in_candidate and "your code, line 2" in report.to_text()


MATCH_VERSION = """\
_CACHE = {}


def match_version(given):
    if given in _CACHE:
        return _CACHE[given]
    _CACHE[given] = "15.1.0"
    return "15.1"
"""


def test_a_failure_that_depends_on_earlier_calls_is_said_to(one_worker: tuple[Sandbox, int]) -> None:
    """The report evaluates a failed comparison's two sides again to show them. wcwidth's
    ``_wcmatch_version`` keeps a cache (``lru_cache``) and warns when it computes: a build's
    ground truth failed its own test where one side was computed and the other cached, and
    the drop showed two equal sides of a failed ``==`` (both cached by then) with no word
    why. Here the first call's result differs from the cached one's."""
    from gym_repost.construct.testgen.writer import runtime_helpers

    sandbox, _ = one_worker
    compare = '    assert _gr_outcome(match_version, "") == _gr_outcome(match_version_new_implementation, "")\n'
    test = "\n\ndef test_match_version():\n" + compare + '\n\nif __name__ == "__main__":\n    test_match_version()\n'
    task = build_task(
        MATCH_VERSION + "\n\n" + runtime_helpers() + test, "match_version", {"v.py": MATCH_VERSION}, "v.py"
    )
    report = run_function_tests(sandbox, task, task.ground_truth)
    assert report.status == "failed" and report.assertion is not None, report.to_text()
    assert report.assertion.left == report.assertion.right and report.assertion.equal_again
    assert "keeps state between calls" in report.to_text()
    plain = task.model_copy(deep=True)
    plain.evaluation.script = plain.evaluation.script.replace(compare, '    assert match_version("1") == "2"\n')
    report = run_function_tests(sandbox, plain, plain.ground_truth)
    assert report.assertion is not None and not report.assertion.equal_again, report.to_text()
    assert "keeps state" not in report.to_text()
