"""Policies get a task view, never the answers: what the view holds, who gets the ground truth."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from testfile_tasks import make_testfile_task

from gym_repost.analysis.source import find_function
from gym_repost.errors import ConfigError
from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import run_episode, tasks_digest
from gym_repost.llm.scripted_server import Reply, ScriptedLLMServer
from gym_repost.policy import load_policy
from gym_repost.policy.privileged import reset_policy
from gym_repost.sandbox import Sandbox
from gym_repost.task import (
    Evaluation,
    FunctionTask,
    Target,
    Task,
    TestFileEvaluation,
    TestFileMetrics,
    TestFileTask,
    load_tasks,
)
from gym_repost.task_view import TaskView, task_view

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "tasks" / "demo.jsonl"
HIDDEN_TYPES = (FunctionTask, TestFileTask, Target, Evaluation, TestFileEvaluation, TestFileMetrics)


def view_of(task: Task) -> TaskView:
    return task_view(task, "the statement", max_steps=7, max_submissions=3)


def reachable(obj: Any, seen: set[int] | None = None) -> Iterator[Any]:
    """Every object reachable from ``obj`` through containers, model fields and ``vars``."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, str | bytes | int | float | bool | type(None)):
        return
    if isinstance(obj, dict):
        children: list[Any] = [*obj.keys(), *obj.values()]
    elif isinstance(obj, list | tuple | set | frozenset):
        children = list(obj)
    else:
        children = list(getattr(obj, "__dict__", {}).values())
        if isinstance(obj, BaseModel):
            children += [obj.__pydantic_extra__, obj.__pydantic_private__, obj.model_dump()]
    for child in children:
        yield from reachable(child, seen)


def view_text(view: TaskView) -> str:
    """All text reachable from the view, each line stripped (so indentation cannot hide a copy)."""
    texts = [x for x in reachable(view) if isinstance(x, str)] + [view.model_dump_json()]
    return "\n".join(line.strip() for text in texts for line in text.split("\n"))


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.split("\n") if ln.strip() and not ln.strip().startswith("#")]


def body_windows(task: Task) -> list[str]:
    """The ground truth's body (after signature and docstring) as windows of three lines."""
    source = task.ground_truth
    if isinstance(task, FunctionTask):
        span = find_function(source, task.target.name)
        assert span is not None, task.name
        body = span.node.body[1:] if span.docstring is not None and len(span.node.body) > 1 else span.node.body
        source = "\n".join(source.split("\n")[body[0].lineno - 1 :])
    lines = _lines(source)
    return ["\n".join(lines[i : i + 3]) for i in range(max(1, len(lines) - 2))]


def assert_no_answers(task: Task, view: TaskView) -> None:
    text = view_text(view)
    for window in body_windows(task):
        assert window not in text, (task.name, window)
    if isinstance(task, FunctionTask):
        visible_doc = task.target.docstring or ""
        asserts = [ln for ln in _lines(task.evaluation.script) if "assert" in ln and ln not in visible_doc]
        for line in asserts:
            assert line not in text, (task.name, line)
        assert f"{task.target.name}_new_implementation" not in text
        assert f"def {task.evaluation.test_function}(" not in text
        for content in task.evaluation.files.values():
            assert content.strip() not in text
    assert not any(isinstance(x, HIDDEN_TYPES) for x in reachable(view)), task.name


@pytest.mark.parametrize("source", ["demo", "humaneval", "testfile"])
def test_a_view_holds_no_ground_truth_script_or_tests(source: str, humaneval_tasks: list[FunctionTask]) -> None:
    tasks: list[Task] = {
        "demo": lambda: list(load_tasks(DEMO)),
        "humaneval": lambda: list(humaneval_tasks),
        "testfile": lambda: [make_testfile_task()],
    }[source]()
    assert tasks
    for task in tasks:
        view = view_of(task)
        assert_no_answers(task, view)
        assert set(view.repository.files) == set(task.repository.files)  # what the env's tools read


