"""Rejection sampling from real evaluation runs (oracle and mutant policies), with failed
solutions debugged by a repair policy, through the library and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gym_repost.data.rejection import PolicyRepairer, build_rejection, episodes_by_task, load_run
from gym_repost.errors import RunDirError
from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.policy import load_policy
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, save_tasks

ROOT = Path(__file__).resolve().parents[2]

FIX_SCORE = (
    "def score(values, cap=100):\n    return math.floor(sum(clamp(v * SCALE, 0, cap) for v in values if v >= 0))\n"
)

REPAIR_AGENT = textwrap.dedent('''\
    import json

    FIXES = {"score": %r}

    class FixFromReport:
        """Logs what it was shown; writes a known fix when it has one, then submits."""

        def reset(self, task, observation, info, *, seed):
            with open(%r, "a") as fh:
                fh.write(json.dumps({"task": task.target.name, "observation": observation,
                                     "failed_code": info["failed_code"],
                                     "report": info["failure_report"]}) + "\\n")
            fix = FIXES.get(task.target.name)
            self.plan = ([{"tool": "write_code", "args": {"code": fix}}] if fix else []) + [{"tool": "submit"}]

        def act(self, observation, info):
            return self.plan.pop(0) if self.plan else {"tool": "submit"}
    ''')


@pytest.fixture
def runs(tmp_path: Path, function_task: FunctionTask, method_task: FunctionTask, sandbox: Sandbox) -> dict[str, Path]:
    """A task file with a function and a method task; an oracle run and a mutant run, n=2."""
    tasks = [function_task, method_task]
    base = tmp_path / "runs"
    save_tasks(tasks, base / "tasks.jsonl")
    out = {"tasks": base / "tasks.jsonl", "agent": base / "repair_agent.py", "log": base / "repairs.jsonl"}
    out["agent"].write_text(REPAIR_AGENT % (FIX_SCORE, str(out["log"])))
    for policy in ("oracle", "mutant"):
        config = RunConfig(tasks=str(out["tasks"]), tasks_digest=tasks_digest(tasks), policy=policy, n=2)
        evaluate(tasks, load_policy(policy), config, RunDir(base / policy), sandbox)
        out[policy] = base / policy
    return out


def test_passing_solutions_become_sft_records(runs: dict[str, Path]) -> None:
    config, episodes, tasks = load_run(runs["oracle"])
    assert config.policy == "oracle" and len(episodes) == 4 and len(tasks) == 2
    records, summary = build_rejection(episodes_by_task(episodes, tasks), None)
    assert (summary.tasks, summary.solved_before, summary.solved_after) == (2, 2, 2)
    assert summary.passing_samples == 2 and len(records) == 2  # the two samples of a task are equal
    assert {r["origin"] for r in records} == {"sample"} and {r["sample"] for r in records} == {0}
    assert records[0]["messages"][1]["content"].startswith("```python\ndef score(")
    records, _ = build_rejection(episodes_by_task(episodes, tasks), None, dedupe=False)
    assert len(records) == 4


def test_failed_solutions_repaired_from_their_report_are_added_when_they_pass(
    runs: dict[str, Path], sandbox: Sandbox
) -> None:
    _, episodes, tasks = load_run(runs["mutant"])
    repairer = PolicyRepairer(load_policy(f"{runs['agent']}:FixFromReport"), sandbox)
    records, summary = build_rejection(
        episodes_by_task(episodes, tasks),
        sandbox,
        repairer=repairer,
        ground_truth=True,
        fmt="prompt-completion",
        workers=2,
    )
    assert (summary.solved_before, summary.solved_after) == (0, 1)
    assert (summary.failed_samples, summary.repair_attempts, summary.repaired) == (4, 4, 2)
    assert summary.repaired_solutions == 1 and summary.ground_truth == 2 and summary.records == 3
    repaired = [r for r in records if r["origin"] == "repaired"]
    assert len(repaired) == 1 and repaired[0]["completion"] == "```python\n" + FIX_SCORE.rstrip() + "\n```"
    seen = [json.loads(line) for line in runs["log"].read_text().splitlines()]
    assert len(seen) == 4
    failed = {e.code for e in episodes}
    for entry in seen:  # the repairer was shown the failed code and its test report
        assert entry["failed_code"] in failed and entry["failed_code"] in entry["observation"]
        assert entry["report"] in entry["observation"] and "failed the tests" in entry["observation"]
        assert entry["report"].startswith(("Tests failed", "Tests raised an error"))


def test_a_crashing_repair_policy_is_counted_not_fatal(runs: dict[str, Path], sandbox: Sandbox, tmp_path: Path) -> None:
    agent = tmp_path / "broken.py"
    agent.write_text(
        "class Broken:\n    def reset(self, task, observation, info, *, seed):\n"
        "        raise RuntimeError('model down')\n    def act(self, observation, info):\n"
        "        return {}\n"
    )
    _, episodes, tasks = load_run(runs["mutant"])
    repairer = PolicyRepairer(load_policy(f"{agent}:Broken"), sandbox)
    records, summary = build_rejection(episodes_by_task(episodes, tasks), sandbox, repairer=repairer)
    assert summary.repair_errors == 4 and summary.repaired == 0 and records == []


def test_bad_run_directories_are_clear_errors(runs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="no such run directory"):
        load_run(tmp_path / "missing")
    with pytest.raises(RunDirError, match="no config.json"):
        load_run(tmp_path)
    changed = tmp_path / "changed"
    changed.mkdir()
    config = json.loads((runs["oracle"] / "config.json").read_text())
    (changed / "config.json").write_text(json.dumps({**config, "tasks": str(tmp_path / "tasks.jsonl")}))
    with pytest.raises(RunDirError, match="pass the task file with --tasks"):
        load_run(changed)  # the task file named by the run is gone
    (tmp_path / "tasks.jsonl").write_text(runs["tasks"].read_text().splitlines()[0] + "\n")
    with pytest.raises(RunDirError, match="changed since the run"):
        load_run(changed)
    assert len(load_run(changed, tasks_path=runs["tasks"])[2]) == 2


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", "data", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_the_command_line_prints_table_9_and_writes_loadable_sft_data(
    runs: dict[str, Path], tmp_path: Path, load_jsonl: Any
) -> None:
    out = tmp_path / "sft.jsonl"
    result = cli("rejection", str(runs["oracle"]), "-o", str(out), "--format", "prompt-completion")
    assert result.returncode == 0, result.stderr
    assert "before debugging" in result.stdout and "2/2 (100.0%)" in result.stdout
    ds = load_jsonl(out)
    assert len(ds) == 2 and {"prompt", "completion", "task_id", "task_name", "source", "repo"} <= set(ds.column_names)

    out = tmp_path / "debugged.jsonl"
    result = cli(
        "rejection",
        str(runs["mutant"]),
        "-o",
        str(out),
        "--debug-failures",
        "--repair-policy",
        f"{runs['agent']}:FixFromReport",
    )
    assert result.returncode == 0, result.stderr
    assert "0/2 (0.0%)" in result.stdout and "1/2 (50.0%)" in result.stdout
    ds = load_jsonl(out)
    assert len(ds) == 1 and ds[0]["messages"][-1]["role"] == "assistant" and ds[0]["origin"] == "repaired"


def test_the_command_line_rejects_bad_input(tmp_path: Path) -> None:
    result = cli("rejection", str(tmp_path / "nope"), "-o", str(tmp_path / "x.jsonl"))
    assert result.returncode == 2 and "no such run directory" in " ".join(result.stderr.split())
    result = cli("rejection", str(tmp_path), "-o", str(tmp_path / "x.jsonl"))
    assert result.returncode == 2 and "no config.json" in " ".join(result.stderr.split())
    assert not (tmp_path / "x.jsonl").exists()
