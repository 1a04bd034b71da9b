"""HumanEval in the local sandbox: run_tests latency and a whole oracle evaluation.

1. ``run_tests`` latency: for each of the 164 tasks, a passing candidate (the ground
   truth's code, not its text) judged by the verdict path (one harness run recording the
   calls, compared on the host with the cached reference), (a) in the warm sandbox, (b)
   the same files as a fresh ``python3`` process (no isolation), and (c) the legacy path
   in the same warm sandbox: the evaluation script run as it is, its own assertions
   deciding, no recording (what ``run_tests`` cost before the verdict moved to the host).
   Making each task's reference (three runs of the ground truth, once per task) is timed
   apart.
2. Oracle evaluation of all 164 tasks with 2 workers, wall clock: the runner with the
   warm sandbox, and with the cold sandbox (a fresh interpreter per run) as the baseline.

Both baselines are measured in the same run. Appends a record to
``benchmarks/results/humaneval.jsonl``.

Usage: ``python benchmarks/humaneval.py [--no-record]``
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, machine, now, summary  # noqa: E402
from gym_repost.construct.importers.humaneval import import_humaneval  # noqa: E402
from gym_repost.evaluate import RunConfig, RunDir, evaluate  # noqa: E402
from gym_repost.evaluate.runner import tasks_digest  # noqa: E402
from gym_repost.harness import (  # noqa: E402
    HARNESS_NAME,
    SCRIPT_NAME,
    assemble,
    reference_for,
    run_function_tests,
)
from gym_repost.policy import load_policy  # noqa: E402
from gym_repost.sandbox import get_sandbox  # noqa: E402
from gym_repost.sandbox.programs import program_files, program_stdin  # noqa: E402
from gym_repost.task import FunctionTask  # noqa: E402

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
       "PYTHONDONTWRITEBYTECODE": "1"}


IDENTITY_HOOK = "import builtins\nbuiltins.__gym_repost_record__ = lambda f: f\n"


def passing_candidate(task: FunctionTask) -> str:
    """The ground truth's code under another text (the verdict path runs it; the exact text is not re-run)."""
    return task.ground_truth.replace("\n", "\n\n", 1)


def fresh_interpreter(task: FunctionTask, directory: Path) -> float:
    """Seconds for ``python3`` on the same harness files (driver mode), written beforehand."""
    assembled = assemble(task, passing_candidate(task))
    files = {**task.evaluation.files, SCRIPT_NAME: assembled.script, **program_files("harness")}
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    config = {"script": SCRIPT_NAME, "start": assembled.start_line,
              "end": assembled.end_line, "mode": "driver", "inputs": None}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, HARNESS_NAME], cwd=directory,
                          input=program_stdin(config, secrets.token_hex(16)), text=True, capture_output=True,
                          env=ENV, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{task.name} failed in a bare interpreter: {proc.stderr[-300:]}")
    return elapsed


def legacy(sb: object, task: FunctionTask) -> float:
    """Seconds for the script's own tests in the warm sandbox, nothing recorded (the old path)."""
    assembled = assemble(task, passing_candidate(task))
    files = {**task.evaluation.files, SCRIPT_NAME: IDENTITY_HOOK + assembled.script}
    started = time.perf_counter()
    result = sb.run(files, ["python3", SCRIPT_NAME], timeout=task.evaluation.timeout)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{task.name} failed on the legacy path: {result.stderr[-300:]}")
    return elapsed


def latency(tasks: list[FunctionTask]) -> dict[str, object]:
    """Per-task run_tests time: verdict path (warm), fresh interpreter, legacy path; reference making."""
    warm_times, fresh_times, legacy_times, reference_times = [], [], [], []
    with get_sandbox("local", workers=1) as sb, tempfile.TemporaryDirectory() as tmp:
        for task in tasks[:5]:
            run_function_tests(sb, task, passing_candidate(task))  # warm-up
            legacy(sb, task)
        for task in tasks:
            started = time.perf_counter()
            reference_for(sb, task)
            reference_times.append(time.perf_counter() - started)
        for task in tasks:
            started = time.perf_counter()
            report = run_function_tests(sb, task, passing_candidate(task))
            warm_times.append(time.perf_counter() - started)
            assert report.passed, task.name
            legacy_times.append(legacy(sb, task))
            fresh_times.append(fresh_interpreter(task, Path(tmp)))
    warm, fresh, old = summary(warm_times), summary(fresh_times), summary(legacy_times)
    return {"warm": warm, "fresh_python3": fresh, "legacy_warm": old,
            "reference_once_per_task": summary(reference_times),
            "speedup_median": fresh["median_ms"] / warm["median_ms"],
            "verdict_vs_legacy_median": warm["median_ms"] / old["median_ms"]}


def oracle_eval(tasks: list[FunctionTask], warm: bool) -> float:
    """Wall seconds of the oracle over all tasks with 2 workers."""
    config = RunConfig(tasks="humaneval", tasks_digest=tasks_digest(tasks), policy="oracle", workers=2)
    with tempfile.TemporaryDirectory() as run, get_sandbox("local", workers=2, warm=warm) as sb:
        started = time.perf_counter()
        summary_ = evaluate(tasks, load_policy("oracle"), config, RunDir(run), sb)
        elapsed = time.perf_counter() - started
    assert summary_["pass@1"] == 1.0, summary_
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    tasks = [t for t in import_humaneval() if isinstance(t, FunctionTask)]
    lat = latency(tasks)
    warm_s, cold_s = oracle_eval(tasks, warm=True), oracle_eval(tasks, warm=False)
    record = {"benchmark": "humaneval", "date": now(), "machine": machine(), "tasks": len(tasks),
              "run_tests_latency": lat,
              "oracle_eval_2_workers_s": {"warm": warm_s, "cold": cold_s, "speedup": cold_s / warm_s}}
    w, f, old = lat["warm"], lat["fresh_python3"], lat["legacy_warm"]
    ref = lat["reference_once_per_task"]
    print(f"machine: {record['machine']}")
    print(f"run_tests on {len(tasks)} HumanEval tasks: warm median {w['median_ms']:.1f} ms "
          f"(p90 {w['p90_ms']:.1f}), fresh python3 median {f['median_ms']:.1f} ms "
          f"(p90 {f['p90_ms']:.1f}): {lat['speedup_median']:.1f}x")
    print(f"verdict path vs legacy path (script's own asserts, nothing recorded), same warm sandbox: "
          f"{w['median_ms']:.1f} ms vs {old['median_ms']:.1f} ms median ({lat['verdict_vs_legacy_median']:.2f}x); "
          f"making a reference, once per task: median {ref['median_ms']:.1f} ms")
    print(f"oracle on all {len(tasks)} tasks, 2 workers: warm {warm_s:.1f} s, cold {cold_s:.1f} s "
          f"({cold_s / warm_s:.1f}x)")
    if not args.no_record:
        print(f"appended to {append_record('humaneval', record)}")


if __name__ == "__main__":
    main()
