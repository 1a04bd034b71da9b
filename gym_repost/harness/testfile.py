"""Run a test file against its focal file in the sandbox: outcomes, coverage and mutants.

One sandbox run per scoring. The in-sandbox program (:mod:`gym_repost.programs.testfile`)
runs the test file once with pytest, recording the calls its tests make into the focal
file; coverage is measured by replaying those calls in a process that never ran test
code; each mutant, each decoy (:mod:`gym_repost.analysis.decoys`) and a calibration run
of the original are run in fresh children, the variant's source written as the focal
file on disk, with the tests that ran the changed line, and judged by exit status.

>>> run = run_test_file(sandbox, task, test_source)
>>> run.status, [t.outcome for t in run.tests], run.mutation

The host sends the mutants and the decoys as anonymous spans in a shuffled order and keeps
the mapping: a test that fails on a decoy detects code, not behaviour, and the run's
mutation score is 0 (:attr:`TestFileRun.decoys_failed`).

The mutants are a seeded sample (``task.evaluation.max_mutants``) of every mutant of the
focal file, so the ground truth and every candidate test file face the same ones; the
score's interval reports the sampling uncertainty (finite population corrected).
"""

from __future__ import annotations

import ast
import logging
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from gym_repost.analysis.decoys import Decoy, disguise, generate_decoys
from gym_repost.analysis.mutation import Mutant, MutationScore, generate_mutants, mutation_score, sample_mutants
from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.pytest_files import modules_behind
from gym_repost.errors import SandboxError
from gym_repost.harness.requirements import install_named
from gym_repost.programs.protocol import WALL_STRETCH, pytest_problems
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.programs import ProgramRun, run_program
from gym_repost.task import TestFileTask

logger = logging.getLogger(__name__)

PROGRAM_MODULES = ("testfile_zygote", "testfile_session", "testfile_replay")
"""The program's modules (:mod:`gym_repost.programs.testfile` imports them)."""
_GRACE = 20.0
WALL_FACTOR = 3.0
"""The time limits of a test-file run (``timeout``, ``test_timeout``, ``mutation_timeout``)
count CPU seconds; each has a wall-clock guard this many times as long, which only code
that waits without computing (sleeps, blocks) meets: it stretches, up to
``WALL_STRETCH`` times, while the code computes on a loaded machine
(:class:`gym_repost.programs.protocol.WallGuard`)."""
MUTATION_WALL_GRACE = 10.0
"""Seconds the mutation phase's wall-clock guard adds to ``WALL_STRETCH`` times
``WALL_FACTOR`` times its budget: the phase's variants are each held to their own
(stretching) guard; this one only bounds the whole, and a loaded machine that slows every
variant down never reaches it first."""
_OUTPUT = 1500

