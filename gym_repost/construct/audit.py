"""``gym-repost audit``: how often a task rewards code its repository's own tests reject.

A task rewards a candidate its tests cannot tell from the ground truth, so weak tests are a
forged reward any policy finds by itself. The audit measures it against an oracle the
builder never saw, the repository's own test suite:

1. the upstream suite runs once under coverage.py, a context per test: each target's
   *covering* tests are those that ran a line of its body and passed
   (:mod:`gym_repost.programs.upstream`, mode ``cover``);
2. mutants of each target (:data:`~gym_repost.analysis.mutation.OPERATORS` and the audit's
   own :data:`~gym_repost.analysis.mutation.AUDIT_OPERATORS`, a reproducible sample) are
   run against its covering tests in the sandbox, the file on disk holding the mutant
   (mode ``kill``); a mutant those tests reject is *known wrong*;
3. each known-wrong mutant is submitted to the task as an agent's ``submit`` would be
   (:func:`~gym_repost.harness.run_function_tests`): one the task rewards is a *false
   accept*.

Budgets count work: CPU seconds per mutant (a multiple of its covering tests' own), a CPU
budget per task, mutants per task; never the wall clock.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from gym_repost.analysis.mutation import AUDIT_OPERATORS, OPERATORS, Mutant, generate_mutants, sample_mutants
from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source import dedent_code, find_function
from gym_repost.construct.stages import SourceRepository
from gym_repost.construct.testgen.trace import pytest_arguments, source_roots
from gym_repost.harness import run_function_tests
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.programs import WALL_STRETCH, run_program
from gym_repost.task import FunctionTask

logger = logging.getLogger(__name__)

MUTANTS = 30
"""Mutants of a target tried by default (a reproducible sample of all of them)."""
CPU_FACTOR = 10.0
"""A mutant's run may use this many times its covering tests' CPU seconds..."""
CPU_FLOOR = 5.0
"""... plus this many (pytest's start and the collection of the test files)."""
COVER_CPU = 600.0
"""CPU seconds of the coverage run of the whole upstream suite."""
TASK_BUDGET = 300.0
"""CPU seconds of one target's mutant runs together; the rest are ``not run``."""
WALL_FACTOR = 3.0

AuditStatus = Literal["audited", "uncovered", "not found", "changed", "error"]
UpstreamVerdict = Literal["killed", "timeout", "survived", "not run"]


@dataclass
class AuditedMutant:
    """One mutant of a target: what the upstream tests said, and what the task said."""

    operator: str
    line: int
    original: str
    replacement: str
    upstream: UpstreamVerdict
    killed_by: str | None = None
    accepted: bool | None = None
    """The task rewarded it (None: not submitted, it is not known wrong)."""


@dataclass
class TaskAudit:
    """The audit of one task."""

    task_id: str
    task_name: str
    status: AuditStatus
    detail: str = ""
    covering_tests: int = 0
    mutants: list[AuditedMutant] = field(default_factory=list)

    @property
    def known_wrong(self) -> list[AuditedMutant]:
        """Mutants the repository's own tests reject (failures and timeouts)."""
        return [m for m in self.mutants if m.upstream in ("killed", "timeout")]

    @property
    def false_accepts(self) -> list[AuditedMutant]:
        """Known-wrong mutants the task rewards."""
        return [m for m in self.known_wrong if m.accepted]

    @property
    def false_accept_rate(self) -> float | None:
        """False accepts over known-wrong mutants (None without any)."""
        wrong = self.known_wrong
        return len(self.false_accepts) / len(wrong) if wrong else None

    def record(self) -> dict[str, Any]:
        """The JSON record of ``audit --json``."""
        return {
            "task_id": self.task_id,
            "task": self.task_name,
            "status": self.status,
            "detail": self.detail,
            "covering_tests": self.covering_tests,
            "mutants": len(self.mutants),
            "known_wrong": len(self.known_wrong),
            "false_accepts": len(self.false_accepts),
            "false_accept_rate": self.false_accept_rate,
            "false_accepted_mutants": [asdict(m) for m in self.false_accepts],
        }


def audit_totals(audits: Sequence[TaskAudit]) -> dict[str, Any]:
    """Totals over tasks: known-wrong mutants, false accepts, tasks rewarding any."""
    wrong = sum(len(a.known_wrong) for a in audits)
    accepted = sum(len(a.false_accepts) for a in audits)
    with_wrong = [a for a in audits if a.known_wrong]
    return {
        "tasks": len(audits),
        "by_status": {s: sum(a.status == s for a in audits) for s in ("audited", "uncovered", "not found", "changed")},
        "tasks_with_known_wrong_mutants": len(with_wrong),
        "mutants": sum(len(a.mutants) for a in audits),
        "known_wrong": wrong,
        "false_accepts": accepted,
        "false_accept_rate": accepted / wrong if wrong else None,
        "tasks_rewarding_a_known_wrong_mutant": sum(bool(a.false_accepts) for a in audits),
        "share_of_tasks_rewarding_any": (
            sum(bool(a.false_accepts) for a in with_wrong) / len(with_wrong) if with_wrong else None
        ),
    }


@dataclass
class _Target:
    task: FunctionTask
    key: str
    file: str
    body: tuple[int, int]
    offset: int
    first_line: int
    mutants: list[Mutant]


def audit_tasks(
    sandbox: Sandbox,
    tasks: Sequence[FunctionTask],
    repo: SourceRepository,
    *,
    mutants: int = MUTANTS,
    seed: int = 0,
    workers: int = 2,
    on_result: Callable[[TaskAudit], None] | None = None,
) -> list[TaskAudit]:
    """Audit ``tasks`` (built from ``repo``) against ``repo``'s own test suite: one coverage
    run of the suite, then each task's mutants, ``workers`` tasks at a time.

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    audits: dict[str, TaskAudit] = {}
    targets: list[_Target] = []
    for task in tasks:
        found = _target(task, repo, mutants, seed)
        if isinstance(found, TaskAudit):
            audits[task.id] = found
        else:
            targets.append(found)
    covering = _covering(sandbox, repo, targets) if targets else {}

    def audit(target: _Target) -> TaskAudit:
        tests = covering.get(target.key)
        if tests is None:
            return TaskAudit(target.task.id, target.task.name, "error", "the coverage run failed")
        if not tests:
            return TaskAudit(target.task.id, target.task.name, "uncovered", "no passing upstream test runs its body")
        return _audit_target(sandbox, repo, target, tests)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        for target, result in zip(targets, pool.map(audit, targets)):
            audits[target.task.id] = result
            if on_result is not None:
                on_result(result)
    return [audits[t.id] for t in tasks]


def _target(task: FunctionTask, repo: SourceRepository, mutants: int, seed: int) -> _Target | TaskAudit:
    """The task's target in the upstream file, with its mutants; or why it cannot be audited."""
    path, qualname = task.provenance.file, task.provenance.qualname
    text = repo.files.get(path)
    span = find_function(text, qualname) if text is not None else None
    if text is None or span is None:
        return TaskAudit(task.id, task.name, "not found", f"{path}::{qualname} is not in {repo.name}")
    lines = text.split("\n")
    offset = sum(len(line) + 1 for line in lines[: span.start - 1])
    segment = "\n".join(lines[span.start - 1 : span.end])
    if not _same_code(dedent_code(segment), task.ground_truth):
        return TaskAudit(task.id, task.name, "changed", "the task's ground truth is not the repository's function")
    population = generate_mutants(segment, operators=(*OPERATORS, *AUDIT_OPERATORS))
    body = (span.def_line + 1, span.end)
    return _Target(task, task.id, path, body, offset, span.start, sample_mutants(population, mutants, seed))


def _same_code(a: str, b: str) -> bool:
    try:
        return ast.dump(parse_python(a)) == ast.dump(parse_python(b))
    except (SyntaxError, ValueError):
        return False


def _covering(sandbox: Sandbox, repo: SourceRepository, targets: list[_Target]) -> dict[str, list[list[Any]]]:
    """The passing upstream tests that run each target's body, with their CPU seconds."""
    config = {
        "mode": "cover",
        "args": pytest_arguments(repo, []),
        "sys_path": source_roots(repo),
        "files": sorted({t.file for t in targets}),
        "targets": [{"key": t.key, "file": t.file, "first": t.body[0], "last": t.body[1]} for t in targets],
        "cpu": COVER_CPU,
        "wall": WALL_FACTOR * COVER_CPU,
    }
    run = run_program(
        sandbox,
        "upstream",
        repo.files,
        config,
        timeout=WALL_STRETCH * WALL_FACTOR * COVER_CPU + 60.0,
        token=True,
        cpu_seconds=COVER_CPU + 30.0,
    )
    covering = (run.payload or {}).get("covering") if run.completed else None
    if not isinstance(covering, dict):
        logger.warning("audit of %s: the coverage run failed (%s)", repo.name, run.problem or run.payload)
        return {}
    return {k: v for k, v in covering.items() if isinstance(v, list)}


def _audit_target(sandbox: Sandbox, repo: SourceRepository, target: _Target, tests: list[list[Any]]) -> TaskAudit:
    """Run the target's mutants against its covering tests; submit the known-wrong ones."""
    nodeids = [str(test[0]) for test in tests]
    cpu = CPU_FACTOR * sum(float(test[1]) for test in tests) + CPU_FLOOR
    config = {
        "mode": "kill",
        "sys_path": source_roots(repo),
        "budget": TASK_BUDGET,
        "mutants": [
            {
                "id": i,
                "file": target.file,
                "start": target.offset + m.offset,
                "end": target.offset + m.offset + len(m.original),
                "replacement": m.replacement,
                "nodeids": nodeids,
                "cpu": cpu,
                "wall": WALL_FACTOR * cpu,
            }
            for i, m in enumerate(target.mutants)
        ],
    }
    run = run_program(
        sandbox,
        "upstream",
        repo.files,
        config,
        timeout=WALL_STRETCH * WALL_FACTOR * (TASK_BUDGET + cpu) + 60.0,
        token=True,
        cpu_seconds=TASK_BUDGET + cpu + 30.0,
    )
    verdicts = (run.payload or {}).get("mutants") if run.completed else None
    audit = TaskAudit(target.task.id, target.task.name, "audited", covering_tests=len(nodeids))
    if not isinstance(verdicts, list) or len(verdicts) != len(target.mutants):
        audit.status, audit.detail = "error", f"the mutant runs failed: {run.problem or 'no verdicts'}"
        return audit
    for mutant, verdict in zip(target.mutants, verdicts):
        status = verdict.get("status") if isinstance(verdict, dict) else None
        upstream: UpstreamVerdict = status if status in ("killed", "timeout", "survived") else "not run"
        line = target.first_line + mutant.line - 1
        audited = AuditedMutant(mutant.operator, line, mutant.original, mutant.replacement, upstream)
        by = verdict.get("by") if isinstance(verdict, dict) else None
        audited.killed_by = by if isinstance(by, str) else None
        if upstream in ("killed", "timeout"):
            submission = dedent_code(mutant.source)
            audited.accepted = run_function_tests(sandbox, target.task, submission).passed
        audit.mutants.append(audited)
    return audit
