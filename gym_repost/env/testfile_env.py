"""``gym_repost/TestFile-v0``: write the tests of a focal file of a real repository.

Spec (Gymnasium), the shape of ``gym_repost/Function-v0``:

* **Observation**: text. ``reset`` returns the task statement; each ``step`` returns the
  tool's output or an error message.
* **Action**: a tool call, ``{"tool": name, "args": {...}}`` or the same as a JSON string:
  ``list_files``, ``read_file``, ``search`` (the repository without its own test file for
  the focal file), ``write_tests {code}`` (the whole test file), ``run_tests``, ``submit``.
  Anything malformed is an error observation; the episode goes on.
* **Reward**: on a ``submit`` step, how much the submission's blend
  (:mod:`gym_repost.analysis.testfile_scoring`: gated by execution and pass rates, a
  weighted mean of line coverage, branch coverage and mutation score relative to the
  repository's own tests) improves on the best earlier submission of the episode; 0.0 on
  every other step. The return of an episode is its best submission's blend.
* **terminated**: a submission *passed* (the file runs, every test passes, the blend
  reaches ``reward.pass_threshold``, 0.9 by default), or ``max_submissions`` submissions
  were made. **truncated**: the step budget ran out.
* **info**: task id and name, the tool called, whether it succeeded, budgets used, the
  best blend so far, and the latest report (``test_report``: ``passed``, ``status``,
  metrics, relative metrics, ``reward``, failing tests, missing lines and branches,
  surviving mutants), never wall-clock timings.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from gym_repost.analysis.testfile_report import TestFileReport
from gym_repost.analysis.testfile_scoring import RewardConfig
from gym_repost.env.spaces import AnyText
from gym_repost.errors import ToolError
from gym_repost.prompting import render_prompt
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import TestFileTask
from gym_repost.tools import TestFileTools, ToolResult, parse_action, validate_args

SANDBOX_PRELOAD = ["pytest", "coverage"]
"""Modules the environment's own sandbox imports before forking a run (fast scoring)."""


def reward_text(config: RewardConfig) -> str:
    """The blend in words, for the task statement."""
    weights = " + ".join(f"{w:g} x {m.replace('_', ' ')}" for m, w in config.weights.items() if w > 0)
    total = sum(config.weights.values())
    gates = " x ".join(g.replace("_", " ") for g in config.gates)
    scale = "relative to the repository's own tests, capped at " + f"{config.cap:g}" if config.relative else "absolute"
    blend = f"({weights}) / {total:g}"
    return (f"{gates} x {blend}" if gates else blend) + f", each metric {scale}"


def task_statement(task: TestFileTask, tools: TestFileTools, max_steps: int, max_submissions: int) -> str:
    """The observation ``reset`` returns."""
    spec = task.evaluation
    return render_prompt(
        "gym_repost.env", "testfile_task.j2", spec=spec, repo=task.provenance.repo,
        n_files=len(task.repository.files), extra_path=[p for p in spec.python_path if p],
        plugins=", ".join(spec.plugins) or "none beyond pytest's own", reward=tools.reward,
        reward_text=reward_text(tools.reward), tools=tools.specs, max_steps=max_steps,
        max_submissions=max_submissions)