RunStatus = Literal["completed", "invalid", "timeout", "crashed", "error"]
Outcome = Literal["passed", "failed", "error", "timeout", "skipped"]
MutantStatus = Literal["killed", "survived", "timeout", "uncovered", "unapplied", "not run"]


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
    ``not run`` (the mutation budget ran out first, or the mutation run was cut short:
    counts as survived then, see :attr:`TestFileRun.mutation`), ``unapplied`` (never
    given by the runner today, every mutant is written to disk and imported fresh; kept
    for older reports: not scored).
    """

    mutant: Mutant
    status: MutantStatus
    killed_by: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class DecoyOutcome:
    """What the tests did to one decoy (an equivalent rewrite); statuses as for mutants.

    ``killed`` or ``timeout`` means a test detected a change of code that does not change
    behaviour.
    """

    decoy: Decoy
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
    decoys: list[DecoyOutcome] = field(default_factory=list)
    """The equivalent rewrites run among the mutants."""
    calibration_failed: list[str] = field(default_factory=list)
    """Tests that passed in the run but not in the calibration run (the original focal
    file, a fresh process): they do not count for mutants."""
    calls_recorded: int = 0
    """Calls from the tests into the focal file, recorded for the coverage replay."""
    calls_not_replayable: int = 0
    """Recorded calls that could not be replayed (arguments that do not pickle, objects of
    the test file, closures of a test...): their lines do not count as covered."""
    output: str = ""
    """The end of what the test session printed (pytest's own output included)."""

    def count(self, outcome: Outcome) -> int:
        """Tests that ended with ``outcome``."""
        return sum(t.outcome == outcome for t in self.tests)

    @property
    def mutation_cut_short(self) -> bool:
        """The mutation run did not complete (budget, crash): mutants not run count as survived.

        Test code can stop the run (kill or suspend the processes that run the mutants); a
        score over the mutants that happened to finish could then be chosen by it.
        """
        return self.mutation_status in ("timeout", "crashed", "error")

    @property
    def decoys_failed(self) -> list[DecoyOutcome]:
        """Decoys a test failed on (or timed out on): the tests detect code, not behaviour."""
        return [d for d in self.decoys if d.status in ("killed", "timeout")]

    @property
    def mutation(self) -> MutationScore | None:
        """The mutation score over the scored mutants, None when none was scored.

        0 when a test failed on a decoy; mutants not run count as survived when the
        mutation run was cut short.
        """
        counted = ("killed", "survived", "timeout", "uncovered") + (("not run",) if self.mutation_cut_short else ())
        scored = [m for m in self.mutants if m.status in counted]
        if not scored:
            return None
        population = max(self.population - self.count_mutants("unapplied"), len(scored))
        if self.decoys_failed:
            return mutation_score(0, len(scored), 0, population=population)
        killed = sum(m.status == "killed" for m in scored)
        timeouts = sum(m.status == "timeout" for m in scored)
        return mutation_score(killed, len(scored), timeouts, population=population)

    def count_mutants(self, status: MutantStatus) -> int:
        """Mutants that ended with ``status``."""
        return sum(m.status == status for m in self.mutants)

    def surviving(self) -> list[MutantOutcome]:
        """Mutants the tests let pass (uncovered ones included), in file order."""
        return [m for m in self.mutants if m.status in ("survived", "uncovered")]

    def notes(self) -> list[str]:
        """What the agent should know beyond the figures: decoys, calibration, replay."""
        out = []
        failed = self.decoys_failed
        if failed:
            who = sorted({d.killed_by for d in failed if d.killed_by})
            out.append(
                f"Mutation score 0: a test failed on an equivalent rewrite of the focal file "
                f"(the same behaviour, different code){' (' + ', '.join(who[:3]) + ')' if who else ''}. "
                "Tests must check what the code does, not what its text, hash or bytecode is."
            )
        if self.calibration_failed:
            out.append(
                f"{len(self.calibration_failed)} test(s) passed in the run but failed when run again "
                f"in a fresh process with the original focal file; they do not count for mutants: "
                f"{', '.join(self.calibration_failed[:3])}"
            )
        if self.calls_not_replayable:
            out.append(
                f"{self.calls_not_replayable} of {self.calls_recorded} calls into the focal file could not "
                "be replayed for coverage (arguments that do not pickle or are defined in the test "
                "file): the lines only they run are not counted."
            )
        return out


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


Variant = Mutant | Decoy
"""A mutant or a decoy: what one variant child of the mutation run runs."""


def minimal_span(original: str, variant: str) -> tuple[int, int, str]:
    """The smallest ``(start, end, replacement)`` that turns ``original`` into ``variant``.

    Mutants and decoys travel in this one form, so the sandbox cannot tell them apart by it.
    """
    limit = min(len(original), len(variant))
    start = 0
    while start < limit and original[start] == variant[start]:
        start += 1
    end_o, end_v = len(original), len(variant)
    while end_o > start and end_v > start and original[end_o - 1] == variant[end_v - 1]:
        end_o -= 1
        end_v -= 1
    return start, end_o, variant[start:end_v]


def _config(
    task: TestFileTask, variants: list[Variant], focal_source: str, private: bool, sources: list[str] | None = None
) -> dict[str, Any]:
    """The program's configuration; ``sources`` are the variants' texts as shipped (default:
    their own source); ``private``: the run has a PID namespace and scratch space of its own
    (the program may kill every process of its user but its own, and empty ``/tmp``)."""
    spec = task.evaluation
    lines = statement_lines(focal_source) if variants else {}
    holders = nested_definitions(focal_source) if variants else {}
    shipped = []
    for i, variant in enumerate(variants):
        start, end, replacement = minimal_span(focal_source, sources[i] if sources else variant.source)
        line = lines.get(variant.line, variant.line)
        shipped.append(
            {
                "id": i,
                "start": start,
                "end": end,
                "replacement": replacement,
                "line": line,
                "holders": holders.get(variant.line, []),
            }
        )
    return {
        "focal_file": spec.focal_file,
        "focal_module": spec.focal_module,
        "test_path": spec.test_path,
        "python_path": spec.python_path,
        "plugins": spec.plugins,
        "focal_source": focal_source,
        "timeout": spec.timeout,
        "test_timeout": spec.test_timeout,
        "mutation_timeout": spec.mutation_timeout,
        "mutation_wall": WALL_STRETCH * WALL_FACTOR * spec.mutation_timeout + MUTATION_WALL_GRACE,
        "wall_factor": WALL_FACTOR,
        "timeout_factor": spec.timeout_factor,
        "timeout_floor": spec.timeout_floor,
        "private": private,
        "variants": shipped,
    }


def shuffled_variants(
    mutants: list[Mutant], focal_source: str, rng: random.Random | None = None
) -> tuple[list[Variant], list[str]]:
    """The mutants and their decoys in a random order, and the text each is shipped as.

    Each mutant is shipped disguised (:func:`~gym_repost.analysis.decoys.disguise`: with
    an equivalent edit beside the mutation), so its text is not the one the public
    operators give; the host keeps which variant is which.
    """
    rng = rng or random.Random()
    variants: list[Variant] = [*mutants, *generate_decoys(focal_source, mutants, rng=rng)]
    rng.shuffle(variants)
    sources = [disguise(v, rng) if isinstance(v, Mutant) else v.source for v in variants]
    return variants, sources


def run_test_file(sandbox: Sandbox, task: TestFileTask, test_source: str, *, mutate: bool = True) -> TestFileRun:
    """Run ``test_source`` as the task's test file and measure it.

    Args:
        sandbox: a started sandbox (``preload=["pytest", "coverage"]`` makes runs fast).
        task: the test-file task (where the file goes, the focal file, the limits).
        test_source: the whole test file.
        mutate: also run the task's mutant sample (and the decoys), one at a time: a
            variant sees its own slot, never the original focal file nor another variant.

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
    variants, sources = shuffled_variants(mutants, focal_source, random.Random(os.urandom(16))) if mutants else ([], [])
    config = _config(task, variants, focal_source, _private(sandbox), sources)
    budget = WALL_STRETCH * 2 * WALL_FACTOR * spec.timeout + (config["mutation_wall"] if mutants else 0.0) + _GRACE
    # the repository's own test file (the task's ground truth) runs where ground truths do
    box = sandbox.ground_truth() if test_source == task.ground_truth else sandbox
    files = {**task.repository.files, spec.test_path: test_source}
    installed: set[str] = set()
    while True:
        run = parse_report(
            run_program(box, "testfile", files, config, modules=PROGRAM_MODULES, timeout=budget, token=True),
            mutants,
            population,
            variants,
        )
        if not install_named(box, spec.requirements, import_errors(run, test_source), task.name, installed):
            return run


def session_problems(run: TestFileRun, limit: int = 3) -> list[str]:
    """Up to ``limit`` lines of the run's pytest output that say why tests could not run (a
    ``conftest.py`` that failed to load, pytest's internal errors), else why they were
    skipped (a module the file ``pytest.importorskip``s)."""
    found = pytest_problems(run.output, limit)
    return found or [line.strip()[:300] for line in run.output.split("\n") if line.startswith("SKIPPED")][:limit]


def import_errors(run: TestFileRun, source: str = "") -> str:
    """What a run says about the imports that failed in it (``No module named ...``, where a
    missing requirement shows): its message, its collection errors, pytest's output (a
    ``conftest.py`` that failed to load) and the messages of the tests that did not pass (a
    module imported inside a test, or ``pytest.importorskip``ed). A collection error
    ``NameError: name 'x' is not defined`` where an import of the test file ``source`` in a
    ``try:`` that catches ``ImportError`` binds ``x`` says ``No module named`` for that
    ``try``'s modules (:func:`~gym_repost.analysis.pytest_files.guarded_imports`)."""
    collection = "\n".join([*(f"{e.message}\n{e.longrepr}" for e in run.collection_errors), run.output])
    behind = modules_behind(source, _UNDEFINED.findall(collection))
    return "\n".join(
        [
            run.message,
            collection,
            *(t.message or "" for t in run.tests if t.outcome in ("failed", "error", "skipped")),
            *(f"No module named '{m}' (its import in a try left a name undefined)" for m in behind),
        ]
    )


