"""RepoST-Eval: the oracle through gym-repost against a plain loop of ``python script.py``.

1. gym-repost, **cold**: ``eval --policy oracle --env repost-eval`` with 2 workers, as
   the CLI runs it (warm local sandbox preloading the modules of
   ``envs/repost-eval/preload.txt`` the tasks import), wall clock from the sandbox's start
   (the preloading included) to its close, with an empty reference store: each task costs
   its reference (the ground truth's run and its replay, a third run when the replay
   differs), which is kept in the store; the oracle's code is the ground truth's text,
   whose verdict is the reference's. The time spent making references is reported apart,
   as a share.
2. gym-repost, **warm**: the same eval again in a new sandbox and process state, the
   references read from the store (as after ``gym-repost validate``, which records them);
   a reference that failed (a timeout, say) is not kept, so it is made again. Then
   ``warm_recording``: every task judged once (2 threads) with the ground truth under
   another text (a comment appended), so that each costs one recording run.
3. The oracle without preloading, cold (warm workers that import only the harness's
   modules), only with ``--unpreloaded``.
4. One run per task in that preloaded sandbox: the plain loop's script (below) as
   ``python3 evaluation.py``, 2 threads, no verdict path: run for run against the loop.
5. The plain loop: for each task, the evaluation script with the ground truth inserted as
   the candidate, run as ``python evaluation.py`` with the environment's interpreter in a
   fresh directory, 2 threads, no sandbox, the task's timeout; passed = exit status 0.
   (Scripts that write to ``/home/user/tmp``, which the sandbox provides, fail fast here
   when it does not exist: that only makes the loop faster.) Then the same loop told it is
   offline (``OFFLINE_ENV``), as the sandbox's runs without network are, so that tools that
   would download fail at once there too: the like-for-like baseline.

All in the same run. Appends a record to ``benchmarks/results/repost_eval.jsonl``.

Usage: ``python benchmarks/repost_eval.py TASKS.jsonl [--env repost-eval] [--unpreloaded] [--no-record]``
(``TASKS.jsonl``: ``gym-repost build repost-eval:../shared/external/repost-eval -o TASKS.jsonl``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gym_repost.harness as harness
from benchmarks.common import append_record, machine, now
from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.harness import SCRIPT_NAME, assemble
from gym_repost.policy import load_policy
from gym_repost.sandbox import get_sandbox
from gym_repost.sandbox.base import OFFLINE_ENV
from gym_repost.sandbox.environments import preload_for, resolve_env_python
from gym_repost.task import FunctionTask, load_tasks

WORKERS = 2


class ReferenceClock:
    """Sums the time spent making references (``harness.record_reference``), all threads."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0
        self._lock = threading.Lock()
        self._original = harness.record_reference

    def __enter__(self) -> ReferenceClock:
        def timed(sandbox: Any, task: FunctionTask) -> Any:
            started = time.perf_counter()
            try:
                return self._original(sandbox, task)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - started
                    self.count += 1

        harness.record_reference = timed
        return self

    def __exit__(self, *exc: object) -> None:
        harness.record_reference = self._original


def gym_repost_oracle(tasks: list[FunctionTask], env: str, preload: bool) -> dict[str, Any]:
    """The oracle over every task, as ``gym-repost eval --env ENV -w 2`` runs it."""
    modules = preload_for(env, (p for t in tasks for p in t.metadata.external_packages)) if preload else []
    config = RunConfig(tasks="repost-eval", tasks_digest=tasks_digest(tasks), policy="oracle", workers=WORKERS)
    harness._REFERENCES = harness.ReferenceCache()  # what this process made before does not count
    with tempfile.TemporaryDirectory() as run, ReferenceClock() as clock:
        started = time.perf_counter()
        with get_sandbox("local", workers=WORKERS, python=resolve_env_python(env), preload=modules) as sb:
            ready = time.perf_counter() - started
            report = sb.preload_report()  # type: ignore[attr-defined]
            runs = count_runs(sb)
            summary = evaluate(tasks, load_policy("oracle"), config, RunDir(run), sb)
        elapsed = time.perf_counter() - started
    passed = round(summary["pass@1"] * summary["tasks"])
    return {
        "wall_s": elapsed,
        "sandbox_start_s": ready,
        "passed": passed,
        "tasks": summary["tasks"],
        "infra_errors": summary["infra_errors"],
        "sandbox_runs": runs[0],
        "references": clock.count,
        "reference_worker_s": clock.seconds,
        "reference_share": clock.seconds / (WORKERS * elapsed),
        "preload": {k: report[k] for k in ("loaded", "failed", "unfit")},
    }