class TestFileEnv(gym.Env[str, str]):
    """A Repo-Smith test-file task as a Gymnasium environment.

    Args:
        task: the task (a :class:`TestFileTask` or its JSON-like dict).
        sandbox: a started sandbox to run tests in (shared, not closed by this one); by
            default the environment starts a local sandbox (with pytest and coverage
            preloaded) on the first test run and closes it in :meth:`close`.
        sandbox_config: options for the default local sandbox.
        max_steps: step budget (truncation).
        max_submissions: submissions allowed: repair iterations + 1.
        reward: the blend (a :class:`RewardConfig` or its fields as a dict).
    """

    __test__ = False  # not a pytest test class
    metadata = {"render_modes": ["ansi"]}

    def __init__(self, task: TestFileTask | dict[str, Any], *, sandbox: Sandbox | None = None,
                 sandbox_config: dict[str, Any] | None = None, max_steps: int = 30,
                 max_submissions: int = 1, reward: RewardConfig | dict[str, Any] | None = None,
                 render_mode: str | None = None) -> None:
        if max_steps < 1 or max_submissions < 1:
            raise ValueError("max_steps and max_submissions must be at least 1")
        self.task = task if isinstance(task, TestFileTask) else TestFileTask.model_validate(task)
        self.reward_config = reward if isinstance(reward, RewardConfig) else RewardConfig(**(reward or {}))
        self.max_steps = max_steps
        self.max_submissions = max_submissions
        self.render_mode = render_mode
        self._shared_sandbox = sandbox
        self._own_sandbox: Sandbox | None = None
        self._sandbox_config = {"preload": SANDBOX_PRELOAD, **(sandbox_config or {})}
        self.observation_space = AnyText()
        self.action_space = AnyText(max_length=250_000)
        self._tools = self._new_tools()
        self._reset_counters()
        self._last_observation = ""

    def _sandbox(self) -> Sandbox:
        if self._shared_sandbox is not None:
            return self._shared_sandbox
        if self._own_sandbox is None:
            from gym_repost.sandbox import get_sandbox

            self._own_sandbox = get_sandbox("local", **self._sandbox_config)
            self._own_sandbox.start()
        return self._own_sandbox

    def _new_tools(self) -> TestFileTools:
        return TestFileTools(self.task, self._sandbox, self.reward_config)

    def _reset_counters(self) -> None:
        self._steps = 0
        self._submissions = 0
        self._solved = False
        self._done = False
        self._best = 0.0
        self._last_report: dict[str, Any] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        """Start an episode: the statement of the task and the budgets."""
        super().reset(seed=seed)
        self._tools = self._new_tools()
        self._reset_counters()
        self._last_observation = task_statement(self.task, self._tools, self.max_steps, self.max_submissions)
        return self._last_observation, self._info(None, ok=True)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run one tool call (see the module docstring for the contract)."""
        if self._done:
            text = "Error: the episode is over; call reset() to start a new one."
            return text, 0.0, True, False, self._info(None, ok=False)
        self._steps += 1
        name: str | None = None
        reward = 0.0
        try:
            name, args = parse_action(action)
            if name == "submit":
                result, reward = self._submit(args)
            else:
                result = self._tools.call(name, args)
        except ToolError as exc:
            result = ToolResult(f"Error: {exc}", ok=False)
        if "test_report" in result.data:
            self._last_report = result.data["test_report"]
        terminated = self._solved or self._submissions >= self.max_submissions
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        self._last_observation = result.output
        return result.output, reward, terminated, truncated, self._info(name, ok=result.ok)

    def _submit(self, args: dict[str, Any]) -> tuple[ToolResult, float]:
        validate_args(self._tools.spec("submit"), args)
        report = self._tools.test_current()
        self._submissions += 1
        self._solved = report.passed
        gain = max(0.0, report.reward - self._best)
        self._best = max(self._best, report.reward)
        data = {"test_report": report.model_dump(mode="json"), "submission": self._submissions}
        return ToolResult(self._submission_text(report), ok=True, data=data), gain

    def _submission_text(self, report: TestFileReport) -> str:
        if report.passed:
            return f"Submission accepted: reward {report.reward:.3f}.\n\n" + report.to_text()
        left = self.max_submissions - self._submissions
        return (f"Submission scored {report.reward:.3f}, below the bar "
                f"({left} submission{'s' if left != 1 else ''} left).\n\n" + report.to_text())

    def _info(self, tool: str | None, ok: bool) -> dict[str, Any]:
        return {
            "task_id": self.task.id, "task_name": self.task.name, "tool": tool, "ok": ok,
            "steps": self._steps, "max_steps": self.max_steps,
            "submissions": self._submissions, "max_submissions": self.max_submissions,
            "solved": self._solved, "code_written": self._tools.code is not None,
            "best_reward": self._best, "test_report": self._last_report,
        }

    @property
    def code(self) -> str | None:
        """The test file written so far in this episode."""
        return self._tools.code

    def render(self) -> str | None:
        """``ansi``: the last observation."""
        return self._last_observation if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Close the sandbox this environment started (a shared one is left alone)."""
        if self._own_sandbox is not None:
            self._own_sandbox.close()
            self._own_sandbox = None
        super().close()
