"""Per-evaluation cost of the docker sandbox's warm pool against raw Docker commands.

The same evaluation, timed five ways in one run (rounds interleave the ways, so that the
machine's load falls on all of them alike):

* ``pool``: ``DockerSandbox(workers=1).run(files, command, stdin=...)``: a fresh working
  directory with the files, rlimits, ``timeout --kill-after``, output capture, and the
  clean-up of processes and scratch space after the run;
* ``exec_sdk``: a raw exec of the same command through the Docker SDK (create, start,
  read the streams, inspect the exit code) in a container of the same image and cgroup
  limits, the files already in place: the floor of any exec-based pool;
* ``exec_cli``: ``docker exec [-i] CONTAINER python3 ...`` (the CLI), same container;
* ``run_rm``: ``docker run --rm -i --network none IMAGE ...`` per evaluation (the script
  comes in on stdin: a fresh container has no files);
* ``in_container``: the command alone, timed inside the container (no Docker at all).

Two workloads: a HumanEval-style script (one file, ``python3 script.py``), and a real
HumanEval evaluation through the harness (``python3 _gym_repost_harness.py`` with its
configuration and the token on stdin). Prints medians and ratios; appends a record with the
machine and the date to ``benchmarks/results/docker_overhead.jsonl``.

Usage::

    python benchmarks/docker_overhead.py [--runs 100] [--run-rm-runs 20] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, machine, now, summary
from benchmarks.sandbox_latency import EXPECTED, WORKLOAD
from gym_repost.harness import HARNESS_NAME, SCRIPT_NAME, assemble, harness_files
from gym_repost.sandbox.config import DockerSandboxConfig
from gym_repost.sandbox.docker import _REAPER, IMAGE_PYTHON, ROLE_LABEL, DockerSandbox
from gym_repost.sandbox.docker_containers import LABEL, OWNER_LABEL, owner_identity
from gym_repost.sandbox.programs import program_stdin
from gym_repost.task import FunctionTask

ROOT = Path(__file__).resolve().parents[1]
BASELINE_DIR = "/tmp/bench"
RUN_ENV = {"LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
"""What the pool gives every run (no bytecode written): the raw execs get the same."""


class Workload:
    """One evaluation: its files, its command, its stdin, and how to recognise success."""

    def __init__(
        self, name: str, files: dict[str, str], argv: list[str], stdin: str | None, expect: Callable[[str], bool]
    ) -> None:
        self.name, self.files, self.argv, self.stdin, self.expect = name, files, argv, stdin, expect

    def placed_argv(self) -> list[str]:
        """The command with paths into the baseline container's copy of the files."""
        return [IMAGE_PYTHON, *(f"{BASELINE_DIR}/{a}" if a in self.files else a for a in self.argv[1:])]


def workloads() -> list[Workload]:
    from gym_repost.construct.importers.humaneval import import_humaneval

    task = next(t for t in import_humaneval() if isinstance(t, FunctionTask))
    assembled = assemble(task, task.ground_truth)
    token = secrets.token_hex(16)
    files = {**task.evaluation.files, SCRIPT_NAME: assembled.script, **harness_files()}
    config = {
        "script": SCRIPT_NAME,
        "start": assembled.start_line,
        "end": assembled.end_line,
        "mode": "driver",
        "inputs": None,
    }
    return [
        Workload("script", {"script.py": WORKLOAD}, ["python3", "script.py"], None, lambda out: out == EXPECTED),
        Workload(
            f"harness:{task.name}",
            files,
            ["python3", HARNESS_NAME],
            program_stdin(config, token),
            lambda out: out.rstrip().endswith(token),
        ),
    ]


def baseline_container(client: Any, image: str, config: DockerSandboxConfig) -> Any:
    """A container of the same image and cgroup limits as the pool's, with a writable /tmp."""
    memory = f"{config.memory_limit_mb or config.memory_mb + 512}m"
    return client.containers.run(
        image,
        command=["/usr/bin/python3", "-I", "-S", "-c", _REAPER],
        detach=True,
        network_mode="none",
        mem_limit=memory,
        memswap_limit=memory,
        nano_cpus=int(config.cpus * 1e9),
        tmpfs={"/tmp": "rw,exec,size=256m,mode=1777"},
        labels={LABEL: "1", OWNER_LABEL: owner_identity(), ROLE_LABEL: "benchmark"},
        user="65534:65534",
    )


