"""How large a run the viewer handles: ``gym-repost report`` on a synthetic run of 5,000
episodes, and how long Chromium takes to load its pages.

The run is written as ``gym-repost eval`` writes one (``RunDir``): 1,000 tasks named like
HumanEval's (``Synth/0`` .. ``Synth/999``), 5 samples each, 2 repairs, each episode a
transcript of six steps (the task prompt; per step a model's reply with its reasoning and
tool call; two code versions of ~30 lines, a failing ``run_tests`` with an assertion,
submissions), about the size real LLM episodes have. Timed: writing the report
(every page), and loading the overview (5,000 episode rows) and one trajectory page in
headless Chromium (``--dump-dom``, which returns once the page has loaded and its script
ran), each against a blank page loaded the same way in the same run; the difference is
the page's own load.

Usage::

    python benchmarks/viewer.py [--tasks 1000] [--samples 5] [--loads 3]

Appends a record to ``benchmarks/results/viewer.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, machine, now
from gym_repost.evaluate import Episode, RunConfig, RunDir, Trajectory
from gym_repost.evaluate.viewer import write_report


def _code(task: int, version: int) -> str:
    body = "\n".join(f"    total += values[{i}] * {version + i}  # step {i}" for i in range(26))
    return f"def solve_{task}(values):\n    total = 0\n{body}\n    return total\n"


def _trajectory(task: int, passed: bool) -> Trajectory:
    report = {
        "passed": False,
        "status": "failed",
        "exception": "AssertionError",
        "message": "",
        "assertion": {"source": f"assert solve_{task}([1, 2]) == 7", "left": "5", "right": "7"},
    }
    observation = "Tests failed: AssertionError\n" + "  traceback line\n" * 60

    def step(number: int, tool: str, args: dict[str, Any], obs: str, **extra: Any) -> dict[str, Any]:
        reply = {
            "role": "assistant",
            "content": f"Step {number}: " + "I reason about what to do next. " * 20,
            "tool_calls": [{"id": f"c{number}", "name": tool, "arguments": json.dumps(args)}],
            "tokens_in": 900,
            "tokens_out": 120,
            "seconds": 2.5,
        }
        result = [{"role": "tool", "content": "", "tool_call_id": f"c{number - 1}", "observation_of_step": number - 1}]
        return {"action": {"tool": tool, "args": args}, "reward": 0.0, "tool": tool, "ok": True,
                "tokens": {"input": 900, "output": 120}, "messages": (result if number > 1 else []) + [reply],
                "observation": obs, "seconds": {"policy": 2.5, "env": 0.4}, **extra}  # fmt: skip

    prompt = f"# Task: write `solve_{task}`\n\n" + "The statement, the signature and the docstring.\n" * 60
    reset = {
        "observation": prompt,
        "messages": [{"role": "system", "content": "You are an expert Python engineer.\n" * 40},
                     {"role": "user", "content": "", "observation_of_step": 0}],
        "seconds": {"env": 0.05, "policy": 0.01},
    }  # fmt: skip
    return Trajectory(
        [
            step(1, "read_file", {"path": f"pkg/mod_{task}.py"}, "x = 1\n" * 200),
            step(2, "write_code", {"code": _code(task, 1)}, "Code saved (30 lines)."),
            step(3, "run_tests", {}, observation, test_report=report),
            step(4, "write_code", {"code": _code(task, 2)}, "Code saved (30 lines)."),
            step(5, "submit", {}, "Submission failed." if not passed else "Submission accepted.", test_report=report),
            step(6, "submit", {}, "Submission accepted." if passed else "Submission failed.", test_report=report),
        ],
        reset=reset,
    )


def synthetic_run(path: Path, tasks: int, samples: int) -> int:
    """Write a run directory of ``tasks`` x ``samples`` episodes; the number written."""
    rd = RunDir(path)
    rd.prepare(RunConfig(tasks="synthetic.jsonl", tasks_digest="synthetic", policy="synthetic", n=samples, repairs=2))
    for task in range(tasks):
        for sample in range(samples):
            passed = (task + sample) % 3 != 0
            infra = (task * samples + sample) % 97 == 0
            episode = Episode(
                task_id=f"t{task}",
                task_name=f"Synth/{task}",
                sample=sample,
                seed=sample,
                policy="synthetic",
                status="infra_error" if infra else "passed" if passed else "failed",
                submissions=[False, passed],
                test_runs=[False, False, passed],
                solved_at=1 if passed else None,
                steps=6,
                reward=1.0 if passed else 0.0,
                code=_code(task, 2),
                final_report=None if passed else {"passed": False, "status": "failed", "exception": "AssertionError"},
                infra_error="SandboxError: worker died" if infra else None,
                stats={"input_tokens": 5400, "output_tokens": 720},
                started_at=f"2026-11-26T10:{(task // 60) % 60:02d}:{task % 60:02d}+00:00",
                seconds=3.5,
            )
            rd.append(episode, _trajectory(task, passed))
    return tasks * samples


def _load_seconds(chromium: str, url: str, profile: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", "--dump-dom", url],
        capture_output=True,
        check=True,
        timeout=300,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--loads", type=int, default=3, help="Chromium loads per page (median)")
    args = parser.parse_args()
    record: dict[str, Any] = {"benchmark": "viewer", "date": now(), "machine": machine()}
    with tempfile.TemporaryDirectory(prefix="gym-repost-viewer-") as tmp:
        run = Path(tmp) / "run"
        record["episodes"] = synthetic_run(run, args.tasks, args.samples)
        record["run_dir_mb"] = round(sum(f.stat().st_size for f in run.iterdir()) / 1e6, 1)
        started = time.perf_counter()
        index = write_report([run], run / "report")
        record["generate_s"] = round(time.perf_counter() - started, 2)
        record["overview_mb"] = round(index.stat().st_size / 1e6, 2)
        record["report_mb"] = round(sum(f.stat().st_size for f in (run / "report").rglob("*") if f.is_file()) / 1e6, 1)
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is not None:
            blank = Path(tmp) / "blank.html"
            blank.write_text("<!doctype html><title>blank</title>")
            pages = {"blank": blank, "overview": index, "episode": run / "report" / "episodes" / "0.html"}
            loads = {
                name: statistics.median(
                    _load_seconds(chromium, page.as_uri(), Path(tmp) / f"profile-{name}-{i}") for i in range(args.loads)
                )
                for name, page in pages.items()
            }
            record["chromium_load_s"] = {name: round(v, 2) for name, v in loads.items()}
            record["overview_load_s"] = round(loads["overview"] - loads["blank"], 2)
            record["episode_load_s"] = round(loads["episode"] - loads["blank"], 2)
    record["machine"]["load_average_after"] = machine()["load_average"]
    out = append_record("viewer", record)
    print({k: v for k, v in record.items() if k != "machine"}, "load", record["machine"]["load_average"])
    print(f"recorded in {out}")


if __name__ == "__main__":
    main()
