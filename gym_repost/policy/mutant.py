"""The mutant policy: submits mutants of the ground truth. A negative control.

A :class:`~gym_repost.policy.base.PrivilegedPolicy`: the runner hands it the ground truth.

Each submission is a different mutant (chosen with the episode's seed), so with repair
iterations the policy "repairs" by trying another mutant. A task whose tests accept a
mutant has weak tests (or the mutant is equivalent). When the ground truth has no
mutants, the policy submits a candidate that does nothing (``return None``).

For a test-file task the "mutant" is the ground-truth test file disarmed
(:func:`~gym_repost.analysis.pytest_files.disarm_tests`): assertions removed and every
test body wrapped in ``try/except``, so it runs the same code and covers the same lines
but no mutant can make a test fail (only hanging ones count as killed). Its mutation
score, and with it the reward, falls well below the ground truth's and it must not pass.
(Removing the assertions alone is a weaker control: tests still kill the mutants that
make the code raise, which on real repositories is often most of what the ground truth
kills.) Every submission is that same file.
"""

from __future__ import annotations

from typing import Any

from gym_repost.analysis.mutation import generate_mutants, sample_mutants
from gym_repost.analysis.pytest_files import disarm_tests
from gym_repost.policy.base import Action, PrivilegedPolicy, tool_call
from gym_repost.task_view import TargetView, TaskView


def returns_none(target: TargetView) -> str:
    """The target's decorators and signature over a body that returns None."""
    return "\n".join([f"@{d}" for d in target.decorators] + [target.signature, "    return None"]) + "\n"


class MutantPolicy(PrivilegedPolicy):
    """Writes a mutant of the ground truth, submits, and tries another on failure."""

    name = "mutant"

    def __init__(self, max_mutants: int = 20) -> None:
        self.max_mutants = max_mutants

    def reset(
        self, task: TaskView, observation: str, info: dict[str, Any], *, seed: int, ground_truth: str | None = None
    ) -> None:
        """Pick this episode's mutants of the ground truth the runner handed over."""
        if ground_truth is None:
            raise ValueError("the mutant policy needs the ground truth (reset(..., ground_truth=...))")
        self._tool = "write_tests" if task.kind == "testfile" else "write_code"
        self._submitted = 0
        self._pending_write = True
        if task.kind == "testfile":
            self._queue = [disarm_tests(ground_truth)]
            return
        assert task.target is not None
        mutants = generate_mutants(ground_truth)
        chosen = sample_mutants(mutants, min(self.max_mutants, len(mutants)), seed)
        self._queue = [m.source for m in chosen] or [returns_none(task.target)]

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        """Alternate ``write_code(next mutant)`` and ``submit``."""
        if self._pending_write:
            self._pending_write = False
            code = self._queue[self._submitted % len(self._queue)]
            return tool_call(self._tool, code=code)
        self._submitted += 1
        self._pending_write = True
        return tool_call("submit")
