"""``gym_repost/Function-v0``: write a function of a real repository.

Spec (Gymnasium):

* **Observation**: text (what a model reads). ``reset`` returns the task statement;
  each ``step`` returns the tool's output or an error message.
* **Action**: a tool call, ``{"tool": name, "args": {...}}`` or the same as a JSON
  string. Anything malformed is an error observation; the episode goes on.
* **Reward**: ``binary`` (default): 1.0 on the step whose submission passes every test,
  else 0.0. ``shaped``: as binary, plus 0.1 for a failing submission whose code ran and
  only failed assertions (0.0 for errors, timeouts and code that could not be placed).
* **terminated**: a submission passed, or ``max_submissions`` submissions were made
  (``max_submissions`` = repair iterations + 1). **truncated**: the step budget ran out.
* **info**: task id and name, the tool called, whether it succeeded, budgets used, and
  the latest test report (``test_report``), never wall-clock timings; ``infra_error``:
  None, or the message of the infrastructure failure (the sandbox failed) that ended the
  episode with ``truncated=True`` (such an episode is not scored).
* ``step`` never raises, whatever the action (see :meth:`ToolEnv.step`).
"""

from __future__ import annotations

from typing import Any, Literal

from gym_repost.env.base import ToolEnv
from gym_repost.prompting import render_prompt
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask
from gym_repost.tools import FunctionTools, ToolResult, validate_args

RewardMode = Literal["binary", "shaped"]


def task_statement(task: FunctionTask, tools: FunctionTools, max_steps: int, max_submissions: int) -> str:
    """The observation ``reset`` returns."""
    header = "\n".join([f"@{d}" for d in task.target.decorators] + [task.target.signature])
    if task.target.docstring:
        doc = task.target.docstring.replace('"""', '\\"\\"\\"')
        header += '\n    """' + doc.replace("\n", "\n    ") + '"""'
    return render_prompt(
        "gym_repost.env",
        "function_task.j2",
        target=task.target,
        repo=task.provenance.repo,
        file=task.repository.target_file,
        n_files=len(task.repository.files),
        complete=task.repository.complete,
        header=header,
        tools=tools.specs,
        max_steps=max_steps,
        max_submissions=max_submissions,
    )


class FunctionEnv(ToolEnv):
    """A RepoST function task as a Gymnasium environment.

    Args:
        task: the task (a :class:`FunctionTask` or its JSON-like dict).
        sandbox: a started sandbox to run tests in (shared with other environments, not
            closed by this one); by default the environment creates a local sandbox on
            the first test run and closes it in :meth:`close`.
        sandbox_config: options for the default local sandbox.
        max_steps: step budget (truncation).
        max_submissions: submissions allowed: repair iterations + 1.
        reward: ``binary`` or ``shaped`` (see the module docstring).
    """

    def __init__(
        self,
        task: FunctionTask | dict[str, Any],
        *,
        sandbox: Sandbox | None = None,
        sandbox_config: dict[str, Any] | None = None,
        max_steps: int = 30,
        max_submissions: int = 1,
        reward: RewardMode = "binary",
        render_mode: str | None = None,
    ) -> None:
        if reward not in ("binary", "shaped"):
            raise ValueError(f"reward must be 'binary' or 'shaped', not {reward!r}")
        self.task = task if isinstance(task, FunctionTask) else FunctionTask.model_validate(task)
        self.reward_mode = reward
        super().__init__(
            sandbox=sandbox,
            sandbox_config=sandbox_config,
            max_steps=max_steps,
            max_submissions=max_submissions,
            render_mode=render_mode,
        )

    def _new_tools(self) -> FunctionTools:
        return FunctionTools(self.task, self._sandbox)

    def _statement(self) -> str:
        return task_statement(self.task, self._tools, self.max_steps, self.max_submissions)

    def _submit(self, args: dict[str, Any]) -> tuple[ToolResult, float]:
        validate_args(self._tools.spec("submit"), args)
        report = self._tools.test_current()
        self._submissions += 1
        self._solved = report.passed
        left = self.max_submissions - self._submissions
        if report.passed:
            text = "Submission accepted: all tests passed."
        else:
            text = f"Submission failed ({left} submission{'s' if left != 1 else ''} left).\n" + report.to_text()
        reward = 1.0 if report.passed else (0.1 if self.reward_mode == "shaped" and report.status == "failed" else 0.0)
        data = {"test_report": report.model_dump(), "submission": self._submissions}
        return ToolResult(text, ok=True, data=data), reward
