"""Policies: loading by spec, the scripted policy's selection rules, built-in behaviour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_repost.errors import ConfigError, PolicyError
from gym_repost.policy import Policy, load_policy
from gym_repost.policy.scripted import ScriptedPolicy
from gym_repost.task import FunctionTask, Task
from gym_repost.task_view import TaskView, task_view


def view(task: Task) -> TaskView:
    return task_view(task, "statement", max_steps=30, max_submissions=1)


def test_builtin_specs_make_fresh_policies() -> None:
    factory = load_policy("oracle")
    a, b = factory(), factory()
    assert a is not b and isinstance(a, Policy)
    assert isinstance(load_policy("mutant", max_mutants=3)(), Policy)


def test_oracle_writes_then_submits(function_task: FunctionTask) -> None:
    policy = load_policy("oracle")()
    policy.reset(view(function_task), "", {}, seed=0, ground_truth=function_task.ground_truth)
    assert policy.act("", {}) == {"tool": "write_code", "args": {"code": function_task.ground_truth}}
    assert policy.act("", {}) == {"tool": "submit", "args": {}}


def test_mutant_submits_different_code_each_time(function_task: FunctionTask) -> None:
    policy = load_policy("mutant")()
    policy.reset(view(function_task), "", {}, seed=1, ground_truth=function_task.ground_truth)
    written = []
    for _ in range(3):
        write = policy.act("", {})
        written.append(write["args"]["code"])
        assert policy.act("", {})["tool"] == "submit"
    assert len(set(written)) == 3 and function_task.ground_truth not in written


def test_loading_from_a_file_path(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(
        "class A:\n    def __init__(self, k=1):\n        self.k = k\n"
        "    def reset(self, task, observation, info, *, seed): pass\n"
        "    def act(self, observation, info): return {'tool': 'submit'}\n"
        "class NotAPolicy:\n    pass\n"
    )
    assert load_policy(f"{tmp_path}/agent.py:A", k=5)().k == 5
    with pytest.raises(ConfigError, match="lacks reset, act"):
        load_policy(f"{tmp_path}/agent.py:NotAPolicy")
    with pytest.raises(ConfigError, match="defines no 'Missing'"):
        load_policy(f"{tmp_path}/agent.py:Missing")
    with pytest.raises(ConfigError, match="not found"):
        load_policy(f"{tmp_path}/absent.py:A")
    with pytest.raises(PolicyError, match="could not be created"):
        load_policy(f"{tmp_path}/agent.py:A", unknown=1)()


@pytest.mark.parametrize("spec", ["gpt-4", "x:1bad", ":A"])
def test_unknown_specs_list_the_valid_forms(spec: str) -> None:
    with pytest.raises(ConfigError, match="oracle, mutant, scripted:FILE"):
        load_policy(spec)


def test_loading_from_a_module() -> None:
    assert load_policy("gym_repost.policy.oracle:OraclePolicy")().name == "oracle"


def test_scripted_picks_the_most_specific_script(tmp_path: Path, function_task: FunctionTask) -> None:
    lines = [
        {"task": "*", "actions": [{"tool": "list_files"}]},
        {"task": function_task.name, "actions": [{"tool": "read_file", "args": {"path": "x"}}]},
        {"task": function_task.id, "sample": 1, "actions": [{"tool": "run_tests"}]},
    ]
    path = tmp_path / "script.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    policy = load_policy(f"scripted:{path}")()
    policy.reset(view(function_task), "", {"sample": 0}, seed=0)
    assert policy.act("", {})["tool"] == "read_file"
    assert policy.act("", {}) == {"tool": "submit", "args": {}}
    policy.reset(view(function_task), "", {"sample": 1}, seed=0)
    assert policy.act("", {})["tool"] == "run_tests"
    other = function_task.model_copy(update={"id": "other", "name": "other"})
    policy.reset(view(other), "", {"sample": 0}, seed=0)
    assert policy.act("", {})["tool"] == "list_files"


def test_scripted_file_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"task": "*", "actions": []}\n{"task": 3}\n')
    with pytest.raises(ConfigError, match="s.jsonl:2"):
        load_policy(f"scripted:{path}")
    with pytest.raises(ConfigError, match="give a script file"):
        ScriptedPolicy()
