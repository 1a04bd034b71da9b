"""``gym_repost/TestFile-v0``: write the tests of a focal file of a real repository.

Spec (Gymnasium), the shape of ``gym_repost/Function-v0``:

* **Observation**: text. ``reset`` returns the task statement; each ``step`` returns the
  tool's output or an error message.
* **Action**: a tool call, ``{"tool": name, "args": {...}}`` or the same as a JSON string:
  ``list_files``, ``read_file``, ``search`` (the repository without its own test file for
  the focal file), ``write_tests {code}`` (the whole test file), ``run_tests``, ``submit``.
  Anything malformed is an error observation; the episode goes on.
* **Reward**: on a ``submit`` step, how much the submission's blend
  (:mod:`gym_repost.harness.testfile_scoring`: gated by execution and pass rates, a
  weighted mean of line coverage, branch coverage and mutation score relative to the
  repository's own tests) improves on the best earlier submission of the episode; 0.0 on
  every other step. The return of an episode is its best submission's blend.
* **terminated**: a submission *passed* (the file runs, every test passes, the blend
  reaches ``reward.pass_threshold``, 0.9 by default), or ``max_submissions`` submissions
  were made. **truncated**: the step budget ran out.
* **info**: task id and name, the tool called, whether it succeeded, budgets used, the
  best blend so far, and the latest report (``test_report``: ``passed``, ``status``,
  metrics, relative metrics, ``reward``, failing tests, missing lines and branches,
  surviving mutants), never wall-clock timings; ``infra_error`` as in ``Function-v0``.
* ``step`` never raises, whatever the action (see :meth:`ToolEnv.step`).
"""

from __future__ import annotations

from typing import Any

from gym_repost.env.base import ToolEnv
from gym_repost.harness.testfile_report import TestFileReport
from gym_repost.harness.testfile_scoring import RewardConfig
from gym_repost.prompting import render_prompt
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import TestFileTask
from gym_repost.tools import TestFileTools, ToolResult, validate_args

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
        "gym_repost.env",
        "testfile_task.j2",
        spec=spec,
        repo=task.provenance.repo,
        n_files=len(task.repository.files),
        extra_path=[p for p in spec.python_path if p],
        plugins=", ".join(spec.plugins) or "none beyond pytest's own",
        reward=tools.reward,
        reward_text=reward_text(tools.reward),
        tools=tools.specs,
        max_steps=max_steps,
        max_submissions=max_submissions,
    )


class TestFileEnv(ToolEnv):
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

    def __init__(
        self,
        task: TestFileTask | dict[str, Any],
        *,
        sandbox: Sandbox | None = None,
        sandbox_config: dict[str, Any] | None = None,
        max_steps: int = 30,
        max_submissions: int = 1,
        reward: RewardConfig | dict[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        self.task = task if isinstance(task, TestFileTask) else TestFileTask.model_validate(task)
        self.reward_config = reward if isinstance(reward, RewardConfig) else RewardConfig(**(reward or {}))
        super().__init__(
            sandbox=sandbox,
            sandbox_config={"preload": SANDBOX_PRELOAD, **(sandbox_config or {})},
            max_steps=max_steps,
            max_submissions=max_submissions,
            render_mode=render_mode,
        )

    def _new_tools(self) -> TestFileTools:
        return TestFileTools(self.task, self._sandbox, self.reward_config)

    def _statement(self) -> str:
        return task_statement(self.task, self._tools, self.max_steps, self.max_submissions)

    def _reset_counters(self) -> None:
        super()._reset_counters()
        self._best = 0.0

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
        return (
            f"Submission scored {report.reward:.3f}, below the bar "
            f"({left} submission{'s' if left != 1 else ''} left).\n\n" + report.to_text()
        )

    def _extra_info(self) -> dict[str, Any]:
        return {"best_reward": self._best}
