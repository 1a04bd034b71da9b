"""The local sandbox's wall-clock guard stops a run that waits, never one that computes.

A run's ``timeout`` is a guard: its CPU limit stops code that computes forever, the wall
clock only code that sleeps or blocks. Past the guard, a run with a runnable process goes
on (up to ``WALL_STRETCH`` times the guard), so a loaded machine turns no run into a
timeout.
"""

from __future__ import annotations

import pytest

from gym_repost.sandbox.local import LocalSandbox
from gym_repost.sandbox.worker_run import WALL_STRETCH

pytestmark = pytest.mark.limits  # run again beside CPU burners in CI (.ci/run)

SPIN = "import time\nwhile time.process_time() < 0.4:\n    pass\nprint('done')\n"
"""0.4 CPU seconds: past a guard of 0.3 s on a quiet machine, within its stretch (3 s) at a
load that slows it sevenfold."""


def test_a_run_that_computes_past_its_guard_goes_on(warm_sandbox: LocalSandbox) -> None:
    result = warm_sandbox.run({"m.py": SPIN}, ["python3", "m.py"], timeout=0.3, cpu_seconds=5.0)
    assert not result.timed_out and result.stdout == "done\n", (result.duration, result.stderr)
    assert result.duration > 0.3


def test_a_run_that_waits_is_stopped_at_its_guard(warm_sandbox: LocalSandbox) -> None:
    result = warm_sandbox.run({"m.py": "import time\ntime.sleep(30)\n"}, ["python3", "m.py"], timeout=0.3)
    assert result.timed_out and result.duration < 0.3 * WALL_STRETCH, result.duration


def test_a_run_that_computes_forever_meets_its_cpu_limit(warm_sandbox: LocalSandbox) -> None:
    result = warm_sandbox.run({"m.py": "while True:\n    pass\n"}, ["python3", "m.py"], timeout=0.2, cpu_seconds=0.5)
    assert result.returncode != 0 and result.duration < 0.2 * WALL_STRETCH + 1.0, (result.returncode, result.duration)


def test_the_stretch_is_the_programs_own() -> None:
    from gym_repost.programs import protocol

    assert WALL_STRETCH == protocol.WALL_STRETCH
