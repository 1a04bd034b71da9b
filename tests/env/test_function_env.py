"""The Function-v0 environment contract, with the real local sandbox."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import gym_repost  # noqa: F401 - registers the environments
from gym_repost.env import FunctionEnv
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask

WRONG = "def score(values, cap=100):\n    return sum(values)\n"


def _write(code: str) -> dict:
    return {"tool": "write_code", "args": {"code": code}}


SUBMIT = {"tool": "submit", "args": {}}


def test_check_env_passes_with_random_actions(function_task: FunctionTask, sandbox: Sandbox) -> None:
    env = gym.make("gym_repost/Function-v0", task=function_task, sandbox=sandbox)
    check_env(env.unwrapped, skip_render_check=True)


def test_reset_gives_the_statement_and_budgets(function_task: FunctionTask, sandbox: Sandbox) -> None:
    env = gym.make("gym_repost/Function-v0", task=function_task, sandbox=sandbox, max_submissions=3)
    obs, info = env.reset(seed=0)
    assert "write `score`" in obs and "def score(values, cap=100):" in obs
    assert "write_code(code)" in obs and "3 submissions" in obs
    assert info["task_id"] == function_task.id and info["max_submissions"] == 3
    assert env.observation_space.contains(obs)


def test_passing_submission_terminates_with_reward_one(function_task: FunctionTask, sandbox: Sandbox) -> None:
    env = gym.make("gym_repost/Function-v0", task=function_task, sandbox=sandbox)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(_write(function_task.ground_truth))
    assert (reward, terminated, truncated) == (0.0, False, False) and info["code_written"]
    obs, reward, terminated, truncated, info = env.step(json.dumps(SUBMIT))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["solved"] and info["test_report"]["passed"] and "accepted" in obs


def test_self_repair_continues_until_submissions_are_spent(method_task: FunctionTask, sandbox: Sandbox) -> None:
    env = gym.make("gym_repost/Function-v0", task=method_task, sandbox=sandbox, max_submissions=2)
    env.reset(seed=0)
    env.step(_write("def add(self, amount):\n    return self.value\n"))
    obs, reward, terminated, _, info = env.step(SUBMIT)
    assert (reward, terminated) == (0.0, False)
    assert "Submission failed (1 submission left)" in obs and "your code returned 5" in obs
    env.step(_write(method_task.ground_truth))
    obs, reward, terminated, _, info = env.step(SUBMIT)
    assert (reward, terminated, info["submissions"]) == (1.0, True, 2)


def test_budget_of_submissions_ends_the_episode_unsolved(function_task: FunctionTask, sandbox: Sandbox) -> None:
    env = gym.make("gym_repost/Function-v0", task=function_task, sandbox=sandbox, max_submissions=1)
    env.reset(seed=0)
    env.step(_write(WRONG))
    _, reward, terminated, truncated, info = env.step(SUBMIT)
    assert (reward, terminated, truncated, info["solved"]) == (0.0, True, False, False)
    obs, *_ = env.step(SUBMIT)
    assert "episode is over" in obs


def test_step_budget_truncates(function_task: FunctionTask, sandbox: Sandbox) -> None:
    env = gym.make("gym_repost/Function-v0", task=function_task, sandbox=sandbox, max_steps=2)
    env.reset(seed=0)
    assert env.step({"tool": "list_files"})[3] is False
    _, _, terminated, truncated, _ = env.step({"tool": "list_files"})
    assert (terminated, truncated) == (False, True)


@pytest.mark.parametrize(
    "action",
    [
        "}",
        {"tool": "rm", "args": {}},
        {"tool": "read_file", "args": {"path": "../../etc/passwd"}},
        {"tool": "write_code", "args": {"code": "x" * 300_000}},
        {"tool": "write_code", "args": {"code": "\udc80"}},
        {"tool": "read_file", "args": {"path": 1}},
        12,
        None,
        {"tool": "submit", "args": {"now": True}},
    ],
)
def test_agent_mistakes_are_observations(function_task: FunctionTask, sandbox: Sandbox, action) -> None:
    env = gym.make("gym_repost/Function-v0", task=function_task, sandbox=sandbox)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs.startswith("Error:") and info["ok"] is False
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert env.step({"tool": "list_files", "args": {}})[4]["ok"]  # the episode goes on


def test_shaped_reward_credits_code_that_runs(function_task: FunctionTask, sandbox: Sandbox) -> None:
    env = FunctionEnv(function_task, sandbox=sandbox, reward="shaped", max_submissions=3)
    env.reset(seed=0)
    env.step(_write(WRONG))
    assert env.step(SUBMIT)[1] == 0.1  # ran, failed an assertion
    env.step(_write("def score(values, cap=100):\n    return values[99]\n"))
    assert env.step(SUBMIT)[1] == 0.0  # crashed


def test_seeded_episodes_are_reproducible(function_task: FunctionTask, sandbox: Sandbox) -> None:
    def run() -> list:
        env = FunctionEnv(function_task, sandbox=sandbox)
        out = [env.reset(seed=3)]
        out += [env.step(a) for a in (_write(WRONG), {"tool": "run_tests"}, SUBMIT)]
        return out

    assert run() == run()


def _make(task: FunctionTask):
    return lambda: gym.make("gym_repost/Function-v0", task=task)


def test_sync_vector_env(function_task: FunctionTask, method_task: FunctionTask) -> None:
    envs = gym.vector.SyncVectorEnv([_make(function_task), _make(method_task)])
    try:
        obs, _ = envs.reset(seed=1)
        assert len(obs) == 2 and "score" in obs[0] and "Counter.add" in obs[1]
        envs.step((json.dumps(_write(function_task.ground_truth)), json.dumps(_write(method_task.ground_truth))))
        _, rewards, terminated, _, _ = envs.step((json.dumps(SUBMIT), json.dumps(SUBMIT)))
        assert list(rewards) == [1.0, 1.0] and list(terminated) == [True, True]
    finally:
        envs.close()


def test_async_vector_env(function_task: FunctionTask, method_task: FunctionTask) -> None:
    envs = gym.vector.AsyncVectorEnv([_make(function_task), _make(method_task)], shared_memory=False)
    try:
        envs.reset(seed=1)
        envs.step((json.dumps(_write(function_task.ground_truth)), json.dumps(_write(WRONG.replace("score", "add")))))
        _, rewards, terminated, _, infos = envs.step((json.dumps(SUBMIT), json.dumps(SUBMIT)))
        assert list(rewards) == [1.0, 0.0] and list(terminated) == [True, True]
    finally:
        envs.close()
