"""Host-made candidates (mutants, do-nothing) judged in batches forked from one warm process.

The batch must give every candidate the verdict a run of its own gives, stop a candidate
that loops forever by its CPU time (not by how busy the machine is), and hold up when a
candidate exits, prints without end or sleeps.
"""

from __future__ import annotations

import textwrap

import pytest
from sandboxes import CountingSandbox

import gym_repost.harness as harness
from gym_repost.analysis.mutation import generate_mutants, sample_mutants
from gym_repost.harness import do_nothing_candidate, reference_for, run_function_tests, run_host_made
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask, load_tasks
from tests.conftest import ROOT

BODIES = {
    "loops": "    while True:\n        pass\n",
    "exits": "    import os\n    os._exit(0)\n",
    "sleeps": "    import time\n    time.sleep(60)\n",
    "floods": "    while True:\n        print('x' * 10000)\n",
    "raises": "    raise ValueError('no')\n",
}


def _with_body(task: FunctionTask, body: str) -> str:
    """The ground truth's signature over ``body``."""
    source = textwrap.dedent(task.ground_truth)
    header = source.split(":\n", 1)[0] + ":\n"
    return header + body


def test_a_batch_gives_each_mutant_the_verdict_of_its_own_run(sandbox: Sandbox, function_task: FunctionTask) -> None:
    demo = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if isinstance(t, FunctionTask)][:4]
    for task in [function_task, *demo]:
        codes = [do_nothing_candidate(task)] + [
            m.source for m in sample_mutants(generate_mutants(task.ground_truth), 6, 0)
        ]
        counting = CountingSandbox(sandbox)
        reference_for(counting, task)
        made = counting.runs
        batch = run_host_made(counting, task, codes)
        assert counting.runs == made + 1, task.name  # one batch, not a run per candidate
        alone = [run_function_tests(sandbox, task, code) for code in codes]
        assert [r.passed for r in batch] == [r.passed for r in alone], task.name
        assert [r.status for r in batch] == [r.status for r in alone], task.name


@pytest.mark.limits
def test_hostile_bodies_fail_and_the_loop_is_stopped_by_cpu_time(sandbox: Sandbox, function_task: FunctionTask) -> None:
    codes = [_with_body(function_task, body) for body in BODIES.values()] + [function_task.ground_truth]
    reports = dict(zip([*BODIES, "ground truth"], run_host_made(sandbox, function_task, codes)))
    assert reports["ground truth"].passed
    assert not any(r.passed for name, r in reports.items() if name != "ground truth")
    assert reports["loops"].status == "timeout"
    assert reports["sleeps"].status == "timeout"
    assert reports["exits"].exception == "EarlyExit"
    floods = reports["floods"]
    assert floods.exception in ("OutputLimitExceeded", "WrongBehaviour") or floods.status == "timeout"
    assert reports["raises"].status in ("failed", "error")


def test_a_batch_whose_output_overflows_goes_on_in_another(
    sandbox: Sandbox, function_task: FunctionTask, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[int] = []
    original = harness._batch_run

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        runs.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(harness, "_batch_run", counting)
    monkeypatch.setattr(harness, "BATCH_OUTPUT", 20_000)
    noisy = _with_body(function_task, "    print('y' * 200000)\n    return 0\n")
    reports = run_host_made(sandbox, function_task, [noisy] * 6 + [function_task.ground_truth])
    assert len(runs) > 1  # each child's output tail is 8,000 characters: a few per batch
    assert [r.passed for r in reports] == [False] * 6 + [True]


def test_a_candidate_that_does_not_assemble_is_invalid_and_the_rest_still_run(
    sandbox: Sandbox, function_task: FunctionTask
) -> None:
    reports = run_host_made(sandbox, function_task, ["def score(:\n", function_task.ground_truth])
    assert reports[0].status == "invalid"
    assert reports[1].passed