def place_files(client: Any, container: Any, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = f"{BASELINE_DIR}/{name}"
        command = ["sh", "-c", f"mkdir -p $(dirname {path}) && cat > {path}"]
        exec_id = client.api.exec_create(container.id, command, stdin=True)["Id"]
        sock = client.api.exec_start(exec_id, socket=True)
        raw = getattr(sock, "_sock", sock)
        raw.sendall(content.encode())
        raw.shutdown(socket.SHUT_WR)
        while raw.recv(65536):
            pass
        raw.close()


def sdk_exec(client: Any, container_id: str, argv: list[str], stdin: str | None) -> str:
    """A raw exec through the SDK: create, start, read stdout, inspect the exit code."""
    api = client.api
    exec_id = api.exec_create(container_id, argv, stdin=True, workdir=BASELINE_DIR, environment=RUN_ENV)["Id"]
    sock = api.exec_start(exec_id, socket=True)
    raw = getattr(sock, "_sock", sock)
    raw.sendall((stdin or "").encode())
    raw.shutdown(socket.SHUT_WR)
    data = bytearray()
    while chunk := raw.recv(65536):
        data += chunk
    raw.close()
    out, view = bytearray(), memoryview(data)
    while len(view) >= 8:
        size = int.from_bytes(view[4:8], "big")
        if view[0] == 1:
            out += view[8 : 8 + size]
        view = view[8 + size :]
    if api.exec_inspect(exec_id)["ExitCode"] != 0:
        raise RuntimeError(f"raw exec failed: {out.decode(errors='replace')}")
    return out.decode()


def cli(argv: list[str], stdin: str | None) -> str:
    done = subprocess.run(argv, input=stdin or "", capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed: {done.stderr[-500:]}")
    return done.stdout


def in_container_seconds(client: Any, container_id: str, work: Workload, runs: int) -> list[float]:
    """The command alone, timed inside the container by a Python loop."""
    timer = (
        "import json, subprocess, sys, time\nargv, stdin = json.loads(sys.argv[1]), sys.argv[2]\n"
        "times = []\nfor _ in range(int(sys.argv[3])):\n    t = time.perf_counter()\n"
        "    subprocess.run(argv, input=stdin.encode(), capture_output=True, check=True)\n"
        "    times.append(time.perf_counter() - t)\nprint(json.dumps(times))\n"
    )
    out = sdk_exec(
        client,
        container_id,
        [IMAGE_PYTHON, "-c", timer, json.dumps(work.placed_argv()), work.stdin or "", str(runs)],
        None,
    )
    return list(json.loads(out))


def timed(call: Callable[[], str], expect: Callable[[str], bool], into: list[float]) -> None:
    started = time.perf_counter()
    output = call()
    into.append(time.perf_counter() - started)
    if not expect(output):
        raise RuntimeError(f"unexpected output: {output[-300:]!r}")


def measure(
    sandbox: DockerSandbox, container: Any, image: str, work: Workload, runs: int, rm_runs: int
) -> dict[str, list[float]]:
    client = sandbox._client
    env_flags = [flag for k, v in RUN_ENV.items() for flag in ("-e", f"{k}={v}")]
    ways: dict[str, Callable[[], str]] = {
        "pool": lambda: sandbox.run(work.files, work.argv, timeout=60, stdin=work.stdin).stdout,
        "exec_sdk": lambda: sdk_exec(client, container.id, work.placed_argv(), work.stdin),
        "exec_cli": lambda: cli(
            ["docker", "exec", "-i", "-w", BASELINE_DIR, *env_flags, container.id, *work.placed_argv()], work.stdin
        ),
    }
    script = "\n".join(
        f"mkdir -p $(dirname {BASELINE_DIR}/{n}); cat > {BASELINE_DIR}/{n} <<'GYMEOF'\n{c}\nGYMEOF"
        for n, c in work.files.items()
    )
    run_rm = [
        "docker",
        "run",
        "--rm",
        "-i",
        "--network",
        "none",
        "--user",
        "65534:65534",
        *env_flags,
        "--tmpfs",
        "/tmp:rw,exec,mode=1777",
        image,
        "sh",
        "-c",
        f"{script}\ncd {BASELINE_DIR} && exec {' '.join(work.placed_argv())}",
    ]
    times: dict[str, list[float]] = {name: [] for name in [*ways, "run_rm"]}
    for call in ways.values():  # warm-up
        call()
    for round_number in range(runs):
        for name, call in ways.items():
            timed(call, work.expect, times[name])
        if round_number < rm_runs:
            timed(lambda: cli(run_rm, work.stdin), work.expect, times["run_rm"])
    times["in_container"] = in_container_seconds(client, container.id, work, runs)
    return times


def ratios(stats: dict[str, dict[str, float]]) -> dict[str, float]:
    median = {name: s["median_ms"] for name, s in stats.items()}
    script = median["in_container"]
    return {
        "pool_vs_exec_sdk": median["pool"] / median["exec_sdk"],
        "pool_vs_exec_cli": median["pool"] / median["exec_cli"],
        "run_rm_vs_pool": median["run_rm"] / median["pool"],
        "pool_overhead_vs_exec_sdk_overhead": (median["pool"] - script) / (median["exec_sdk"] - script),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="timed rounds (pool and execs)")
    parser.add_argument("--run-rm-runs", type=int, default=20, help="timed docker run --rm")
    parser.add_argument("--no-record", action="store_true", help="do not append to the results")
    args = parser.parse_args()

    config = DockerSandboxConfig(workers=1)
    record: dict[str, Any] = {
        "benchmark": "docker_overhead",
        "date": now(),
        "machine": machine(),
        "runs": args.runs,
        "run_rm_runs": args.run_rm_runs,
        "workloads": {},
    }
    with DockerSandbox(config) as sandbox:
        image = str(sandbox.describe()["image"])
        record["sandbox"] = sandbox.describe()
        container = baseline_container(sandbox._client, image, config)
        try:
            for work in workloads():
                place_files(sandbox._client, container, work.files)
                times = measure(sandbox, container, image, work, args.runs, args.run_rm_runs)
                stats = {name: summary(values) for name, values in times.items()}
                record["workloads"][work.name] = {**stats, "ratios": ratios(stats)}
                report(work.name, stats)
        finally:
            container.remove(force=True)
    record["load_average_after"] = machine()["load_average"]
    if not args.no_record:
        print(f"appended to {append_record('docker_overhead', record)}")


def report(name: str, stats: dict[str, dict[str, float]]) -> None:
    print(f"\n== {name}")
    for way, s in stats.items():
        print(f"  {way:13s} median {s['median_ms']:7.1f} ms   p90 {s['p90_ms']:7.1f} ms   ({s['runs']} runs)")
    for key, value in ratios(stats).items():
        print(f"  {key:36s} {value:5.2f}")


if __name__ == "__main__":
    main()
