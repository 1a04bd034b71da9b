"""Run a test file against its focal file in the sandbox: outcomes, coverage and mutants.

One sandbox run per scoring. The in-sandbox program (:mod:`gym_repost.programs.testfile`) runs the test
file once with pytest under coverage.py with a context per test, learns which tests
cover which lines of the focal file, then runs each mutant in a child forked from the
running session with the mutant loaded from memory, only the tests covering the mutated
line, and a timeout relative to those tests' baseline time.

>>> run = run_test_file(sandbox, task, test_source)
>>> run.status, [t.outcome for t in run.tests], run.mutation

The mutants are a seeded sample (``task.evaluation.max_mutants``) of every mutant of the
focal file, so the ground truth and every candidate test file face the same ones; the
score's interval reports the sampling uncertainty (finite population corrected).
"""

from __future__ import annotations

import ast
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from gym_repost.analysis.mutation import Mutant, MutationScore, generate_mutants, mutation_score, sample_mutants
from gym_repost.analysis.parsing import parse_python
from gym_repost.errors import SandboxError
from gym_repost.sandbox import programs
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.programs import ProgramRun, program_file, run_program
from gym_repost.task import TestFileTask

logger = logging.getLogger(__name__)

PROGRAM_NAME = program_file("testfile")
"""File name of the in-sandbox program (:mod:`gym_repost.programs.testfile`) inside the run directory."""
_GRACE = 20.0
_OUTPUT = 1500

RunStatus = Literal["completed", "invalid", "timeout", "crashed", "error"]
Outcome = Literal["passed", "failed", "error", "timeout", "skipped"]
MutantStatus = Literal["killed", "survived", "timeout", "uncovered", "unapplied", "not run"]


def program_source() -> str:
    """Text of the in-sandbox program (:mod:`gym_repost.programs.testfile`)."""
    return programs.program_source("testfile")


@dataclass(frozen=True)
class TestOutcome:
    """One test of the file: how it ended, and why when it did not pass.

    ``outcome``: ``passed``; ``failed`` (an assertion failed or ``pytest.fail``);
    ``error`` (another exception, or a fixture failed); ``timeout`` (the test overran its
    limit); ``skipped`` (skips and expected failures).
    """

    __test__ = False  # not a pytest test class

    nodeid: str
    outcome: Outcome
    phase: str | None = None
    exception: str | None = None
    message: str = ""
    longrepr: str = ""


@dataclass(frozen=True)
class CollectionError:
    """The file (or a part of it) could not be imported or collected."""

    nodeid: str
    message: str
    longrepr: str


@dataclass(frozen=True)
class MutantOutcome:
    """What the tests did to one mutant.

    ``status``: ``killed`` (a test failed, or the run crashed), ``survived`` (every
    covering test passed), ``timeout`` (the run overran its limit; counts as killed),
    ``uncovered`` (no passing test runs the mutated line; counts as survived),
    ``unapplied`` (the change could not be loaded into the running module; not scored),
    ``not run`` (the mutation budget ran out first; not scored).
    """

    mutant: Mutant
    status: MutantStatus
    killed_by: str | None = None
    detail: str | None = None


@dataclass
class TestFileRun:
    """Everything one run of a test file measured.

    ``status``: ``completed``; ``invalid`` (the file does not parse: not run at all);
    ``timeout`` (the test file did not finish in time); ``crashed`` (the run ended
    without finishing, e.g. the interpreter was killed or the file exited); ``error``.
    Coverage is of the focal file, counted over the passing tests and import time;
    branches are ``(from_line, to_line)`` with a negative ``to_line`` for an exit.
    """

    __test__ = False  # not a pytest test class

    status: RunStatus
    message: str = ""
    tests: list[TestOutcome] = field(default_factory=list)
    collection_errors: list[CollectionError] = field(default_factory=list)
    running: str | None = None
    """The test that was running when the file timed out."""
    executed_lines: list[int] = field(default_factory=list)
    missing_lines: list[int] = field(default_factory=list)
    executed_branches: list[tuple[int, int]] = field(default_factory=list)
    missing_branches: list[tuple[int, int]] = field(default_factory=list)
    coverage_error: str | None = None
    mutants: list[MutantOutcome] = field(default_factory=list)
    population: int = 0
    """Mutants of the focal file before the cap."""
    mutation_status: str = "not run"
    """``completed``, ``timeout`` (the mutation budget ran out: the rest are ``not run``),
    ``crashed``, ``error`` (see :attr:`mutation_message`) or ``not run``."""
    mutation_message: str = ""
    output: str = ""
    """The end of what the test session printed (pytest's own output included)."""

    def count(self, outcome: Outcome) -> int:
        """Tests that ended with ``outcome``."""
        return sum(t.outcome == outcome for t in self.tests)

    @property
    def mutation(self) -> MutationScore | None:
        """The mutation score over the scored mutants, None when none was scored."""
        scored = [m for m in self.mutants if m.status in ("killed", "survived", "timeout", "uncovered")]
        if not scored:
            return None
        killed = sum(m.status == "killed" for m in scored)
        timeouts = sum(m.status == "timeout" for m in scored)
        population = max(self.population - self.count_mutants("unapplied"), len(scored))
        return mutation_score(killed, len(scored), timeouts, population=population)

    def count_mutants(self, status: MutantStatus) -> int:
        """Mutants that ended with ``status``."""
        return sum(m.status == status for m in self.mutants)

    def surviving(self) -> list[MutantOutcome]:
        """Mutants the tests let pass (uncovered ones included), in file order."""
        return [m for m in self.mutants if m.status in ("survived", "uncovered")]