def count_runs(sandbox: Any) -> list[int]:
    """A counter (one item) of the sandbox's runs from now on."""
    counter, run, lock = [0], sandbox.run, threading.Lock()

    def counted(*args: Any, **kwargs: Any) -> Any:
        with lock:
            counter[0] += 1
        return run(*args, **kwargs)

    sandbox.run = counted
    return counter


def warm_recording(tasks: list[FunctionTask], env: str) -> dict[str, Any]:
    """Every task judged once with the ground truth under another text, references from the store."""
    modules = preload_for(env, (p for t in tasks for p in t.metadata.external_packages))
    harness._REFERENCES = harness.ReferenceCache()
    started = time.perf_counter()
    with (
        ReferenceClock() as clock,
        get_sandbox("local", workers=WORKERS, python=resolve_env_python(env), preload=modules) as sb,
        ThreadPoolExecutor(WORKERS) as pool,
    ):
        runs = count_runs(sb)
        other_text = "\n# the ground truth under another text\n"
        reports = list(pool.map(lambda t: harness.run_function_tests(sb, t, t.ground_truth + other_text), tasks))
    elapsed = time.perf_counter() - started
    return {
        "wall_s": elapsed,
        "passed": sum(r.passed for r in reports),
        "tasks": len(tasks),
        "sandbox_runs": runs[0],
        "references_made": clock.count,
        "reference_worker_s": clock.seconds,
    }


def plain_script(task: FunctionTask) -> dict[str, str]:
    """The files of RepoST's own layout: the original and the ground truth as the candidate."""
    return {**task.evaluation.files, SCRIPT_NAME: assemble(task, task.ground_truth, keep_original=True).script}


def sandbox_loop(tasks: list[FunctionTask], env: str) -> dict[str, Any]:
    """The plain loop's scripts, one run each, in the warm preloaded sandbox."""
    modules = preload_for(env, (p for t in tasks for p in t.metadata.external_packages))
    started = time.perf_counter()
    with (
        get_sandbox("local", workers=WORKERS, python=resolve_env_python(env), preload=modules) as sb,
        ThreadPoolExecutor(WORKERS) as pool,
    ):
        results = list(
            pool.map(lambda t: sb.run(plain_script(t), ["python3", SCRIPT_NAME], timeout=t.evaluation.timeout), tasks)
        )
    elapsed = time.perf_counter() - started
    return {
        "wall_s": elapsed,
        "passed": sum(r.returncode == 0 for r in results),
        "tasks": len(tasks),
        "runs_s": sum(r.duration for r in results),
    }


