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
