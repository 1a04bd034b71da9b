"""The oracle: writes the ground truth and submits. A positive control.

A :class:`~gym_repost.policy.base.PrivilegedPolicy`: the runner hands it the ground truth
(no agent gets it). For a test-file task the ground truth is the repository's own test
file, written with ``write_tests``.
"""

from __future__ import annotations

from typing import Any

from gym_repost.policy.base import Action, PrivilegedPolicy, tool_call
from gym_repost.task_view import TaskView


class OraclePolicy(PrivilegedPolicy):
    """Writes the task's ground truth, then submits (again, if a submission fails)."""

    name = "oracle"

    def reset(
        self, task: TaskView, observation: str, info: dict[str, Any], *, seed: int, ground_truth: str | None = None
    ) -> None:
        """Remember the ground truth the runner handed over."""
        if ground_truth is None:
            raise ValueError("the oracle needs the ground truth (reset(..., ground_truth=...))")
        self._code = ground_truth
        self._tool = "write_tests" if task.kind == "testfile" else "write_code"
        self._written = False

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        """``write_code(ground truth)`` (``write_tests``) first, then ``submit``."""
        if not self._written:
            self._written = True
            return tool_call(self._tool, code=self._code)
        return tool_call("submit")