_UNDEFINED = re.compile(r"NameError: name '(\w+)' is not defined")


def _private(sandbox: Sandbox) -> bool:
    """Whether a run of ``sandbox`` has a PID namespace, ``/tmp`` and ``/dev/shm`` of its own."""
    described = sandbox.describe()
    return described.get("backend") == "docker" or described.get("isolation") == "namespaces"


def _syntax_message(exc: SyntaxError | ValueError, path: str) -> str:
    if isinstance(exc, SyntaxError):
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        text = f"\n    {exc.text.rstrip()}" if exc.text else ""
        return f"{path} does not parse: {type(exc).__name__}: {exc.msg} ({where}){text}"
    return f"{path} does not parse: {exc}"


def parse_report(
    run: ProgramRun, mutants: list[Mutant], population: int, variants: list[Variant] | None = None
) -> TestFileRun:
    """Turn a run of the program (:func:`~gym_repost.sandbox.programs.run_program`) into a :class:`TestFileRun`.

    Only a result followed by the one-time token counts; without it the run crashed (the
    test file killed the program, or the sandbox's timeout struck). ``variants`` are what
    the program ran, by id (the mutants and the decoys); by default the mutants in order.

    Raises:
        SandboxError: the sandbox's Python lacks pytest or coverage.
    """
    variants = list(mutants) if variants is None else variants
    data = run.payload if run.completed else None
    if data is None:
        result = run.result
        status: RunStatus = "timeout" if result.timed_out else "crashed"
        tail = (result.stderr or result.stdout).strip()[-_OUTPUT:]
        return TestFileRun(
            status=status,
            message="the test run ended without a report"
            + (f" (exit {result.returncode})" if not result.timed_out else " (timed out)"),
            output=tail,
            population=population,
            mutants=[MutantOutcome(m, "not run") for m in mutants],
        )
    if data.get("status") == "error" and data.get("infrastructure"):
        raise SandboxError(str(data["message"]))
    try:
        return _run_from_report(data, mutants, population, variants)
    except (TypeError, ValueError, KeyError) as exc:  # fields of the wrong shape: the test code wrote them
        return TestFileRun(
            status="crashed",
            message=f"the test run's report is malformed ({exc})",
            population=population,
            mutants=[MutantOutcome(m, "not run") for m in mutants],
        )


