"""Rollouts against served environments, the way TRL's GRPOTrainer drives them. Trains nothing.

Start a server, then roll out a policy against it::

    gym-repost serve tasks/demo.jsonl --port 8000
    python agents/served_rollouts.py http://127.0.0.1:8000 --tasks 4 --group 4
    python agents/served_rollouts.py http://127.0.0.1:8000 \\
        --policy llm:openai-compatible/Qwen/Qwen2.5-Coder-7B-Instruct --base-url http://localhost:8001/v1

:class:`ServedTask` has the shape TRL's ``environment_factory`` asks for: ``__init__()``
without arguments, ``reset(**row)`` with a dataset row's columns (here ``task_id``), and one
public method per tool, with a docstring, which the trainer offers the model as function
calls; a method raises once the episode is over, and the trainer feeds the message back
to the model. :func:`reward_func` is the reward function the trainer calls with the
finished environments. :func:`rollout_group` plays the trainer's part without a model:
a gym-repost policy (default: ``agents/my_agent.py:MyAgent``, an offline stand-in that
rarely passes; any ``--policy`` that ``gym-repost eval`` takes, an LLM included) chooses
the tool calls, and the group's rewards become GRPO's group-relative advantages.

In a real run, hand the same pieces to TRL (see the README's "Serving environments")::

    trainer = GRPOTrainer(model=..., train_dataset=Dataset.from_list(rows),
                          reward_funcs=reward_func, environment_factory=ServedTask, args=GRPOConfig(...))

The client holds no task file: the task it is shown is the view the server sends at reset
(``info["task_view"]``), never the ground truth or the tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gym_repost.serve import load_openenv
from gym_repost.task_view import TaskView
from gym_repost.tools import parse_action

SERVER_URL = "http://127.0.0.1:8000"
"""Where :class:`ServedTask` connects (TRL builds environments without arguments)."""


class ServedTask:
    """One rollout's environment: a session of the server at :data:`SERVER_URL`."""

    def __init__(self) -> None:
        self.client = load_openenv().GenericEnvClient(base_url=SERVER_URL, message_timeout_s=600).sync()
        self.reward = 0.0
        self.done = False
        self.info: dict[str, Any] = {}

    def reset(self, task_id: str | None = None, seed: int | None = None, **row: Any) -> str:
        """Start an episode on the row's task; returns the task statement."""
        result = self.client.reset(task_id=task_id, seed=seed)
        self.reward, self.done, self.info = 0.0, False, result.observation["info"]
        return result.observation["text"]

    def _call(self, tool: str, **args: Any) -> str:
        if self.done:
            raise ValueError("The episode is over: stop calling tools.")
        result = self.client.step({"tool": tool, "args": {k: v for k, v in args.items() if v is not None}})
        self.reward += result.reward or 0.0
        self.done, self.info = result.done, result.observation["info"]
        return result.observation["text"]

    def list_files(self, path: str = "") -> str:
        """List the repository's files.

        Args:
            path: a directory of the repository (default: its root).
        """
        return self._call("list_files", path=path or None)

    def read_file(self, path: str, start: int | None = None, end: int | None = None) -> str:
        """Read a file of the repository, with line numbers.

        Args:
            path: the file, relative to the repository's root.
            start: first line to show (1-based).
            end: last line to show.
        """
        return self._call("read_file", path=path, start=start, end=end)

    def search(self, pattern: str, path: str = "") -> str:
        """Search the repository for a regular expression.

        Args:
            pattern: the regular expression.
            path: a file or directory to search in (default: everywhere).
        """
        return self._call("search", pattern=pattern, path=path or None)

    def write_code(self, code: str) -> str:
        """Write the target function (function tasks): its whole source, signature included.

        Args:
            code: the function's full source.
        """
        return self._call("write_code", code=code)

    def write_tests(self, code: str) -> str:
        """Write the test file (test-file tasks): the whole pytest file.

        Args:
            code: the test file's source.
        """
        return self._call("write_tests", code=code)

    def run_tests(self) -> str:
        """Run the tests on what was written; returns the report."""
        return self._call("run_tests")

    def submit(self) -> str:
        """Submit what was written for scoring; returns the verdict."""
        return self._call("submit")

    def close(self) -> None:
        """End the session."""
        self.client.close()


