"""Gymnasium's own machinery over our environments, with its defaults (issue 15, items 4 and
10): ``make_vec`` in async mode with shared memory, ``spec.to_json()``, ``check_env``."""

from __future__ import annotations

import copy
import json
import warnings

import gymnasium as gym
import pytest
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory
from testfile_tasks import tiny_testfile_task  # noqa: F401 - a fixture

import gym_repost
from gym_repost.env.spaces import AnyText
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