def _run_from_report(
    data: dict[str, Any], mutants: list[Mutant], population: int, variants: list[Variant]
) -> TestFileRun:
    status = data.get("status")
    outcomes = _variant_outcomes(_list(data.get("mutants")), variants)
    calls: dict[str, Any] = data["calls"] if isinstance(data.get("calls"), dict) else {}
    calibration: dict[str, Any] = data["calibration"] if isinstance(data.get("calibration"), dict) else {}
    return TestFileRun(
        status=cast(RunStatus, status) if status in get_args(RunStatus) else "crashed",
        message=str(data.get("message") or ""),
        tests=[_record(t, TestOutcome) for t in _list(data.get("tests"))],
        collection_errors=[_record(e, CollectionError) for e in _list(data.get("collection_errors"))],
        running=_text_or_none(data.get("running")),
        **_coverage_fields(data.get("coverage")),
        mutants=[
            o if isinstance(o := outcomes.get(id(m)), MutantOutcome) else MutantOutcome(m, "not run") for m in mutants
        ],
        population=population,
        decoys=[
            o if isinstance(o := outcomes.get(id(v)), DecoyOutcome) else DecoyOutcome(v, "not run")
            for v in variants
            if isinstance(v, Decoy)
        ],
        mutation_status=str(data.get("mutation_status", "not run")),
        mutation_message=str(data.get("mutation_message", "")),
        calibration_failed=[str(n) for n in _list(calibration.get("failed"))],
        calls_recorded=_count(calls.get("recorded")),
        calls_not_replayable=_count(calls.get("not_replayable")),
        output=str(data.get("session_output", ""))[-_OUTPUT:],
    )


def _count(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


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
    return {
        "executed_lines": _lines(data["executed_lines"]),
        "missing_lines": _lines(data["missing_lines"]),
        "executed_branches": _branches(data["executed_branches"]),
        "missing_branches": _branches(data["missing_branches"]),
    }


def _lines(value: Any) -> list[int]:
    if not all(type(n) is int for n in _list(value)):
        raise TypeError("line numbers must be integers")
    return sorted(value)


def _branches(value: Any) -> list[tuple[int, int]]:
    pairs = _list(value)
    if not all(isinstance(b, list) and len(b) == 2 and all(type(n) is int for n in b) for b in pairs):
        raise TypeError("branches must be pairs of line numbers")
    return sorted((a, b) for a, b in pairs)


def _variant_outcomes(reported: list[Any], variants: list[Variant]) -> dict[int, MutantOutcome | DecoyOutcome]:
    """Each variant's outcome, keyed by ``id()`` of the mutant or decoy; unknown statuses left out."""
    by_id = {r["id"]: r for r in reported if isinstance(r, dict) and type(r.get("id")) is int}
    out: dict[int, MutantOutcome | DecoyOutcome] = {}
    for index, variant in enumerate(variants):
        r = by_id.get(index)
        status = r.get("status", "killed") if r is not None else "not run"
        if r is None or status not in get_args(MutantStatus):
            continue
        found = cast(MutantStatus, status), _text_or_none(r.get("killed_by")), _text_or_none(r.get("detail"))
        out[id(variant)] = (
            DecoyOutcome(variant, *found) if isinstance(variant, Decoy) else MutantOutcome(variant, *found)
        )
    return out
