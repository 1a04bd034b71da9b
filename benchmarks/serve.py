"""The cost of serving: steps over ``gym-repost serve`` against in-process ``env.step``.

The same episodes, two ways, in one run (rounds alternate the ways, so that the machine's
load falls on both alike):

* ``in_process``: ``make_task_env(task, sandbox=...)`` and ``env.step(action)`` on threads
  of this process (one per session), on a local sandbox of ``--workers`` warm workers;
* ``served``: ``gym-repost serve`` in a subprocess (same sandbox settings), driven by
  OpenEnv's ``GenericEnvClient`` (async, one connection per session) over loopback.

Two actions: ``read_file`` (no sandbox run: the protocol's own cost shows) and
``run_tests`` (one sandbox run of a passing candidate per step), each with 1, 8 and 16
sessions at once (``--sessions``). A step's latency is timed by the caller (the client, for ``served``).
Prints steps per second, p50 and p99 latency and the served/in-process ratios; appends a
record with the machine, its load before and after, and the date to
``benchmarks/results/serve.jsonl``.

Usage::

    python benchmarks/serve.py [--steps 120] [--rounds 2] [--workers 2] [--sessions 1,8,16]
                               [--tools read_file,run_tests] [--no-record]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, machine, now, start_serve
from gym_repost.env import make_task_env
from gym_repost.sandbox import get_sandbox
from gym_repost.serve import load_openenv
from gym_repost.task import load_tasks

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "tasks" / "demo.jsonl"
MAX_STEPS = 1_000_000
RELEASE = [0.0]
"""When the timed phase began (the sessions' barrier released)."""


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(timed: list[tuple[float, list[float]]], host_cpu: float, all_steps: int) -> dict[str, float]:
    """Steps per second over the timed phase (every session set up, then released together:
    from the release to the last step's end), latency percentiles and mean, and the CPU time
    the host's Python processes spent per step (this process; the server's too, when served;
    setup steps included in ``all_steps``; the sandbox's workers are not counted)."""
    ordered = sorted(t for _, mine in timed for t in mine)
    wall = max(end for end, _ in timed) - RELEASE[0]
    return {
        "steps": len(ordered),
        "steps_per_s": len(ordered) / wall,
        "p50_ms": 1000 * percentile(ordered, 0.5),
        "p99_ms": 1000 * percentile(ordered, 0.99),
        "mean_ms": 1000 * sum(ordered) / len(ordered),
        "host_cpu_ms_per_step": 1000 * host_cpu / all_steps,
    }


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def episode_actions(task: Any, tool: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The untimed setup actions of a session, and the timed action."""
    if tool == "read_file":
        return [], {"tool": "read_file", "args": {"path": task.repository.target_file}}
    # not the ground truth's exact text: the harness may recognise that and skip the run
    code = task.ground_truth + "\n# a passing candidate\n"
    return [{"tool": "write_code", "args": {"code": code}}], {"tool": "run_tests", "args": {}}


def in_process(tasks: list[Any], sandbox: Any, tool: str, sessions: int, steps: int) -> dict[str, float]:
    timed: list[tuple[float, list[float]]] = []
    barrier = threading.Barrier(sessions, action=lambda: RELEASE.__setitem__(0, time.perf_counter()))

    def session(task: Any) -> None:
        env = make_task_env(task, sandbox=sandbox, max_steps=MAX_STEPS, max_submissions=1)
        env.reset(seed=0)
        setup, action = episode_actions(task, tool)
        for step in [*setup, action]:
            env.step(step)  # and one untimed step to warm up
        barrier.wait()
        mine = []
        for _ in range(steps):
            start = time.perf_counter()
            env.step(action)
            mine.append(time.perf_counter() - start)
        timed.append((time.perf_counter(), mine))
        env.close()

    threads = [threading.Thread(target=session, args=(tasks[i % len(tasks)],)) for i in range(sessions)]
    cpu = time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    setup = len(episode_actions(tasks[0], tool)[0]) + 1
    return figures(timed, time.process_time() - cpu, sessions * (steps + setup))


def served(url: str, pid: int, tasks: list[Any], tool: str, sessions: int, steps: int) -> dict[str, float]:
    client_class = load_openenv().GenericEnvClient

    async def session(task: Any, barrier: asyncio.Barrier) -> tuple[float, list[float]]:
        async with client_class(base_url=url, message_timeout_s=600) as client:
            await client.reset(task_id=task.id, seed=0)
            setup, action = episode_actions(task, tool)
            for step in [*setup, action]:
                await client.step(step)
            if await barrier.wait() == 0:
                RELEASE[0] = time.perf_counter()
            mine = []
            for _ in range(steps):
                start = time.perf_counter()
                await client.step(action)
                mine.append(time.perf_counter() - start)
            return time.perf_counter(), mine

    async def everyone() -> list[tuple[float, list[float]]]:
        barrier = asyncio.Barrier(sessions)
        return await asyncio.gather(*(session(tasks[i % len(tasks)], barrier) for i in range(sessions)))

    cpu = time.process_time() + process_cpu(pid)
    timed = asyncio.run(everyone())
    setup = len(episode_actions(tasks[0], tool)[0]) + 1
    return figures(timed, time.process_time() + process_cpu(pid) - cpu, sessions * (steps + setup))


def start_server(workers: int) -> tuple[subprocess.Popen[str], str]:
    return start_serve(TASKS, "--max-sessions", "64", "--workers", str(workers), "--max-steps", str(MAX_STEPS))


def merge(runs: list[dict[str, float]], walls: Callable[[dict[str, float]], float]) -> dict[str, float]:
    """Rounds of one way together: steps/s over all rounds, the worst round's p99 and the
    median round's p50, the mean over all steps, the rounds' mean host CPU per step (rounds
    are few; latencies are kept per round)."""
    steps = sum(r["steps"] for r in runs)
    return {
        "steps": steps,
        "steps_per_s": steps / sum(walls(r) for r in runs),
        "p50_ms": sorted(r["p50_ms"] for r in runs)[len(runs) // 2],
        "p99_ms": max(r["p99_ms"] for r in runs),
        "mean_ms": sum(r["mean_ms"] * r["steps"] for r in runs) / steps,
        "host_cpu_ms_per_step": sum(r["host_cpu_ms_per_step"] for r in runs) / len(runs),
    }


def measure(options: argparse.Namespace) -> dict[str, Any]:
    tasks = list(load_tasks(TASKS))
    results: dict[str, Any] = {}
    process, url = start_server(options.workers)
    try:
        with get_sandbox("local", workers=options.workers) as sandbox:
            for tool in options.tools:
                for sessions in options.sessions:
                    steps = options.steps if tool == "read_file" else options.steps // 4  # a run costs more
                    steps = max(1, steps if sessions == 1 else steps // 4)
                    ways: dict[str, list[dict[str, float]]] = {"in_process": [], "served": []}
                    for _ in range(options.rounds):
                        ways["in_process"].append(in_process(tasks, sandbox, tool, sessions, steps))
                        ways["served"].append(served(url, process.pid, tasks, tool, sessions, steps))
                    merged = {k: merge(v, lambda r: r["steps"] / r["steps_per_s"]) for k, v in ways.items()}
                    merged["overhead_p50"] = merged["served"]["p50_ms"] / merged["in_process"]["p50_ms"]
                    merged["overhead_p99"] = merged["served"]["p99_ms"] / merged["in_process"]["p99_ms"]
                    merged["overhead_mean"] = merged["served"]["mean_ms"] / merged["in_process"]["mean_ms"]
                    merged["throughput_ratio"] = merged["served"]["steps_per_s"] / merged["in_process"]["steps_per_s"]
                    results[f"{tool}/{sessions}"] = merged
                    report(tool, sessions, merged)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    return results


def report(tool: str, sessions: int, merged: dict[str, Any]) -> None:
    for way in ("in_process", "served"):
        f = merged[way]
        print(
            f"{tool:9} x{sessions:<2} {way:10} {f['steps']:5d} steps {f['steps_per_s']:8.1f} steps/s "
            f"p50 {f['p50_ms']:7.2f} ms p99 {f['p99_ms']:7.2f} ms mean {f['mean_ms']:7.2f} ms "
            f"host CPU {f['host_cpu_ms_per_step']:5.2f} ms/step"
        )
    print(
        f"{'':13} served/in-process: p50 x{merged['overhead_p50']:.2f}, p99 x{merged['overhead_p99']:.2f}, "
        f"mean x{merged['overhead_mean']:.2f}, "
        f"throughput x{merged['throughput_ratio']:.2f}"
    )


def _ints(value: str) -> list[int]:
    return [int(v) for v in value.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=120, help="Timed read_file steps of one session.")
    parser.add_argument("--rounds", type=int, default=2, help="Rounds alternating the two ways.")
    parser.add_argument("--workers", type=int, default=2, help="Warm sandbox workers (both ways).")
    parser.add_argument("--sessions", type=_ints, default=[1, 8, 16], help="Sessions at once, comma-separated.")
    parser.add_argument("--tools", type=lambda v: v.split(","), default=["read_file", "run_tests"], help="Steps timed.")
    parser.add_argument("--no-record", action="store_true", help="Print only.")
    options = parser.parse_args()
    record: dict[str, Any] = {"date": now(), "machine": machine()}
    record.update(
        benchmark="serve",
        tasks=str(TASKS.relative_to(ROOT)),
        workers=options.workers,
        rounds=options.rounds,
        steps=options.steps,
        sessions=options.sessions,
        results=measure(options),
        load_average_after=machine()["load_average"],
    )
    if not options.no_record:
        print(f"appended to {append_record('serve', record)}")


if __name__ == "__main__":
    main()
