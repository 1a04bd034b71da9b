"""RepoST-Eval: the oracle through gym-repost against a plain loop of ``python script.py``.

1. gym-repost, **cold**: ``eval --policy oracle --env repost-eval`` with 2 workers, as
   the CLI runs it (warm local sandbox preloading the modules of
   ``envs/repost-eval/preload.txt`` the tasks import, and those it preloads ``apart`` in
   workers of their own, started on first use), wall clock from the sandbox's start
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
6. Attempts on the tasks that import a module preloaded apart (tensorflow, litellm...), as
   an episode with self-repair makes them: for each task, task after task, its reference
   (two or three runs), then ``ATTEMPTS`` candidate runs one after another (the ground
   truth under another text each time); once with the workers of their own, once without
   (every run imports the module). Wall clock and the machine's CPU seconds
   (``/proc/stat``) per task, the start of the task's worker of its own included. Then the
   same with a task's attempts on both threads at once (as ``-n 2`` samples of a task run).

7. The clock: each task's reference made now (empty store, 2 threads), then the ground
   truth under another text judged right away and on a clock a day and 7 s later (as an
   ``eval`` that reads the reference store a day after ``validate``); once with the
   reference's second and third runs on a clock ahead (``Sandbox.clock_ahead``), once
   without (as before). Passed counts, and the tasks that failed.

All in the same run. Appends a record to ``benchmarks/results/repost_eval.jsonl``.

Usage: ``python benchmarks/repost_eval.py TASKS.jsonl [--env repost-eval] [--unpreloaded] [--no-record]
[--attempts-only | --clock-only]``
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
from collections.abc import Callable
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
from gym_repost.sandbox.environments import preload_apart_for, preload_for, resolve_env_python
from gym_repost.task import FunctionTask, load_tasks

WORKERS = 2
ATTEMPTS = 5


def _preload(env: str, tasks: list[FunctionTask]) -> dict[str, Any]:
    """The sandbox's preload settings, as ``--env ENV`` makes them for ``tasks``."""
    packages = {p for t in tasks for p in t.metadata.external_packages}
    return {"preload": preload_for(env, packages), "preload_apart": preload_apart_for(env, packages)}


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
    preloading = _preload(env, tasks) if preload else {}
    config = RunConfig(tasks="repost-eval", tasks_digest=tasks_digest(tasks), policy="oracle", workers=WORKERS)
    harness._REFERENCES = harness.ReferenceCache()  # what this process made before does not count
    with tempfile.TemporaryDirectory() as run, ReferenceClock() as clock:
        started = time.perf_counter()
        with get_sandbox("local", workers=WORKERS, python=resolve_env_python(env), **preloading) as sb:
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
        "preload": {k: report[k] for k in ("loaded", "failed", "unfit", "apart") if k in report},
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
    harness._REFERENCES = harness.ReferenceCache()
    started = time.perf_counter()
    with (
        ReferenceClock() as clock,
        get_sandbox("local", workers=WORKERS, python=resolve_env_python(env), **_preload(env, tasks)) as sb,
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
    started = time.perf_counter()
    with (
        get_sandbox("local", workers=WORKERS, python=resolve_env_python(env), **_preload(env, tasks)) as sb,
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


def _cpu_seconds() -> float:
    """CPU seconds the whole machine has spent (``/proc/stat``), idle and I/O wait excluded."""
    with open("/proc/stat", encoding="utf-8") as handle:
        ticks = [int(field) for field in handle.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _attempt(sandbox: Any, task: FunctionTask, number: int) -> Any:
    """A candidate run of ``task``: its ground truth under another text."""
    return harness.run_function_tests(sandbox, task, task.ground_truth + f"\n# attempt {number}\n")


def apart_attempts(tasks: list[FunctionTask], env: str) -> dict[str, Any]:
    """Measurement 6: ``ATTEMPTS`` candidate runs in a row per task that imports a module
    preloaded apart, task after task, with the workers of their own and without them."""
    apart = _preload(env, tasks)["preload_apart"]
    heavy = [t for t in tasks if apart.keys() & set(t.metadata.external_packages)]
    found: dict[str, Any] = {"tasks": [t.name for t in heavy], "attempts": ATTEMPTS}
    for name, settings in (("without", {}), ("apart", {"preload_apart": apart})):
        harness._REFERENCES = harness.ReferenceCache()
        preload = _preload(env, tasks)["preload"]
        by_task: dict[str, Any] = {}
        with get_sandbox("local", workers=WORKERS, python=resolve_env_python(env), preload=preload, **settings) as sb:
            for task in heavy:
                cpu, started = _cpu_seconds(), time.perf_counter()
                harness.reference_for(sb, task)
                reports = [_attempt(sb, task, i) for i in range(ATTEMPTS)]
                by_task[task.name] = {
                    "wall_s": time.perf_counter() - started,
                    "cpu_s": _cpu_seconds() - cpu,
                    "passed": sum(r.passed for r in reports),
                }
        found[name] = {
            "wall_s": sum(t["wall_s"] for t in by_task.values()),
            "cpu_s": sum(t["cpu_s"] for t in by_task.values()),
            "passed": sum(t["passed"] for t in by_task.values()),
            "runs": ATTEMPTS * len(heavy),
            "by_task": by_task,
        }
        found[f"{name}_at_once"] = _attempts_at_once(env, tasks, heavy, settings)
    found["speedup"] = found["without"]["wall_s"] / found["apart"]["wall_s"]
    found["cpu_ratio"] = found["without"]["cpu_s"] / found["apart"]["cpu_s"]
    found["speedup_at_once"] = found["without_at_once"]["wall_s"] / found["apart_at_once"]["wall_s"]
    found["cpu_ratio_at_once"] = found["without_at_once"]["cpu_s"] / found["apart_at_once"]["cpu_s"]
    return found


def _attempts_at_once(
    env: str, tasks: list[FunctionTask], heavy: list[FunctionTask], settings: dict[str, Any]
) -> dict[str, Any]:
    """The same attempts, a task's on both threads at once (as ``-n 2`` samples of a task
    run), task after task; references included."""
    harness._REFERENCES = harness.ReferenceCache()
    preload = _preload(env, tasks)["preload"]
    with (
        get_sandbox("local", workers=WORKERS, python=resolve_env_python(env), preload=preload, **settings) as sb,
        ThreadPoolExecutor(WORKERS) as pool,
    ):
        cpu, started = _cpu_seconds(), time.perf_counter()
        reports = []
        for task in heavy:
            harness.reference_for(sb, task)
            reports += list(pool.map(lambda i: _attempt(sb, task, i), range(ATTEMPTS)))  # noqa: B023
        return {
            "wall_s": time.perf_counter() - started,
            "cpu_s": _cpu_seconds() - cpu,
            "passed": sum(r.passed for r in reports),
            "runs": len(reports),
        }


def _print_attempts(attempts: dict[str, Any]) -> None:
    for how, suffix in (("in a row", ""), ("on both threads at once", "_at_once")):
        apart, without = attempts[f"apart{suffix}"], attempts[f"without{suffix}"]
        print(
            f"{ATTEMPTS} attempts {how} on each of the {len(attempts['tasks'])} tasks that import a module "
            f"preloaded apart: {apart['wall_s']:.1f} s and {apart['cpu_s']:.1f} CPU-s with workers of their own, "
            f"{without['wall_s']:.1f} s and {without['cpu_s']:.1f} CPU-s without ({attempts['speedup' + suffix]:.2f}x, "
            f"CPU {attempts['cpu_ratio' + suffix]:.2f}x; passed {apart['passed']} and {without['passed']} of "
            f"{apart['runs']})"
        )


def measurement_only(
    benchmark: str,
    key: str,
    measure: Callable[[list[FunctionTask], str], dict[str, Any]],
    show: Callable[[dict[str, Any]], None],
    tasks: list[FunctionTask],
    env: str,
    record: bool,
) -> None:
    """``--attempts-only``, ``--clock-only``: one measurement alone, in a record of its own
    (``benchmark``, the measurement under ``key``), no reference store."""
    os.environ["GYM_REPOST_REFERENCES"] = "off"
    found = {"benchmark": benchmark, "date": now(), "machine": machine(), "env": env}
    found[key] = measured = measure(tasks, env)
    found["load_after"] = machine()["load_average"]
    show(measured)
    if record:
        print(f"recorded in {append_record('repost_eval', found)}")


LATER = 86400 + 7.0
"""How much later measurement 7 judges the candidates: a day and 7 s."""


def judged_later(tasks: list[FunctionTask], env: str) -> dict[str, Any]:
    """Measurement 7: references made now, the ground truth under another text judged now
    and on a clock :data:`LATER` ahead; with the reference's clock ahead, and without."""
    found: dict[str, Any] = {"later_s": LATER}
    other_text = "\n# the ground truth under another text\n"
    for name, ahead in (("clock_ahead", True), ("same_clock", False)):
        harness._REFERENCES = harness.ReferenceCache()
        with (
            get_sandbox("local", workers=WORKERS, python=resolve_env_python(env), **_preload(env, tasks)) as sb,
            ThreadPoolExecutor(WORKERS) as pool,
        ):
            later = sb.clock_ahead(LATER)
            assert later is not None, "no clock ahead here (no C compiler?)"
            if not ahead:
                sb.clock_ahead = lambda seconds: None  # type: ignore[method-assign]  # as before
            started = time.perf_counter()
            references = list(pool.map(lambda t: harness.reference_for(sb, t), tasks))
            made = time.perf_counter() - started

            def judge(task: FunctionTask, where: Any) -> Any:
                return harness.run_function_tests(where, task, task.ground_truth + other_text)

            now_ = list(pool.map(judge, tasks, [sb] * len(tasks)))
            day = list(pool.map(judge, tasks, [later] * len(tasks)))
        found[name] = {
            "references_s": made,
            "references_passed": sum(r.passed for r in references),
            "nondeterministic": sum(bool(r.nondeterministic) for r in references),
            "passed_now": sum(r.passed for r in now_),
            "passed_a_day_later": sum(r.passed for r in day),
            "failed_now": [t.name for t, r in zip(tasks, now_, strict=True) if not r.passed],
            "failed_a_day_later": [t.name for t, r in zip(tasks, day, strict=True) if not r.passed],
            "why_a_day_later": {t.name: r.message[:400] for t, r in zip(tasks, day, strict=True) if not r.passed},
        }
    return found


def _print_later(later: dict[str, Any]) -> None:
    for name, how in (("clock_ahead", "reference's runs 2 and 3 on a clock ahead"), ("same_clock", "as before")):
        data = later[name]
        print(
            f"the ground truth under another text, {how}: passed {data['passed_now']} right away, "
            f"{data['passed_a_day_later']} a day later (references made in {data['references_s']:.1f} s, "
            f"{data['nondeterministic']} with nondeterministic fields); "
            f"failed a day later: {data['failed_a_day_later']}"
        )


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
    parser.add_argument("--attempts-only", action="store_true", help="only measurement 6")
    parser.add_argument("--clock-only", action="store_true", help="only measurement 7")
    args = parser.parse_args()
    tasks = [t for t in load_tasks(args.tasks) if isinstance(t, FunctionTask)]
    if args.attempts_only:
        measurement_only(
            "repost_eval_attempts",
            "attempts_on_tasks_preloaded_apart",
            apart_attempts,
            _print_attempts,
            tasks,
            args.env,
            record=not args.no_record,
        )
        return
    if args.clock_only:
        measurement_only(
            "repost_eval_clock", "judged_later", judged_later, _print_later, tasks, args.env, record=not args.no_record
        )
        return
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
    attempts = apart_attempts(tasks, args.env)
    later = judged_later(tasks, args.env)
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
        "attempts_on_tasks_preloaded_apart": attempts,
        "judged_later": later,
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
    _print_attempts(attempts)
    _print_later(later)
    if not args.no_record:
        print(f"recorded in {append_record('repost_eval', record)}")


if __name__ == "__main__":
    main()