def reward_func(environments: Sequence[ServedTask], **kwargs: Any) -> list[float]:
    """TRL's reward function: each finished environment's return."""
    return [env.reward for env in environments]


def served_tasks(url: str) -> list[dict[str, str]]:
    """The server's tasks (``GET /tasks``): id, name, kind."""
    with urllib.request.urlopen(f"{url}/tasks") as response:
        return json.loads(response.read())["tasks"]


def play(env: ServedTask, policy: Any, row: dict[str, Any], seed: int, max_turns: int = 64) -> None:
    """What the trainer does for one generation: reset with the row, then run the tool
    calls the model (here ``policy``) makes, feeding back results and errors."""
    observation = env.reset(**row, seed=seed)
    policy.reset(TaskView.model_validate(env.info["task_view"]), observation, env.info, seed=seed)
    for _ in range(max_turns):
        if env.done:
            return
        try:
            tool, args = parse_action(policy.act(observation, env.info))
            method = getattr(env, tool, None) if not tool.startswith("_") else None
            if method is None or tool in ("reset", "close"):
                raise ValueError(f"unknown tool {tool!r}")
            observation = method(**args)
        except Exception as exc:  # the trainer hands the model the error as the tool's result
            observation = f"Error: {exc}"


def rollout_group(
    make_policy: Callable[[], Any], row: dict[str, Any], group: int, *, workers: int = 16
) -> tuple[list[float], list[float]]:
    """``group`` generations of one prompt, concurrently; their rewards and GRPO advantages
    (reward minus the group's mean, over the group's standard deviation)."""
    environments = [ServedTask() for _ in range(group)]
    try:
        with ThreadPoolExecutor(min(workers, group)) as pool:
            list(pool.map(lambda i: play(environments[i], make_policy(), row, seed=i), range(group)))
        rewards = reward_func(environments)
    finally:
        for env in environments:
            env.close()
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return rewards, [(r - mean) / (std + 1e-4) for r in rewards]


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Roll out ``--group`` generations for each of the first ``--tasks`` served tasks."""
    global SERVER_URL
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:8000", help="The server (gym-repost serve).")
    parser.add_argument("--policy", default="agents/my_agent.py:MyAgent", help="As gym-repost eval --policy.")
    parser.add_argument("--base-url", default=None, help="The model's endpoint, for llm: policies.")
    parser.add_argument("--tasks", type=int, default=4, help="Prompts (tasks) to roll out.")
    parser.add_argument("--group", type=int, default=4, help="Generations per prompt (GRPO's group size).")
    options = parser.parse_args(argv)
    from gym_repost.errors import ConfigError
    from gym_repost.policy import PrivilegedPolicy, load_policy

    SERVER_URL = options.url.rstrip("/")
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
        served = served_tasks(SERVER_URL)
    except OSError as exc:  # URLError: nothing listens there
        reason = getattr(exc, "reason", exc)
        raise ConfigError(f"cannot reach {SERVER_URL} ({reason}); start it with `gym-repost serve TASKS`") from None
    rows = [{"task_id": t["id"]} for t in served if t["kind"] == "function"][: options.tasks]
    results = []
    for row in rows:
        rewards, advantages = rollout_group(make_policy, row, options.group)
        results.append({**row, "rewards": rewards, "advantages": advantages})
        print(f"{row['task_id']}: rewards {rewards}, advantages {[round(a, 2) for a in advantages]}")
    return results


def cli(argv: Sequence[str] | None = None) -> int:
    """:func:`main` as a command: an error is one ``error:`` line and exit status 2."""
    from gym_repost.errors import GymRepostError

    try:
        main(argv)
    except GymRepostError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
