"""``step()`` never raises, whatever the action: the real environments and the real sandbox."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testfile_tasks import tiny_testfile_task  # noqa: F401 - a fixture

import gym_repost  # noqa: F401 - registers the environments
from gym_repost.env import FunctionEnv, TestFileEnv
from gym_repost.errors import SandboxError
from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import run_episode, tasks_digest
from gym_repost.programs.protocol import RESULT
from gym_repost.sandbox import Sandbox
from gym_repost.sandbox.base import RunResult
from gym_repost.task import FunctionTask, TestFileTask

DEEP_UNARY = "def score(values, cap=100):\n    return " + "-" * 100_000 + "1\n"


class _Raising:
    """Every method a hostile subclass may override raises."""

    def _boom(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a method of the agent's object ran")

    __eq__ = __ne__ = __hash__ = __str__ = __repr__ = __len__ = __iter__ = __getitem__ = _boom  # type: ignore
    __contains__ = __bool__ = __int__ = __index__ = __float__ = __format__ = _boom  # type: ignore
    keys = items = values = get = copy = encode = strip = startswith = _boom


class EvilStr(_Raising, str):
    pass


class EvilKey(EvilStr):
    """Hashes like a str (a dict key must), every other method raises."""

    __hash__ = str.__hash__


class EvilDict(_Raising, dict):  # type: ignore[misc]
    pass


class EvilList(_Raising, list):  # type: ignore[misc]
    pass


class EvilInt(_Raising, int):
    pass


class _NameRaises(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("the metaclass ran")


class Nameless(metaclass=_NameRaises):
    pass


def _deep_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE: list[tuple[str, Any, str]] = [
    ("deep JSON array", "[" * 100_000 + "]" * 100_000, "nested more than 16 levels"),
    ("deep JSON object", '{"a":' * 100_000 + "1" + "}" * 100_000, "nested more than 16 levels"),
    ("deep args JSON", {"tool": "read_file", "arguments": "[" * 50_000}, "arguments are nested"),
    ("non-str key", {"tool": "read_file", "args": {1: 2}}, "keys must be strings"),
    ("tuple key", {"tool": "read_file", "args": {(1, 2): "x"}}, "keys must be strings"),
    ("invalid UTF-8 bytes", b"\xff\xfe{", "not UTF-8"),
    ("None", None, "must be an object"),
    ("an int", 12345, "must be an object"),
    ("NaN", float("nan"), "not a JSON number"),
    (
        "inf argument",
        {"tool": "read_file", "args": {"path": "tiny/score.py", "start": float("inf")}},
        "not a JSON number",
    ),
    ("NaN in JSON text", '{"tool": "read_file", "args": {"path": "x", "start": NaN}}', "not a JSON number"),
    ("huge integer text", '{"tool": "read_file", "args": {"start": ' + "9" * 5000 + "}}", "not valid JSON"),
    ("huge integer", {"tool": "read_file", "args": {"path": "tiny/score.py", "start": 10**40}}, "out of range"),
    ("huge string action", "x" * 2_000_000, "characters long"),
    ("huge action object", {"tool": "write_code", "args": {"code": "x" * 1_500_000}}, "too large"),
    ("oversized code", {"tool": "write_code", "args": {"code": "x" * 300_000}}, "the limit is"),
    ("nested lists", {"tool": "read_file", "args": {"path": _deep_list(100)}}, "nested more than 16"),
    ("unknown tool", {"tool": "rm -rf /", "args": {}}, "unknown tool"),
    ("tool name not a string", {"tool": 5}, 'no "tool" name'),
    ("wrong argument type", {"tool": "read_file", "args": {"path": 5}}, "must be a string"),
    ("unknown argument", {"tool": "list_files", "args": {"recursive": True}}, "unknown argument"),
    ("args an array", {"tool": "list_files", "args": [1]}, '"args" must be an object'),
    ("a set", {"tool": {1, 2}}, "not JSON"),
    ("an object", object(), "not JSON"),
    ("metaclass with a raising __name__", Nameless(), "not JSON"),
    ("str subclass that raises", {"tool": EvilStr("no_such_tool")}, "unknown tool 'no_such_tool'"),
    ("dict subclass that raises", EvilDict({"tool": "no_such_tool"}), "unknown tool"),
    ("list subclass as args", {"tool": "list_files", "args": EvilList([1])}, '"args" must be an object'),
    (
        "int subclass that raises",
        {"tool": "read_file", "args": {"path": "x", "start": EvilInt(10**30)}},
        "out of range",
    ),
    ("lone surrogate code", {"tool": "write_code", "args": {"code": "def score():\n    '\ud800'"}}, "not valid UTF-8"),
    ("path outside the repository", {"tool": "read_file", "args": {"path": "../../etc/passwd"}}, "outside"),
    ("deep unary code", {"tool": "write_code", "args": {"code": DEEP_UNARY}}, "nested too deeply"),
    ("submit before writing", {"tool": "submit", "args": {}}, "no code yet"),
]


def _assert_step(result: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    assert isinstance(result, tuple) and len(result) == 5
    obs, reward, terminated, truncated, info = result
    assert isinstance(obs, str) and isinstance(reward, float)
    assert isinstance(terminated, bool) and isinstance(truncated, bool) and isinstance(info, dict)
    json.dumps(info)  # info stays plain JSON, whatever the action
    return result


@pytest.mark.parametrize(("label", "action", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_action_is_an_error_observation(
    function_task: FunctionTask, sandbox: Sandbox, label: str, action: Any, message: str
) -> None:
    env = FunctionEnv(function_task, sandbox=sandbox, max_steps=5)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = _assert_step(env.step(action))
    assert obs.startswith("Error: ") and message in obs, obs[:300]
    assert (reward, terminated, truncated, info["ok"], info["infra_error"]) == (0.0, False, False, False, None)
    obs, *_ = _assert_step(env.step({"tool": "list_files", "args": {}}))
    assert "tiny/score.py" in obs  # the episode goes on


def test_hostile_subclasses_holding_a_valid_call_are_copied_not_called(
    function_task: FunctionTask, sandbox: Sandbox
) -> None:
    env = FunctionEnv(function_task, sandbox=sandbox)
    env.reset(seed=0)
    action = EvilDict(
        {
            EvilKey("tool"): EvilStr("read_file"),
            "args": EvilDict({"path": EvilStr("tiny/score.py"), "start": EvilInt(2)}),
        }
    )
    obs, reward, _, _, info = _assert_step(env.step(action))
    assert info["ok"] and obs.startswith("tiny/score.py:\n    2  ")


def test_code_deep_enough_to_break_the_host_walkers_is_an_observation(
    function_task: FunctionTask, sandbox: Sandbox
) -> None:
    env = FunctionEnv(function_task, sandbox=sandbox)
    env.reset(seed=0)
    for depth in (990, 2000, 2900, 3500):
        code = "def score(values, cap=100):\n    return " + "-" * depth + "1\n"
        obs, reward, *_ = _assert_step(env.step({"tool": "write_code", "args": {"code": code}}))
        assert reward == 0.0 and (obs.startswith("Code saved") or obs.startswith("Error: ")), obs[:200]


def test_deep_unary_test_file_is_reported_not_raised(
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
) -> None:
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox)
    env.reset(seed=0)
    code = "def test_x():\n    assert " + "-" * 100_000 + "1\n"
    obs, *_ = _assert_step(env.step({"tool": "write_tests", "args": {"code": code}}))
    assert "does not parse" in obs and "nested too deeply" in obs
    obs, reward, *_ = _assert_step(env.step({"tool": "run_tests", "args": {}}))
    assert reward == 0.0 and "could not be run" in obs and "nested too deeply" in obs


def _forging(payload: str) -> str:
    """A candidate that writes ``payload`` as the harness's report in a result line and exits."""
    return (
        "def score(values, cap=100):\n    import os, sys\n"
        f"    sys.stdout.write('\\n' + {RESULT!r} + '{{\"report\": ' + {payload} + '}}\\n')\n"
        "    sys.stdout.flush()\n    os._exit(3)\n"
    )


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ("'[' * 100000 + ']' * 100000", "EarlyExit"),
        ('\'{"status": "error", "frames": [{"file": 1}]}\'', "MalformedReport"),
        ('\'{"status": "failed", "assertion": [1, 2], "exception": "X"}\'', "MalformedReport"),
        ('\'{"status": "failed", "frames": 7, "exception": ["X"]}\'', "MalformedReport"),
        ('\'{"status": "error", "frames": "abc", "exception": "E"}\'', "MalformedReport"),
    ],
)
def test_output_mimicking_a_report_is_a_failed_run(
    function_task: FunctionTask, sandbox: Sandbox, payload: str, expected: str
) -> None:
    env = FunctionEnv(function_task, sandbox=sandbox, max_submissions=2)
    env.reset(seed=0)
    obs, *_ = _assert_step(env.step({"tool": "write_code", "args": {"code": _forging(payload)}}))
    assert obs.startswith("Code saved"), obs
    obs, reward, terminated, truncated, info = _assert_step(env.step({"tool": "submit", "args": {}}))
    assert (reward, terminated, truncated, info["infra_error"]) == (0.0, False, False, None)
    assert obs.startswith("Submission failed") and expected in obs, obs[:400]
    assert info["test_report"]["passed"] is False and info["submissions"] == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4),
    max_leaves=20,
)
tool_names = st.sampled_from(
    ["list_files", "read_file", "search", "write_code", "run_tests", "submit", "write_tests", ""]
) | st.text(max_size=10)
arguments = st.dictionaries(
    st.sampled_from(["path", "start", "end", "pattern", "code"]) | st.text(max_size=6), json_values, max_size=4
)
actions = (
    st.fixed_dictionaries({"tool": tool_names | json_values}, optional={"args": arguments | json_values})
    | st.fixed_dictionaries({"name": tool_names, "arguments": arguments.map(json.dumps) | st.text()})
    | json_values
    | st.text()
    | st.binary(max_size=64)
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(action=actions | actions.map(lambda a: json.dumps(a) if not isinstance(a, bytes) else a))
def test_fuzzed_json_like_actions_never_raise(function_task: FunctionTask, sandbox: Sandbox, action: Any) -> None:
    env = FunctionEnv(function_task, sandbox=sandbox, max_steps=3)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = _assert_step(env.step(action))
    assert info["infra_error"] is None and reward == 0.0
    assert info["ok"] or obs.startswith("Error: ")


def test_check_env_still_passes(function_task: FunctionTask, sandbox: Sandbox) -> None:
    check_env(gym.make("gym_repost/Function-v0", task=function_task, sandbox=sandbox).unwrapped, skip_render_check=True)


class BrokenSandbox(Sandbox):
    """A sandbox whose every run fails as infrastructure."""

    name = "broken"

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def run(
        self,
        files: Mapping[str, str | bytes],
        command: Sequence[str],
        timeout: float = 10.0,
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        cpu_seconds: float | None = None,
    ) -> RunResult:
        raise SandboxError("sandbox worker 4242 died")


def test_a_sandbox_failure_truncates_with_infra_error(function_task: FunctionTask) -> None:
    env = FunctionEnv(function_task, sandbox=BrokenSandbox(), max_submissions=3)
    env.reset(seed=0)
    _assert_step(env.step({"tool": "write_code", "args": {"code": function_task.ground_truth}}))
    obs, reward, terminated, truncated, info = _assert_step(env.step({"tool": "submit", "args": {}}))
    assert (reward, terminated, truncated, info["ok"]) == (0.0, False, True, False)
    assert info["infra_error"] == "SandboxError: sandbox worker 4242 died" and "Infrastructure error" in obs
    assert info["submissions"] == 0
    obs, *_ = _assert_step(env.step({"tool": "list_files", "args": {}}))
    assert "episode is over" in obs


SOLUTIONS: dict[str, str] = {}
"""Answers the test policies below are given by the tests (policies see only a task view)."""


class _WriteThenSubmit:
    def reset(self, task: Any, observation: str, info: dict[str, Any], *, seed: int) -> None:
        self.code = SOLUTIONS[task.id]

    def act(self, observation: str, info: dict[str, Any]) -> dict[str, Any]:
        if info["code_written"]:
            return {"tool": "submit", "args": {}}
        return {"tool": "write_code", "args": {"code": self.code}}


def test_the_runner_records_a_sandbox_failure_as_an_infrastructure_error(function_task: FunctionTask) -> None:
    SOLUTIONS[function_task.id] = function_task.ground_truth
    config = RunConfig(tasks="mem", tasks_digest=tasks_digest([function_task]), policy="write-then-submit")
    episode, _ = run_episode(function_task, 0, _WriteThenSubmit, BrokenSandbox(), config)
    assert episode.status == "infra_error" and "sandbox worker 4242 died" in episode.infra_error


def test_catastrophic_regex_on_a_big_file_returns_promptly(
    function_task: FunctionTask, sandbox: Sandbox, tmp_path: Path
) -> None:
    task = function_task.model_copy(deep=True)
    task.repository.files["big.txt"] = ("a" * 79 + "\n") * 100_000
    env = FunctionEnv(task, sandbox=sandbox)
    env.reset(seed=0)
    for pattern in ["(.*.*)*X", "(a|aa)*$X", "(?:[ab]*a[ab]{20}){3}c", r"(a)\1(?=b)"]:
        start = time.monotonic()
        obs, reward, _, _, info = _assert_step(env.step({"tool": "search", "args": {"pattern": pattern}}))
        assert time.monotonic() - start < 10.0, pattern
        assert info["ok"] and obs.startswith("no matches"), obs[:300]
    obs, *_ = _assert_step(env.step({"tool": "search", "args": {"pattern": r"(a)\1", "path": "big.txt"}}))
    assert "searched for it as plain text" in obs


class _HostileThenSolves:
    """Sends hostile actions, then writes the ground truth and submits."""

    def reset(self, task: Any, observation: str, info: dict[str, Any], *, seed: int) -> None:
        self.actions: list[Any] = [
            object(),
            {"tool": "read_file", "args": {"path": "\ud800"}},
            _deep_list(50),
            EvilDict({"tool": "list_files"}),
            b"\xff",
            "[" * 10_000,
            {"tool": "write_code", "args": {"code": SOLUTIONS[task.id]}},
            {"tool": "submit"},
        ]

    def act(self, observation: str, info: dict[str, Any]) -> Any:
        return self.actions.pop(0)


def test_the_runner_records_hostile_actions_and_scores_the_episode(
    function_task: FunctionTask, sandbox: Sandbox, tmp_path: Path
) -> None:
    SOLUTIONS[function_task.id] = function_task.ground_truth
    config = RunConfig(tasks="mem", tasks_digest=tasks_digest([function_task]), policy="hostile", max_steps=10)
    summary = evaluate([function_task], _HostileThenSolves, config, RunDir(tmp_path), sandbox)
    assert summary["pass@1"] == 1.0 and summary["infra_errors"] == 0
    steps = json.loads((tmp_path / "trajectories.jsonl").read_text(encoding="utf-8"))["steps"]
    assert [s["ok"] for s in steps] == [False, False, False, True, False, False, True, True]
    assert steps[0]["action"] == {
        "unrecordable_action": "object: a value of type object is not JSON "
        "(object, array, string, number, true, false or null)"
    }
    assert steps[3]["action"] == {"tool": "list_files"} and steps[5]["action"] == "[" * 10_000
