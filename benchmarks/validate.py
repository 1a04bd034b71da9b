"""``gym-repost validate`` on HumanEval: mutants in one warm batch per task vs one run each.

For each of the 164 tasks, validation runs the ground truth (its reference: three runs,
once per task), a do-nothing candidate and 10 mutants. Two ways of running the eleven
candidates, with 2 workers over the tasks, in the same run of this script:

* **batch** (what ``validate`` does): one sandbox run per task forks each candidate from a
  process that imported the script's modules once; a candidate that loops forever is
  stopped by CPU time (20 times the ground truth's, at least 0.25 s).
* **one run each** (what ``validate`` did before): one sandbox run per candidate, the
  wall-clock timeout ``min(task timeout, max(2 s, 5 x the ground truth's run + 1 s))``.

Both must give the same verdicts (passed or not, per candidate). The references are made
once, before timing, and shared by both (they are the same work in both).

Then the command itself, as a user runs it: ``gym-repost validate`` on the same tasks with
references made afresh (``GYM_REPOST_REFERENCES=off``), start-up included (``cli_s``; the
target of issue 14 is 20 s).

Usage: ``python benchmarks/validate.py [--tasks N] [--no-record]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, machine, now
from gym_repost.analysis.mutation import generate_mutants, sample_mutants
from gym_repost.construct.importers.humaneval import import_humaneval
from gym_repost.harness import do_nothing_candidate, reference_for, run_function_tests, run_host_made
from gym_repost.sandbox import get_sandbox
from gym_repost.task import FunctionTask, save_tasks


def _candidates(task: FunctionTask) -> list[str]:
    return [do_nothing_candidate(task)] + [m.source for m in sample_mutants(generate_mutants(task.ground_truth), 10, 0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=164)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    tasks = [t for t in import_humaneval() if isinstance(t, FunctionTask)][: args.tasks]
    with get_sandbox("local", workers=2) as sandbox, ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        list(pool.map(lambda t: reference_for(sandbox, t), tasks))
        references = time.monotonic() - started
        baselines = {}
        for task in tasks:
            t0 = time.monotonic()
            run_function_tests(sandbox, task, task.ground_truth + "\n")  # a real run, not the cached report
            baselines[task.id] = time.monotonic() - t0

        def one_each(task: FunctionTask) -> list[bool]:
            timeout = min(task.evaluation.timeout, max(2.0, 5.0 * baselines[task.id] + 1.0))
            return [run_function_tests(sandbox, task, code, timeout=timeout).passed for code in _candidates(task)]

        def batch(task: FunctionTask) -> list[bool]:
            return [r.passed for r in run_host_made(sandbox, task, _candidates(task))]

        timings, verdicts = {}, {}
        for name, how in (("one_run_each", one_each), ("batch", batch)):
            started = time.monotonic()
            verdicts[name] = list(pool.map(how, tasks))
            timings[name] = time.monotonic() - started
    differing = [t.name for t, a, b in zip(tasks, verdicts["one_run_each"], verdicts["batch"]) if a != b]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "humaneval.jsonl"
        save_tasks(tasks, path)
        started = time.monotonic()
        command = [sys.executable, "-m", "gym_repost.cli", "validate", str(path)]
        fresh = dict(os.environ, GYM_REPOST_REFERENCES="off")
        done = subprocess.run(command, env=fresh, capture_output=True, text=True)
        cli = time.monotonic() - started
    summary = [line for line in done.stdout.splitlines() if line.startswith(("ground truth passes", "mutants killed"))]
    record = {
        "benchmark": "validate",
        "date": now(),
        "machine": machine(),
        "tasks": len(tasks),
        "candidates_per_task": 11,
        "workers": 2,
        "references_s": round(references, 2),
        "one_run_each_s": round(timings["one_run_each"], 2),
        "batch_s": round(timings["batch"], 2),
        "speedup": round(timings["one_run_each"] / timings["batch"], 2),
        "validate_equivalent_s": round(references + timings["batch"], 2),
        "differing_verdicts": differing,
        "cli_s": round(cli, 2),
        "cli_returncode": done.returncode,
        "cli_summary": summary,
    }
    print(record)
    if not args.no_record:
        print("recorded in", append_record("validate", record))


if __name__ == "__main__":
    main()
