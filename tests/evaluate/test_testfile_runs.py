"""The runner on test-file tasks: oracle, mutant and scripted policies, mixed task sets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from testfile_tasks import tiny_testfile_task  # noqa: F401 - a fixture

from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.evaluate.viewer import write_report
from gym_repost.policy import load_policy
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, TestFileTask


def _config(tasks: list, policy: str, **kw: object) -> RunConfig:
    return RunConfig(tasks="mem", tasks_digest=tasks_digest(tasks), policy=policy, **kw)  # type: ignore[arg-type]


def test_oracle_passes_and_mutant_fails_on_a_mixed_task_set(
    tmp_path: Path,
    tiny_testfile_task: TestFileTask,  # noqa: F811
    function_task: FunctionTask,
    sandbox: Sandbox,
) -> None:
    tasks = [tiny_testfile_task, function_task]
    summary = evaluate(tasks, load_policy("oracle"), _config(tasks, "oracle"), RunDir(tmp_path / "o"), sandbox)
    assert summary["pass@1"] == 1.0 and summary["infra_errors"] == 0
    episode = next(e for e in RunDir(tmp_path / "o").episodes() if e.task_id == tiny_testfile_task.id)
    assert episode.reward == pytest.approx(1.0) and episode.code == tiny_testfile_task.ground_truth
    assert episode.final_report is not None and episode.final_report["status"] == "passed"

    summary = evaluate(
        tasks, load_policy("mutant"), _config(tasks, "mutant", repairs=1), RunDir(tmp_path / "m"), sandbox
    )
    assert summary["pass@1"] == 0.0 and summary["self_repair"] == {"0": 0.0, "1": 0.0}
    episode = next(e for e in RunDir(tmp_path / "m").episodes() if e.task_id == tiny_testfile_task.id)
    assert episode.submissions == [False, False] and 0.0 < episode.reward < 0.9


def test_scripted_policy_writes_tests(
    tmp_path: Path,
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
) -> None:
    weak = "from tinypkg.core import clamp\n\n\ndef test_clamp():\n    assert clamp(5) == 5\n"
    script = tmp_path / "script.jsonl"
    script.write_text(
        json.dumps(
            {
                "task": "*",
                "actions": [
                    {"tool": "read_file", "args": {"path": "tinypkg/core.py"}},
                    {"tool": "write_tests", "args": {"code": weak}},
                    {"tool": "run_tests", "args": {}},
                ],
            }
        )
        + "\n"
    )
    tasks = [tiny_testfile_task]
    factory = load_policy(f"scripted:{script}")
    summary = evaluate(tasks, factory, _config(tasks, factory.spec), RunDir(tmp_path / "s"), sandbox)
    (episode,) = RunDir(tmp_path / "s").episodes()
    assert summary["pass@1"] == 0.0 and episode.status == "failed" and 0.0 < episode.reward < 0.5
    assert episode.steps == 4 and episode.code == weak

    # its report renders (a test-file report has no assertion, and passing tests can fail the bar)
    write_report([tmp_path / "s"], tmp_path / "report")
    page = (tmp_path / "report" / "episodes" / "0.html").read_text()
    assert "# Task: write the tests of `tinypkg/core.py`" in page and "write_tests" in page
    assert re.search(r"tests passed, reward 0\.\d{3} below the bar", page)
    assert "<th>mutation score</th>" in page and "<th>line coverage</th>" in page
    assert '<span class="add">+def test_clamp():</span>' in page
    assert "below the bar: reward 0." in (tmp_path / "report" / "rows.js").read_text()
