"""What every benchmark records with its figures: the machine, the date, the load."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, object]:
    """CPU model, cores, kernel, Python and the load average at the time of measuring."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        load: object = os.getloadavg()
    except OSError:
        load = None
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "host_python": sys.version.split()[0],
        "kernel": platform.release(),
        "system": platform.system(),
        "load_average": load,
    }


def checkout() -> dict[str, object]:
    """The commit of this checkout and whether its package's files differ from it (the code
    measured; a benchmark script of a later commit may drive an earlier package)."""
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    modified = bool(git("status", "--porcelain", "--untracked-files=no", "--", "gym_repost"))
    return {"commit": git("rev-parse", "HEAD") or None, "modified": modified}


def now() -> str:
    """The date and time, UTC, ISO 8601."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def summary(times: list[float]) -> dict[str, float]:
    """Median, p90, mean and min of durations in seconds, reported in milliseconds."""
    ordered = sorted(times)
    return {
        "runs": len(times),
        "median_ms": 1000 * statistics.median(ordered),
        "p90_ms": 1000 * ordered[int(0.9 * (len(ordered) - 1))],
        "mean_ms": 1000 * statistics.fmean(ordered),
        "min_ms": 1000 * ordered[0],
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``path``, one a line, in file order; lines that are not one are
    skipped (a report never refuses a results file for them)."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def append_record(name: str, record: dict[str, Any]) -> Path:
    """Append one JSON record to ``benchmarks/results/NAME.jsonl``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{name}.jsonl"
    with out.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return out


def start_serve(tasks: Path, *options: str) -> tuple[subprocess.Popen[str], str]:
    """``gym-repost serve TASKS --port 0 OPTIONS`` of this checkout, started: its process and URL."""
    command = [sys.executable, "-m", "gym_repost.cli", "serve", str(tasks), "--port", "0", *options]
    root = str(Path(__file__).resolve().parents[1])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": root})
    line = process.stdout.readline() if process.stdout else ""
    found = re.search(r"on (http://\S+) ", line)
    if not found:
        process.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return process, found.group(1)