def test_hidden_fields_never_reach_the_view(function_task: FunctionTask) -> None:
    canary = "CANARY_7f3a"
    task = function_task.model_copy(deep=True)
    task.target.source = task.target.source.replace("total = 0", f"total = 0  # {canary}")
    task.evaluation.script += f"\n# {canary} script\n"
    task.evaluation.files = {"data.json": f'"{canary} fixture"'}
    task.evaluation.test_function = f"test_{canary}"
    task.metadata.notes = [canary]
    testfile = make_testfile_task(ground_truth=f"def test_x():\n    assert '{canary}'\n")
    testfile.reference.tests = 424242
    for hidden in (task, testfile):
        view = view_of(hidden)
        assert canary not in view_text(view) and "424242" not in view_text(view)
        assert not hasattr(view, "ground_truth") and not hasattr(view, "evaluation")
    assert not issubclass(TaskView, (FunctionTask, TestFileTask))


def test_a_view_shows_the_target_statement_and_budgets(function_task: FunctionTask, method_task: FunctionTask) -> None:
    view = view_of(method_task)
    target = method_task.target
    assert view.kind == "function" and view.id == method_task.id and view.name == method_task.name
    assert view.target is not None and view.test_file is None
    assert (view.target.name, view.target.qualname, view.target.class_name, view.target.signature) == (
        target.name,
        target.qualname,
        target.class_name,
        target.signature,
    )
    assert view.target.docstring == target.docstring and view.target.kind == "method"
    assert view.statement == "the statement" and view.repo == method_task.provenance.repo
    assert (view.budgets.max_steps, view.budgets.max_submissions) == (7, 3)
    assert view.budgets.timeout == method_task.evaluation.timeout
    assert view_of(function_task).context == function_task.context
    with pytest.raises(ValidationError):
        view.name = "other"  # type: ignore[misc]
    view.repository.files["tiny/counter.py"] = "changed"
    assert method_task.repository.files["tiny/counter.py"] != "changed"  # a copy, not the task's own
    testfile = make_testfile_task()
    tview = view_of(testfile)
    assert tview.kind == "testfile" and tview.target is None and tview.test_file is not None
    assert (tview.test_file.focal_file, tview.test_file.focal_module, tview.test_file.test_path) == (
        "tinypkg/core.py",
        "tinypkg.core",
        "tests/test_core.py",
    )
    assert tview.budgets.test_timeout == testfile.evaluation.test_timeout
    assert "tests/test_core.py" not in tview.repository.files


RECORDING_AGENT = """\
import json

class Recorder:
    def __init__(self, out):
        self.out = out
    def reset(self, task, observation, info, *, seed, **extra):
        record = {"type": f"{type(task).__module__}.{type(task).__name__}", "extra": sorted(extra),
                  "has_ground_truth": hasattr(task, "ground_truth"), "view": task.model_dump(mode="json"),
                  "target_file": task.repository.target_file, "signature": task.target.signature}
        with open(self.out, "w") as fh:
            json.dump(record, fh)
    def act(self, observation, info):
        return {"tool": "submit", "args": {}}
"""