def plain_run(python: str, task: FunctionTask, offline: bool = False) -> tuple[bool, float]:
    """``python evaluation.py`` of the ground truth as the candidate, in a fresh directory
    (``offline``: with the variables that tell the sandbox's runs they are offline)."""
    env = {
        "PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        **(OFFLINE_ENV if offline else {}),
    }
    with tempfile.TemporaryDirectory() as directory:
        for name, content in plain_script(task).items():
            path = Path(directory, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        env["HOME"] = env["TMPDIR"] = directory
        started = time.perf_counter()
        try:
            done = subprocess.run(
                [python, SCRIPT_NAME],
                cwd=directory,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=task.evaluation.timeout,
            )
            ok = done.returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        return ok, time.perf_counter() - started


def plain_loop(tasks: list[FunctionTask], env: str, offline: bool = False) -> dict[str, Any]:
    python = resolve_env_python(env)
    started = time.perf_counter()
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(lambda t: plain_run(python, t, offline), tasks))
    elapsed = time.perf_counter() - started
    return {
        "wall_s": elapsed,
        "passed": sum(ok for ok, _ in results),
        "tasks": len(tasks),
        "runs_s": sum(seconds for _, seconds in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--env", default="repost-eval")
    parser.add_argument("--unpreloaded", action="store_true", help="also measurement 3")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    tasks = [t for t in load_tasks(args.tasks) if isinstance(t, FunctionTask)]
    load_before = machine()["load_average"]
    with tempfile.TemporaryDirectory() as store:
        os.environ["GYM_REPOST_REFERENCES"] = store  # empty: the cold run makes and keeps them
        ours = gym_repost_oracle(tasks, args.env, preload=True)
        warm = gym_repost_oracle(tasks, args.env, preload=True)
        recording = warm_recording(tasks, args.env)
    os.environ["GYM_REPOST_REFERENCES"] = "off"
    unpreloaded = gym_repost_oracle(tasks, args.env, preload=False) if args.unpreloaded else None
    runs = sandbox_loop(tasks, args.env)
    plain = plain_loop(tasks, args.env)
    plain_offline = plain_loop(tasks, args.env, offline=True)
    record = {
        "benchmark": "repost_eval",
        "date": now(),
        "machine": machine(),
        "load_before": load_before,
        "tasks": len(tasks),
        "workers": WORKERS,
        "env": args.env,
        "gym_repost_preloaded": ours,
        "gym_repost_warm": warm,
        "gym_repost_warm_recording": recording,
        "gym_repost_unpreloaded": unpreloaded,
        "sandbox_one_run_per_task": runs,
        "plain_loop": plain,
        "plain_loop_offline": plain_offline,
        "speedup_warm_vs_offline_loop": plain_offline["wall_s"] / warm["wall_s"],
        "speedup_run_for_run_vs_offline_loop": plain_offline["wall_s"] / runs["wall_s"],
        "speedup_vs_offline_loop": plain_offline["wall_s"] / ours["wall_s"],
        "speedup": plain["wall_s"] / ours["wall_s"],
        "speedup_warm": plain["wall_s"] / warm["wall_s"],
        "speedup_warm_recording": plain["wall_s"] / recording["wall_s"],
        "speedup_run_for_run": plain["wall_s"] / runs["wall_s"],
        "speedup_unpreloaded": plain["wall_s"] / unpreloaded["wall_s"] if unpreloaded else None,
    }
    print(
        f"gym-repost oracle, preloaded, cold: {ours['wall_s']:.1f} s (sandbox start {ours['sandbox_start_s']:.1f} s; "
        f"references {100 * ours['reference_share']:.0f}% of the worker time), "
        f"{ours['passed']}/{ours['tasks']} passed, {ours['sandbox_runs']} sandbox runs"
    )
    print(
        f"gym-repost oracle, preloaded, warm (references from the store): {warm['wall_s']:.1f} s, "
        f"{warm['passed']}/{warm['tasks']} passed, {warm['sandbox_runs']} sandbox runs "
        f"({warm['references']} references made again: {warm['reference_worker_s']:.1f} worker-s)"
    )
    print(
        f"warm, one recording run per task: {recording['wall_s']:.1f} s, {recording['passed']}/{recording['tasks']} "
        f"passed, {recording['sandbox_runs']} sandbox runs"
    )
    if unpreloaded:
        print(
            f"gym-repost oracle, not preloaded: {unpreloaded['wall_s']:.1f} s, "
            f"{unpreloaded['passed']}/{unpreloaded['tasks']} passed"
        )
    print(f"one run per task in the preloaded sandbox: {runs['wall_s']:.1f} s, {runs['passed']}/{runs['tasks']} passed")
    print(f"plain loop: {plain['wall_s']:.1f} s, {plain['passed']}/{plain['tasks']} passed")
    print(
        f"plain loop told it is offline, as the sandbox's runs are: {plain_offline['wall_s']:.1f} s, "
        f"{plain_offline['passed']}/{plain_offline['tasks']} passed; against it: cold "
        f"{record['speedup_vs_offline_loop']:.2f}x, warm {record['speedup_warm_vs_offline_loop']:.2f}x, "
        f"run for run {record['speedup_run_for_run_vs_offline_loop']:.2f}x"
    )
    print(
        f"ratio: cold {record['speedup']:.2f}x, warm {record['speedup_warm']:.2f}x, warm with one recording "
        f"run per task {record['speedup_warm_recording']:.2f}x; run for run {record['speedup_run_for_run']:.2f}x "
        f"(load {record['machine']['load_average']})"
    )
    if not args.no_record:
        print(f"recorded in {append_record('repost_eval', record)}")


if __name__ == "__main__":
    main()
