"""Gymnasium's own machinery over our environments, with its defaults (issue 15, items 4 and
10): ``make_vec`` in async mode with shared memory, ``spec.to_json()``, ``check_env``."""

from __future__ import annotations

import copy
import json
import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory
from testfile_tasks import tiny_testfile_task  # noqa: F401 - a fixture

import gym_repost
from gym_repost.env import make_task_env
from gym_repost.env.spaces import AnyText
from gym_repost.sandbox import Sandbox
from gym_repost.task import TestFileTask
from tests.conftest import ROOT


def test_any_text_round_trips_through_shared_memory() -> None:
    space = AnyText(max_length=12)
    memory = create_shared_memory(space, n=3)
    texts = read_from_shared_memory(space, memory, n=3)
    for index, value in enumerate(["", "ä€\U0001f600 \ud800", "x" * 12]):
        write_to_shared_memory(space, index, value, memory)
    assert copy.deepcopy(texts) == ("", "ä€\U0001f600 \ud800", "x" * 12)  # a live view, copied as a tuple
    write_to_shared_memory(space, 0, "new", memory)
    assert texts[0] == "new" and texts[1:] == ("ä€\U0001f600 \ud800", "x" * 12)
    with pytest.raises(ValueError, match="13 characters does not fit"):
        write_to_shared_memory(space, 0, "y" * 13, memory)


@pytest.mark.parametrize("env_id", ["gym_repost/Function-v0", "gym_repost/TestFile-v0"])
def test_make_vec_async_with_default_kwargs_returns_the_real_observations(
    env_id: str,
    tiny_testfile_task: TestFileTask,  # noqa: F811
) -> None:
    task = (
        tiny_testfile_task
        if env_id.endswith("TestFile-v0")
        else gym_repost.load_tasks(ROOT / "tasks" / "demo.jsonl")[0]
    )
    single = gym.make(env_id, task=task)
    expected, _ = single.reset(seed=0)
    single.close()
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="async", task=task)
    try:
        observations, _ = envs.reset(seed=0)
        assert observations == (expected, expected)
        bad_path = {"tool": "read_file", "args": {"path": "ä/\u2603.py"}}
        observations, *_ = envs.step([bad_path, {"tool": "list_files", "args": {}}])
        assert "'ä/\u2603.py'" in observations[0] and observations[0].startswith("Error:")
        assert task.repository.target_file in observations[1]
    finally:
        envs.close()


def test_the_spec_is_json_and_makes_the_environment_again() -> None:
    task = gym_repost.load_tasks(ROOT / "tasks" / "demo.jsonl")[0]
    env = gym.make("gym_repost/Function-v0", task=task, max_submissions=2)
    data = env.spec.to_json()
    assert json.loads(data)["kwargs"]["task"]["id"] == task.id
    again = gym.make(EnvSpec.from_json(data))
    try:
        assert again.unwrapped.task == task and again.unwrapped.max_submissions == 2
        assert again.reset(seed=0)[0] == env.reset(seed=0)[0]
    finally:
        again.close()
        env.close()


def test_check_env_passes_without_warnings() -> None:
    task = gym_repost.load_tasks(ROOT / "tasks" / "demo.jsonl")[0]
    env = gym.make("gym_repost/Function-v0", task=task)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
    finally:
        env.close()


@pytest.mark.parametrize("kind", ["function", "testfile"])
def test_an_environment_that_started_its_sandbox_pickles_and_the_copy_starts_its_own(
    kind: str,
    tiny_testfile_task: TestFileTask,  # noqa: F811
) -> None:
    """The sandbox an environment started (from ``sandbox_config``) is left behind: the
    copy starts one of its own on its first test run, and keeps the episode's state."""
    testfile = kind == "testfile"
    task = tiny_testfile_task if testfile else gym_repost.load_tasks(ROOT / "tasks" / "demo.jsonl")[0]
    env_id = "gym_repost/TestFile-v0" if testfile else "gym_repost/Function-v0"
    env = gym.make(env_id, task=task, sandbox_config={"workers": 1})  # the advice of the old error
    env.reset(seed=0)
    env.step({"tool": "write_tests" if testfile else "write_code", "args": {"code": task.ground_truth}})
    env.step({"tool": "run_tests", "args": {}})
    assert env.unwrapped._own_sandbox is not None  # started
    copy_ = pickle.loads(pickle.dumps(env))
    try:
        assert copy_.unwrapped._own_sandbox is None and copy_.unwrapped.code == task.ground_truth
        text, reward, terminated, truncated, info = copy_.step({"tool": "submit", "args": {}})
        assert text.startswith("Submission accepted") and terminated and info["steps"] == 3, text
        assert copy_.unwrapped._own_sandbox not in (None, env.unwrapped._own_sandbox)
        assert env.step({"tool": "run_tests", "args": {}})[4]["test_report"]["passed"]  # the original goes on
    finally:
        copy_.close()
        env.close()


def test_an_environment_given_a_shared_sandbox_says_how_to_make_one_that_pickles(sandbox: Sandbox) -> None:
    task = gym_repost.load_tasks(ROOT / "tasks" / "demo.jsonl")[0]
    env = make_task_env(task, sandbox=sandbox, max_steps=10, max_submissions=1)
    with pytest.raises(TypeError, match=r"given sandbox=\.\.\. cannot be sent.*sandbox_config=\.\.\. instead"):
        pickle.dumps(env)
    advised = make_task_env(task, sandbox=None, max_steps=10, max_submissions=1)
    assert pickle.loads(pickle.dumps(advised)).task == task  # the advice works