def test_a_user_policy_gets_a_task_view_and_not_the_ground_truth(
    tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    (tmp_path / "recorder.py").write_text(RECORDING_AGENT)
    out = tmp_path / "seen.json"
    factory = load_policy(f"{tmp_path / 'recorder.py'}:Recorder", out=str(out))
    config = RunConfig(tasks="mem", tasks_digest=tasks_digest([function_task]), policy=factory.spec)
    summary = evaluate([function_task], factory, config, RunDir(tmp_path / "run"), sandbox)
    assert summary["infra_errors"] == 0
    seen = json.loads(out.read_text())
    assert seen["type"] == "gym_repost.task_view.TaskView" and seen["extra"] == []
    assert not seen["has_ground_truth"] and seen["signature"] == function_task.target.signature
    assert seen["target_file"] == function_task.repository.target_file
    dumped = json.dumps(seen["view"])
    assert "math.floor(total)" not in dumped and "score_new_implementation" not in dumped


PRETENDERS = """\
from gym_repost.policy.base import PrivilegedPolicy
from gym_repost.policy.oracle import OraclePolicy

class Claims(PrivilegedPolicy):
    def reset(self, task, observation, info, *, seed, ground_truth=None):
        self.code = ground_truth
    def act(self, observation, info):
        return {"tool": "write_code", "args": {"code": self.code}}

class MyOracle(OraclePolicy):
    pass
"""


@pytest.mark.parametrize("name", ["Claims", "MyOracle"])
def test_a_user_policy_cannot_claim_privilege(name: str, tmp_path: Path, function_task: FunctionTask) -> None:
    (tmp_path / "pretend.py").write_text(PRETENDERS)
    with pytest.raises(ConfigError, match="only the shipped controls"):
        load_policy(f"{tmp_path / 'pretend.py'}:{name}")
    from gym_repost.policy.loader import _class_from_file

    policy = _class_from_file(str(tmp_path / "pretend.py"), name)()
    with pytest.raises(ConfigError, match="only the shipped controls"):
        reset_policy(policy, function_task, "statement", {"max_steps": 5, "max_submissions": 1}, seed=0)


def test_the_shipped_controls_are_handed_the_ground_truth(function_task: FunctionTask) -> None:
    info = {"max_steps": 5, "max_submissions": 1}
    oracle = load_policy("oracle")()
    reset_policy(oracle, function_task, "statement", info, seed=0)
    assert oracle.act("", {})["args"]["code"] == function_task.ground_truth
    mutant = load_policy("mutant")()
    reset_policy(mutant, function_task, "statement", info, seed=0)
    code = mutant.act("", {})["args"]["code"]
    assert code != function_task.ground_truth and "def score(" in code


def _play_llm(server: ScriptedLLMServer, task: FunctionTask, sandbox: Sandbox, **options: Any) -> None:
    spec = "llm:openai-compatible/test-model"
    factory = load_policy(
        spec, base_url=server.openai_base_url, timeout=2.0, backoff_initial=0.05, backoff_max=0.2, **options
    )
    config = RunConfig(tasks="mem", tasks_digest=tasks_digest([task]), policy=spec)
    episode, _ = run_episode(task, 0, factory, sandbox, config)
    assert episode.status in ("passed", "failed"), episode.infra_error


@pytest.mark.usefixtures("llm_keys")
def test_llm_prompts_are_built_from_the_view(
    server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    answer = Reply("```python\ndef score(values, cap=100):\n    return 0\n```\n")
    server.push(answer)
    _play_llm(server, function_task, sandbox)
    server.push(
        Reply.calling("read_file", {"path": "tiny/score.py"}),
        Reply.calling("write_code", {"code": "def score(values, cap=100):\n    return 0\n"}),
        Reply.calling("submit"),
    )
    _play_llm(server, function_task, sandbox, mode="agentic")
    server.push(Reply("Sums scaled values."), answer)
    _play_llm(server, function_task, sandbox, docstring="generated")
    requests = [r.text() for r in server.requests]
    assert len(requests) == 6
    docstring_writer = requests[4]
    assert "math.floor(total)" in docstring_writer  # the one privileged prompt: it writes the docstring
    for text in requests[:4] + requests[5:]:
        flat = "\n".join(line.strip() for line in text.replace("\\n", "\n").split("\n"))
        for window in body_windows(function_task):
            assert window not in flat


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=1200
    )


@pytest.mark.slow
def test_oracle_and_mutant_controls_on_the_demo_tasks(tmp_path: Path) -> None:
    result = cli("eval", str(DEMO), "--policy", "oracle", "--workers", "2", "-o", str(tmp_path / "oracle"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "oracle" / "summary.json").read_text())
    assert summary["pass@1"] == 1.0 and summary["infra_errors"] == 0 and summary["episodes"] == 15
    result = cli("eval", str(DEMO), "--policy", "mutant", "--workers", "2", "-o", str(tmp_path / "mutant"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "mutant" / "summary.json").read_text())
    assert summary["pass@1"] < 0.1 and summary["infra_errors"] == 0 and summary["episodes"] == 15


@pytest.mark.slow
def test_the_example_agent_runs_as_the_readme_says(tmp_path: Path) -> None:
    run = tmp_path / "mine"
    result = cli(
        "eval",
        "tasks/demo.jsonl",
        "--policy",
        "agents/my_agent.py:MyAgent",
        "--repairs",
        "1",
        "--workers",
        "2",
        "-o",
        str(run),
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == 15 and summary["infra_errors"] == 0
    for line in (run / "trajectories.jsonl").read_text().splitlines():
        tools = [step["tool"] for step in json.loads(line)["steps"]]
        assert tools[:4] == ["list_files", "read_file", "write_code", "run_tests"] and "submit" in tools
