"""Branch coverage of one function (the target) reached by a task's tests.

As RepoST measures it: the ground truth is inserted as the candidate and coverage.py
records which lines and branches of that copy the tests execute; only the target's own
lines count (its dependencies and the tests are left out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gym_repost.errors import CandidateError, SandboxError
from gym_repost.harness import SCRIPT_NAME, WALL_FACTOR, assemble
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.programs import run_program
from gym_repost.task import FunctionTask


@dataclass(frozen=True)
class FunctionCoverage:
    """Coverage of the target function's lines.

    ``branch_coverage`` is 1.0 for a function without branches (as RepoST reports it);
    ``branches`` tells the two cases apart. Line numbers are the function's own (1 is
    its first line, decorators included).
    """

    line_coverage: float
    branch_coverage: float
    branches: int
    missing_lines: list[int] = field(default_factory=list)
    missing_branches: list[tuple[int, int]] = field(default_factory=list)
    outcome: str = "passed"


def _ratio(hit: int, miss: int) -> float:
    return 1.0 if hit + miss == 0 else hit / (hit + miss)


def measure_coverage(
    sandbox: Sandbox, task: FunctionTask, code: str | None = None, timeout: float | None = None
) -> FunctionCoverage:
    """Branch and line coverage of ``code`` (default: the ground truth) under the tests.

    Raises:
        SandboxError: the measurement could not run (no coverage.py in the sandbox's
            Python, or the sandbox failed).
        CandidateError: ``code`` cannot be placed into the script.
    """
    assembled = assemble(task, code if code is not None else task.ground_truth)
    cpu = 3 * (timeout or task.evaluation.timeout)  # tracing slows the tests ~3x
    config = {"script": SCRIPT_NAME, "start": assembled.start_line, "end": assembled.end_line}
    run = run_program(
        sandbox.for_imports(task.metadata.external_packages),
        "coverage",
        {**task.evaluation.files, SCRIPT_NAME: assembled.script},
        config,
        timeout=WALL_FACTOR * cpu,
        cpu_seconds=cpu,
    )
    data = run.payload
    if data is None:
        result = run.result
        tail = (result.stderr or result.stdout)[-500:]
        raise SandboxError(
            f"coverage measurement of {task.name} produced no result ({run.problem}; "
            f"exit {result.returncode}, timed out: {result.timed_out}): {tail}"
        )
    if "error" in data:
        raise SandboxError(str(data["error"]))
    try:
        return _coverage(data, assembled.start_line - 1)
    except (KeyError, TypeError, ValueError) as exc:  # the tests share the output and may forge it
        raise SandboxError(f"coverage measurement of {task.name} gave a malformed result ({exc!r})") from None


def _coverage(data: dict[str, Any], offset: int) -> FunctionCoverage:
    hit_b, miss_b = data["executed_branches"], data["missing_branches"]
    return FunctionCoverage(
        line_coverage=_ratio(len(data["executed_lines"]), len(data["missing_lines"])),
        branch_coverage=_ratio(len(hit_b), len(miss_b)),
        branches=len(hit_b) + len(miss_b),
        missing_lines=[n - offset for n in data["missing_lines"]],
        missing_branches=[(a - offset, b - offset if b > 0 else b) for a, b in miss_b],
        outcome=str(data["outcome"]),
    )


__all__ = ["CandidateError", "FunctionCoverage", "measure_coverage"]
