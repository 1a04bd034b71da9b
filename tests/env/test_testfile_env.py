"""The TestFile-v0 environment contract, with the real local sandbox."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from testfile_tasks import GROUND_TRUTH, tiny_testfile_task  # noqa: F401 - a fixture

import gym_repost  # noqa: F401 - registers the environments
from gym_repost.analysis.pytest_files import disarm_tests, remove_assertions
from gym_repost.env import TESTFILE_ENV_ID, TestFileEnv
from gym_repost.harness.testfile_scoring import RewardConfig
from gym_repost.sandbox import Sandbox
from gym_repost.task import TestFileTask

WEAK = "from tinypkg.core import clamp\n\n\ndef test_clamp():\n    assert clamp(5) == 5\n"
SUBMIT = {"tool": "submit", "args": {}}


def _write(code: str) -> dict[str, object]:
    return {"tool": "write_tests", "args": {"code": code}}


def test_check_env_passes_with_random_actions(tiny_testfile_task: TestFileTask, sandbox: Sandbox) -> None:  # noqa: F811
    env = gym.make(TESTFILE_ENV_ID, task=tiny_testfile_task, sandbox=sandbox)
    check_env(env.unwrapped, skip_render_check=True)


def test_reset_states_the_task(tiny_testfile_task: TestFileTask, sandbox: Sandbox) -> None:  # noqa: F811
    env = gym.make("gym_repost/TestFile-v0", task=tiny_testfile_task, sandbox=sandbox, max_submissions=2)
    obs, info = env.reset(seed=0)
    assert "tinypkg/core.py" in obs and "tests/test_core.py" in obs and "tinypkg.core" in obs
    assert "write_tests(code)" in obs and "write_code" not in obs and "2 submissions" in obs
    assert "mutation score" in obs and "0.90" in obs
    assert info["task_id"] == tiny_testfile_task.id and info["test_report"] is None


def test_the_ground_truth_file_is_hidden(tiny_testfile_task: TestFileTask, sandbox: Sandbox) -> None:  # noqa: F811
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox)
    env.reset(seed=0)
    obs, *_ = env.step({"tool": "list_files", "args": {}})
    assert "tinypkg/core.py" in obs and "tests/test_core.py" not in obs
    obs, *_ = env.step({"tool": "read_file", "args": {"path": "tests/test_core.py"}})
    assert obs.startswith("Error: no such file")


def test_ground_truth_submission_earns_the_full_reward(
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
) -> None:
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(_write(GROUND_TRUTH))
    assert (reward, terminated, info["code_written"]) == (0.0, False, True)
    obs, reward, terminated, truncated, info = env.step(json.dumps(SUBMIT))
    assert obs.startswith("Submission accepted") and (terminated, truncated) == (True, False)
    assert reward == pytest.approx(1.0) and info["solved"] and info["best_reward"] == pytest.approx(1.0)
    report = info["test_report"]
    assert report["passed"] and report["status"] == "passed" and report["metrics"]["tests"] == 4
    assert all(value == pytest.approx(1.0) for value in report["relative"].values())
    assert "duration" not in json.dumps(info) and "seconds" not in json.dumps(info)


def test_repair_rewards_only_the_improvement(tiny_testfile_task: TestFileTask, sandbox: Sandbox) -> None:  # noqa: F811
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox, max_submissions=3)
    env.reset(seed=0)
    env.step(_write(WEAK))
    obs, first, terminated, _, info = env.step(SUBMIT)
    assert not terminated and 0.0 < first < 0.9 and "below the bar (2 submissions left)" in obs
    assert "Lines of tinypkg/core.py no passing test runs" in obs and "Mutants of tinypkg/core.py" in obs
    env.step(_write(WEAK))
    _, again, terminated, _, _ = env.step(SUBMIT)
    assert again == 0.0 and not terminated
    env.step(_write(GROUND_TRUTH))
    _, last, terminated, _, info = env.step(SUBMIT)
    assert terminated and first + again + last == pytest.approx(1.0) and info["submissions"] == 3


def test_run_tests_reports_failures_and_costs_no_submission(
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
) -> None:
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox)
    env.reset(seed=0)
    obs, *_ = env.step({"tool": "run_tests", "args": {}})
    assert obs.startswith("Error: no test file yet")
    failing = WEAK + "\n\ndef test_wrong():\n    from tinypkg.core import fib\n    assert fib(3) == 3\n"
    env.step(_write(failing))
    obs, reward, terminated, _, info = env.step({"tool": "run_tests", "args": {}})
    assert (reward, terminated, info["submissions"]) == (0.0, False, 0)
    assert "test_wrong: failed" in obs and "assert 2 == 3" in obs
    assert info["test_report"]["status"] == "failed"


def test_bad_files_are_observations_not_exceptions(
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
) -> None:
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox, max_submissions=2)
    env.reset(seed=0)
    obs, *_ = env.step(_write("def test_x(:\n"))
    assert "does not parse" in obs
    obs, reward, terminated, _, info = env.step(SUBMIT)
    assert reward == 0.0 and not terminated and "could not be run" in obs
    for action in [
        "nonsense",
        {"tool": "write_code", "args": {"code": "x"}},
        {"tool": "write_tests"},
        {"tool": "read_file", "args": {"path": "../etc/passwd"}},
    ]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.startswith("Error:") and reward == 0.0 and not info["ok"]


def test_step_budget_truncates(tiny_testfile_task: TestFileTask, sandbox: Sandbox) -> None:  # noqa: F811
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox, max_steps=2)
    env.reset(seed=0)
    assert env.step({"tool": "list_files", "args": {}})[3] is False
    _, _, terminated, truncated, _ = env.step({"tool": "list_files", "args": {}})
    assert (terminated, truncated) == (False, True)
    obs, *_ = env.step({"tool": "list_files", "args": {}})
    assert "episode is over" in obs


def test_configured_blend_and_threshold(tiny_testfile_task: TestFileTask, sandbox: Sandbox) -> None:  # noqa: F811
    lenient = {"pass_threshold": 0.0, "weights": {"line_coverage": 1.0}}
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox, reward=lenient)
    env.reset(seed=0)
    env.step(_write(WEAK))
    _, reward, terminated, _, info = env.step(SUBMIT)
    coverage = info["test_report"]["relative"]["line_coverage"]
    assert reward == pytest.approx(coverage) and terminated and info["solved"]
    assert TestFileEnv(tiny_testfile_task, sandbox=sandbox, reward=RewardConfig()).reward_config.pass_threshold == 0.9


def test_assertions_removed_is_a_negative_control(
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
) -> None:
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox)
    env.reset(seed=0)
    env.step(_write(remove_assertions(GROUND_TRUTH)))
    _, reward, terminated, _, info = env.step(SUBMIT)
    report = info["test_report"]
    assert report["metrics"]["line_coverage"] == 1.0 and report["metrics"]["pass_rate"] == 1.0
    assert report["metrics"]["mutation_score"] < 0.3 and reward < 0.7 and not info["solved"]


def test_disarmed_ground_truth_is_a_negative_control(
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
) -> None:
    env = TestFileEnv(tiny_testfile_task, sandbox=sandbox)
    env.reset(seed=0)
    env.step(_write(disarm_tests(GROUND_TRUTH)))
    _, reward, _, _, info = env.step(SUBMIT)
    metrics = info["test_report"]["metrics"]
    # Same code run, nothing checked: only the hanging mutant (`i += 1` removed) and the one
    # the module cannot even be loaded with (`LIMIT = 10` removed: a default needs it) are caught.
    assert metrics["line_coverage"] == 1.0 and metrics["mutants_killed"] == 1 and metrics["mutants_timeouts"] == 1
    assert reward == pytest.approx(0.5 + 0.5 * metrics["mutation_score"] / tiny_testfile_task.reference.mutation_score)
    assert not info["solved"]


def test_without_a_sandbox_the_environment_starts_and_closes_its_own(tiny_testfile_task: TestFileTask) -> None:  # noqa: F811
    env = gym.make(TESTFILE_ENV_ID, task=tiny_testfile_task.model_dump(mode="json"))
    env.reset(seed=0)
    env.step(_write(GROUND_TRUTH))
    obs, reward, terminated, _, _ = env.step(SUBMIT)
    own = env.unwrapped._own_sandbox
    assert terminated and reward == pytest.approx(1.0) and own is not None
    env.close()
    assert env.unwrapped._own_sandbox is None
