"""Latency of one sandboxed ``python3 script.py`` run: warm sandbox vs. cold vs. a bare
subprocess.

Three ways to run the same small evaluation script (a HumanEval-style function and eight
assert-based tests):

* ``subprocess``: ``python3 script.py`` in a fresh process, no isolation at all (the
  script is written once; only the interpreter start and the run are timed);
* ``warm``: ``LocalSandbox(warm=True)``: fork of a pre-started interpreter, namespaces,
  rlimits, fresh directory, unprivileged user; runs back to back (the worst case: the
  worker's clean-up of one run delays the next);
* ``warm_paced``: the same with a pause between runs (not timed), like an agent that
  thinks between two test runs: the worker prepares the next run in the pause;
* ``cold``: ``LocalSandbox(warm=False)``: a fresh worker and a fresh interpreter per run,
  with the same isolation.

Prints medians, p90s and ratios, and appends a JSON record (with machine information) to
``benchmarks/results/sandbox_latency.jsonl``.

Usage::

    python benchmarks/sandbox_latency.py [--runs 300] [--baseline-runs 60] [--cold-runs 40]
        [--python /usr/bin/python3]

``--python`` measures another interpreter (for the subprocess and inside the sandbox):
the bare-subprocess time is mostly interpreter start-up, which ``site`` hooks (``.pth``
files) can inflate a lot.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, summary
from gym_repost.sandbox.config import LocalSandboxConfig
from gym_repost.sandbox.local import LocalSandbox

RESULTS = Path(__file__).resolve().parent / "results" / "sandbox_latency.jsonl"

WORKLOAD = '''\
def has_close_elements(numbers, threshold):
    """True when two numbers of the list are closer to each other than threshold."""
    ordered = sorted(numbers)
    return any(b - a < threshold for a, b in zip(ordered, ordered[1:]))


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) is True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) is False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) is True
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.8) is False
    assert candidate([1.0, 2.0, 3.0, 4.0, 5.0, 2.0], 0.1) is True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) is True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 0.5) is False
    assert candidate([], 1.0) is False


check(has_close_elements)
print("ALL TESTS PASSED")
'''
EXPECTED = "ALL TESTS PASSED\n"
# What the sandbox gives every run; the bare subprocess gets the same.
RUN_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "LANG": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def measure(run: Callable[[], str], runs: int, warmup: int, pause: float = 0.0) -> list[float]:
    """Wall-clock seconds of ``runs`` calls (after ``warmup`` untimed ones)."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        time.sleep(pause)
        started = time.perf_counter()
        output = run()
        times.append(time.perf_counter() - started)
        if output != EXPECTED:
            raise RuntimeError(f"unexpected output: {output!r}")
    return times


def bare_subprocess(directory: str, python: str) -> Callable[[], str]:
    script = os.path.join(directory, "script.py")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(WORKLOAD)
    env = {**RUN_ENV, "HOME": directory, "TMPDIR": directory}

    def run() -> str:
        done = subprocess.run(
            [python, script], cwd=directory, env=env, check=False, capture_output=True, text=True, timeout=60
        )
        return done.stdout

    return run


def sandboxed(sandbox: LocalSandbox) -> Callable[[], str]:
    def run() -> str:
        return sandbox.run({"script.py": WORKLOAD}, ["python3", "script.py"], timeout=60).stdout

    return run


def check_isolation(sandbox: LocalSandbox) -> dict[str, object]:
    """Show that the measured sandbox is really isolated (user, network, file system)."""
    probe = (
        "import os, socket\nuid = os.getuid()\n"
        "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n    net = True\n"
        "except OSError:\n    net = False\n"
        "try:\n    open('/usr/gym-repost-probe', 'w')\n    ro = False\n"
        "except OSError:\n    ro = True\nprint(uid, net, ro)"
    )
    result = sandbox.run({}, ["python3", "-c", probe], timeout=30)
    uid, network, read_only = result.stdout.split()
    isolated = uid != "0" and network == "False" and read_only == "True"
    if sandbox.config.isolation == "namespaces" and not isolated:
        raise RuntimeError(f"the sandbox is not isolated: {result}")
    return {"uid": int(uid), "network": network == "True", "read_only_root": read_only == "True"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="timed warm runs")
    parser.add_argument("--baseline-runs", type=int, default=60, help="timed subprocess runs")
    parser.add_argument("--cold-runs", type=int, default=40, help="timed cold runs")
    parser.add_argument("--pause-ms", type=float, default=5.0, help="pause of warm_paced")
    parser.add_argument("--python", default=None, help="interpreter (default: this one)")
    parser.add_argument("--no-record", action="store_true", help="do not append to the results")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as directory:
        baseline = summary(measure(bare_subprocess(directory, args.python or sys.executable), args.baseline_runs, 5))
    sandbox = LocalSandbox(LocalSandboxConfig(warm=True, python=args.python))
    with sandbox:
        isolation = check_isolation(sandbox)
        described = sandbox.describe()
        warm = summary(measure(sandboxed(sandbox), args.runs, 20))
        paced = summary(measure(sandboxed(sandbox), args.runs, 5, args.pause_ms / 1000))
    sandbox = LocalSandbox(LocalSandboxConfig(warm=False, python=args.python))
    with sandbox:
        cold = summary(measure(sandboxed(sandbox), args.cold_runs, 3))

    record: dict[str, Any] = {
        "benchmark": "sandbox_latency",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "sandbox": described,
        "interpreter": args.python or sys.executable,
        "isolation_probe": isolation,
        "workload": "HumanEval-style function + 8 asserts",
        "subprocess": baseline,
        "warm": warm,
        "warm_paced": paced,
        "cold": cold,
        "pause_ms": args.pause_ms,
        "speedup_warm_vs_subprocess": baseline["median_ms"] / warm["median_ms"],
        "speedup_warm_paced_vs_subprocess": baseline["median_ms"] / paced["median_ms"],
        "speedup_warm_vs_cold": cold["median_ms"] / warm["median_ms"],
    }
    report(record)
    if not args.no_record:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        with RESULTS.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        print(f"\nappended to {RESULTS}")


def report(record: dict[str, Any]) -> None:
    info = record["machine"]
    print(
        f"machine: {info['cpu_model']} x{info['cores']}, kernel {info['kernel']}, "
        f"load {info['load_average']}; interpreter {record['interpreter']} "
        f"({record['sandbox']['python_version']})"
    )
    print(f"{'mode':<12}{'runs':>6}{'median ms':>12}{'p90 ms':>10}{'mean ms':>10}{'min ms':>9}")
    for mode in ("subprocess", "warm", "warm_paced", "cold"):
        row = record[mode]
        print(
            f"{mode:<12}{row['runs']:>6}{row['median_ms']:>12.2f}{row['p90_ms']:>10.2f}"
            f"{row['mean_ms']:>10.2f}{row['min_ms']:>9.2f}"
        )
    print(
        f"warm is {record['speedup_warm_vs_subprocess']:.1f}x faster than a bare subprocess "
        f"({record['speedup_warm_paced_vs_subprocess']:.1f}x paced) and "
        f"{record['speedup_warm_vs_cold']:.1f}x faster than a cold sandbox"
    )


if __name__ == "__main__":
    main()