def statement_lines(source: str) -> dict[int, int]:
    """Map each line of ``source`` to the first line of the innermost statement holding it.

    coverage.py records a multi-line statement under its first line; a mutant may start
    on a later line of it.
    """
    starts: dict[int, int] = {}
    for node in ast.walk(parse_python(source)):
        if isinstance(node, ast.stmt) and node.end_lineno is not None:
            first = node.lineno
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            for line in range(node.lineno, node.end_lineno + 1):
                starts[line] = first
    return starts


def nested_definitions(source: str) -> dict[int, list[int]]:
    """Map each line to the first lines of the nested functions holding it.

    Only functions inside another function count (a closure, a decorator's wrapper): such
    a function object is made when its parent runs, possibly at a test module's import,
    and then holds the code it was made with.
    """
    holders: dict[int, list[int]] = {}
    starts = statement_lines(source)

    def visit(node: ast.AST, inside_function: bool, chain: list[int]) -> None:
        for child in ast.iter_child_nodes(node):
            is_function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            link = chain
            if is_function and inside_function:
                first = child.lineno  # type: ignore[attr-defined]
                link = chain + [starts.get(first, first)]
            if isinstance(child, ast.stmt) and child.end_lineno is not None and link:
                for line in range(child.lineno, child.end_lineno + 1):
                    holders[line] = link
            visit(child, inside_function or is_function, link)

    visit(parse_python(source), False, [])
    return holders


def select_mutants(source: str, max_mutants: int, seed: int) -> tuple[list[Mutant], int]:
    """The seeded sample of the focal file's mutants and the population size."""
    population = generate_mutants(source)
    return sample_mutants(population, max_mutants, seed), len(population)


def _config(task: TestFileTask, mutants: list[Mutant], focal_source: str, jobs: int) -> dict[str, Any]:
    spec = task.evaluation
    lines = statement_lines(focal_source) if mutants else {}
    holders = nested_definitions(focal_source) if mutants else {}
    return {
        "focal_file": spec.focal_file, "focal_module": spec.focal_module, "test_path": spec.test_path,
        "python_path": spec.python_path, "plugins": spec.plugins, "focal_source": focal_source,
        "timeout": spec.timeout, "test_timeout": spec.test_timeout,
        "mutation_timeout": spec.mutation_timeout, "timeout_factor": spec.timeout_factor,
        "timeout_floor": spec.timeout_floor, "jobs": jobs,
        "mutants": [{"id": i, "start": m.offset, "end": m.offset + len(m.original),
                     "replacement": m.replacement, "line": lines.get(m.line, m.line),
                     "holders": holders.get(m.line, [])}
                    for i, m in enumerate(mutants)],
    }


def run_test_file(sandbox: Sandbox, task: TestFileTask, test_source: str, *, mutate: bool = True,
                  jobs: int | None = None) -> TestFileRun:
    """Run ``test_source`` as the task's test file and measure it.

    Args:
        sandbox: a started sandbox (``preload=["pytest", "coverage"]`` makes runs fast).
        task: the test-file task (where the file goes, the focal file, the limits).
        test_source: the whole test file.
        mutate: also run the task's mutant sample.
        jobs: mutants run at once inside the sandbox (default: the cores, at most 4).

    Returns:
        The run. A file that does not parse is ``invalid`` without a sandbox run; a file
        that hangs, crashes or exits early is a normal result, not an exception.

    Raises:
        SandboxError: the sandbox failed, or its Python lacks pytest or coverage.
    """
    try:
        parse_python(test_source)
    except (SyntaxError, ValueError) as exc:
        return TestFileRun(status="invalid", message=_syntax_message(exc, task.evaluation.test_path))
    spec = task.evaluation
    focal_source = task.repository.files[spec.focal_file]
    mutants, population = select_mutants(focal_source, spec.max_mutants, spec.mutant_seed) if mutate else ([], 0)
    config = _config(task, mutants, focal_source, jobs or min(4, os.cpu_count() or 1))
    budget = spec.timeout + (spec.mutation_timeout if mutants else 0.0) + _GRACE
    run = run_program(sandbox, "testfile", {**task.repository.files, spec.test_path: test_source}, config,
                      timeout=budget, token=True)
    return parse_report(run, mutants, population)


