"""Rollouts against served environments, the way TRL's GRPOTrainer drives them. Trains nothing.

Start a server, then roll out a policy against it::

    gym-repost serve tasks/demo.jsonl --port 8000
    python agents/served_rollouts.py http://127.0.0.1:8000 --tasks 4 --group 4
    python agents/served_rollouts.py http://127.0.0.1:8000 \\
        --policy llm:openai-compatible/Qwen/Qwen2.5-Coder-7B-Instruct --base-url http://localhost:8001/v1

The environments are the package's (:mod:`gym_repost.serve.trl`: ``ServedTask``,
``reward_func``, ``close_all``); this script plays the trainer's part without a model: a
gym-repost policy (default: ``agents/my_agent.py:MyAgent``, an offline stand-in that
rarely passes; any ``--policy`` that ``gym-repost eval`` takes and that acts on the task's
view, an LLM included) chooses the tool calls among the methods TRL would offer, and the
group's rewards become GRPO's group-relative advantages. ``benchmarks/trl_grpo.py`` runs
TRL's real ``GRPOTrainer`` on the same environments.

The client holds no task file: the task it is shown is the view the server sends at reset
(``info["task_view"]``), never the ground truth or the tests.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gym_repost.errors import ConfigError, GymRepostError
from gym_repost.serve.trl import ServedEnvironment, ServedTask, close_all, dataset_rows, reward_func
from gym_repost.task_view import TaskView
from gym_repost.tools import parse_action


def offered_tools(env: ServedEnvironment) -> dict[str, Callable[..., str]]:
    """The methods TRL offers the model: the public functions of the environment's class,
    but ``reset`` and ``get_reward``."""
    names = [n for n, _ in inspect.getmembers(type(env), inspect.isfunction) if not n.startswith("_")]
    return {n: getattr(env, n) for n in names if n not in ("reset", "get_reward")}


def play(env: ServedEnvironment, policy: Any, row: dict[str, Any], seed: int, max_turns: int = 64) -> None:
    """What the trainer does for one generation: reset with the row, then run the tool
    calls the model (here ``policy``) makes, feeding back results and errors."""
    observation = env.reset(**row, seed=seed)
    policy.reset(TaskView.model_validate(env.info["task_view"]), observation, env.info, seed=seed)
    tools = offered_tools(env)
    for _ in range(max_turns):
        if env.done:
            return
        try:
            tool, args = parse_action(policy.act(observation, env.info))
            if tool not in tools:
                raise ValueError(f"Tool {tool} not found.")
            observation = tools[tool](**args)
        except Exception as exc:  # the trainer hands the model the error as the tool's result
            observation = f"Error: {exc}"


def rollout_group(
    url: str, make_policy: Callable[[], Any], row: dict[str, Any], group: int, *, workers: int = 16
) -> tuple[list[float], list[float]]:
    """``group`` generations of one prompt, concurrently; their rewards and GRPO advantages
    (reward minus the group's mean, over the group's standard deviation)."""
    environments = [ServedTask(url) for _ in range(group)]
    try:
        with ThreadPoolExecutor(min(workers, group)) as pool:
            list(pool.map(lambda i: play(environments[i], make_policy(), row, seed=i), range(group)))
        rewards = reward_func(environments)
    finally:
        close_all(environments)
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return rewards, [(r - mean) / (std + 1e-4) for r in rewards]


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Roll out ``--group`` generations for each of the first ``--tasks`` served function tasks.

    Raises:
        ConfigError: the policy cannot be built, needs the ground truth, or the server is
            not there.
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:8000", help="The server (gym-repost serve).")
    parser.add_argument("--policy", default="agents/my_agent.py:MyAgent", help="As gym-repost eval --policy.")
    parser.add_argument("--base-url", default=None, help="The model's endpoint, for llm: policies.")
    parser.add_argument("--tasks", type=int, default=4, help="Prompts (tasks) to roll out.")
    parser.add_argument("--group", type=int, default=4, help="Generations per prompt (GRPO's group size).")
    options = parser.parse_args(argv)
    from gym_repost.policy import PrivilegedPolicy, load_policy

    url = options.url.rstrip("/")
    make_policy = load_policy(options.policy, **({"base_url": options.base_url} if options.base_url else {}))
    probe = make_policy()
    needs_ground_truth = isinstance(probe, PrivilegedPolicy) and probe.needs_ground_truth
    getattr(probe, "close", lambda: None)()
    if needs_ground_truth:
        raise ConfigError(
            f"--policy {options.policy}: this control needs the task's ground truth, which a served "
            "environment never sends to its clients; give an agent (a file.py:Class, llm:PROVIDER/MODEL)"
        )
    try:
        rows = dataset_rows(url, kind="function", limit=options.tasks)
    except OSError as exc:  # URLError: nothing listens there
        reason = getattr(exc, "reason", exc)
        raise ConfigError(f"cannot reach {url} ({reason}); start it with `gym-repost serve TASKS`") from None
    results = []
    for row in rows:
        row = {"task_id": row["task_id"]}
        rewards, advantages = rollout_group(url, make_policy, row, options.group)
        results.append({**row, "rewards": rewards, "advantages": advantages})
        print(f"{row['task_id']}: rewards {rewards}, advantages {[round(a, 2) for a in advantages]}")
    return results


def cli(argv: Sequence[str] | None = None) -> int:
    """:func:`main` as a command: an error is one ``error:`` line and exit status 2."""
    try:
        main(argv)
    except GymRepostError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