def _syntax_message(exc: SyntaxError | ValueError, path: str) -> str:
    if isinstance(exc, SyntaxError):
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        text = f"\n    {exc.text.rstrip()}" if exc.text else ""
        return f"{path} does not parse: {type(exc).__name__}: {exc.msg} ({where}){text}"
    return f"{path} does not parse: {exc}"


def parse_report(run: ProgramRun, mutants: list[Mutant], population: int) -> TestFileRun:
    """Turn a run of the program (:func:`~gym_repost.sandbox.programs.run_program`) into a :class:`TestFileRun`.

    Only a result followed by the one-time token counts; without it the run crashed (the
    test file killed the program, or the sandbox's timeout struck).

    Raises:
        SandboxError: the sandbox's Python lacks pytest or coverage.
    """
    data = run.payload if run.completed else None
    if data is None:
        result = run.result
        status: RunStatus = "timeout" if result.timed_out else "crashed"
        tail = (result.stderr or result.stdout).strip()[-_OUTPUT:]
        return TestFileRun(status=status, message="the test run ended without a report"
                           + (f" (exit {result.returncode})" if not result.timed_out else " (timed out)"),
                           output=tail, population=population,
                           mutants=[MutantOutcome(m, "not run") for m in mutants])
    if data.get("status") == "error" and data.get("infrastructure"):
        raise SandboxError(str(data["message"]))
    try:
        return _run_from_report(data, mutants, population)
    except (TypeError, ValueError, KeyError) as exc:  # fields of the wrong shape: the test code wrote them
        return TestFileRun(status="crashed", message=f"the test run's report is malformed ({exc})",
                           population=population, mutants=[MutantOutcome(m, "not run") for m in mutants])


def _run_from_report(data: dict[str, Any], mutants: list[Mutant], population: int) -> TestFileRun:
    status = data.get("status")
    return TestFileRun(
        status=status if status in get_args(RunStatus) else "crashed", message=str(data.get("message") or ""),
        tests=[_record(t, TestOutcome) for t in _list(data.get("tests"))],
        collection_errors=[_record(e, CollectionError) for e in _list(data.get("collection_errors"))],
        running=_text_or_none(data.get("running")), **_coverage_fields(data.get("coverage")),
        mutants=_mutant_outcomes(_list(data.get("mutants")), mutants), population=population,
        mutation_status=str(data.get("mutation_status", "not run")),
        mutation_message=str(data.get("mutation_message", "")),
        output=str(data.get("session_output", ""))[-_OUTPUT:])


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


_OPTIONAL_TEXT = {"phase", "exception"}


def _record(data: Any, cls: type) -> Any:
    """``cls`` from the fields of ``data`` it knows; every field must be text (or None
    where the field may be None), an outcome one of the known ones."""
    if not isinstance(data, dict):
        raise TypeError(f"a {cls.__name__} record is a {type(data).__name__}")
    fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}  # type: ignore[attr-defined]
    for key, value in fields.items():
        if not (isinstance(value, str) or (value is None and key in _OPTIONAL_TEXT)):
            raise TypeError(f"field {key!r} of a {cls.__name__} record is not text")
    if "outcome" in fields and fields["outcome"] not in get_args(Outcome):
        raise ValueError(f"unknown test outcome {fields['outcome'][:40]!r}")
    return cls(**fields)


def _coverage_fields(data: Any) -> dict[str, Any]:
    if not data:
        return {"coverage_error": "coverage was not measured"}
    if not isinstance(data, dict):
        raise TypeError(f"coverage is a {type(data).__name__}")
    if "error" in data:
        return {"coverage_error": str(data["error"])}
    return {"executed_lines": _lines(data["executed_lines"]), "missing_lines": _lines(data["missing_lines"]),
            "executed_branches": _branches(data["executed_branches"]),
            "missing_branches": _branches(data["missing_branches"])}


def _lines(value: Any) -> list[int]:
    if not all(type(n) is int for n in _list(value)):
        raise TypeError("line numbers must be integers")
    return sorted(value)


def _branches(value: Any) -> list[tuple[int, int]]:
    pairs = _list(value)
    if not all(isinstance(b, list) and len(b) == 2 and all(type(n) is int for n in b) for b in pairs):
        raise TypeError("branches must be pairs of line numbers")
    return sorted((a, b) for a, b in pairs)


def _mutant_outcomes(reported: list[Any], mutants: list[Mutant]) -> list[MutantOutcome]:
    by_id = {r["id"]: r for r in reported if isinstance(r, dict) and type(r.get("id")) is int}
    out = []
    for index, mutant in enumerate(mutants):
        r = by_id.get(index)
        status = r.get("status", "killed") if r is not None else "not run"
        if r is None or status not in get_args(MutantStatus):
            out.append(MutantOutcome(mutant, "not run"))
        else:
            out.append(MutantOutcome(mutant, status, _text_or_none(r.get("killed_by")),
                                     _text_or_none(r.get("detail"))))
    return out
