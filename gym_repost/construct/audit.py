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
   judged (:func:`~gym_repost.harness.run_host_made`: a target's mutants in one batch,
   each judged as a run of its own; one the batch's CPU limit stopped gets a run of its
   own, :func:`~gym_repost.harness.run_function_tests`): one the task rewards is a *false
   accept*.

Budgets count work: mutants per task, and timeouts per task (:data:`MAX_TIMEOUTS`); the
CPU limits per covering test in a mutant's run (a multiple of the test's own) and per
mutant (a multiple of all of them) are verdicts (a timeout is known wrong), ten times
what the code needs; never the wall clock. A test's own is what it took in a run of
the original code made just before the mutants', alike and untraced (the coverage run's
tracing slows a test by a factor that hangs on the machine's load: a mutant ten times
slower than the code was a timeout in one build and survived in another). A mutant's run
ends at its first failing test.
"""

from __future__ import annotations

import ast
import hashlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from gym_repost.analysis.mutation import AUDIT_OPERATORS, OPERATORS, Mutant, generate_mutants, sample_mutants
from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source import dedent_code, find_function
from gym_repost.construct.execution import missing_module
from gym_repost.construct.stages import SourceRepository
from gym_repost.construct.testgen.trace import (
    guarded_modules,
    pytest_arguments,
    source_roots,
    suite_files,
    suite_plugins,
    test_files,
)
from gym_repost.harness import run_function_tests, run_host_made
from gym_repost.harness.validation import failure_cause
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.programs import WALL_STRETCH, run_program
from gym_repost.task import FunctionTask

logger = logging.getLogger(__name__)

MUTANTS = 30
"""Mutants of a target tried by default (a reproducible sample of all of them)."""
CPU_FACTOR = 10.0
"""A mutant's run may use this many times the original code's run of its covering tests..."""
CPU_FLOOR = 5.0
"""... plus this many (pytest's start)."""
TEST_CPU_FLOOR = 3.0
"""Each covering test, in a mutant's run, may use :data:`CPU_FACTOR` times its own CPU
seconds plus this many (PIT's per-test timeouts: a factor and a constant): a mutant that
loops in one test is stopped there, not after the whole run's limit."""
COVER_CPU = 600.0
"""CPU seconds of the coverage run of the whole upstream suite."""
MAX_TIMEOUTS = 5
"""A target's mutants after this many timeouts are ``not run``. A count of verdicts, not of
CPU seconds: a budget of 300 CPU seconds was spent by one mutant fewer or more on a busy
machine (the same work takes more CPU time when cores and caches are shared), so two
builds could audit a task with other mutants and keep other tasks. A target's runs are
bounded all the same: one per mutant, each within its CPU limit, and at most this many
at that limit. Five, not two: since the limits come from an untraced run (about a sixth
of the traced one), right but slower mutants time out more often, and with two
more-itertools' ``iter_index`` and ``_full_period_lcg`` left 30 of their 38 mutants
unrun (8 known wrong; 31 with five, for 15% more time)."""
WALL_FACTOR = 3.0
INSTALL_ATTEMPTS = 3
"""Times the coverage run is repeated after installing modules its tests could not import."""
MAX_REPORT_CHARS = 20_000_000
"""Characters of the coverage run's report (each covering test's id is written once; a
suite of many thousand parametrized tests, packaging's, writes megabytes)."""

Install = Callable[[str], bool]
"""Installs the distribution that provides a module; True when it did."""
AuditStatus = Literal["audited", "uncovered", "not found", "changed", "error"]
Part = Literal["all", "build", "held-out"]
"""Which mutants an audit draws from: all of them, or one of two disjoint halves (by a digest
of the mutant's code). ``build --max-false-accept`` filters on the ``build`` half, so
``audit --part held-out`` measures the kept tasks with mutants the filter never saw."""
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
    swapped: int = 0
    """Mutants judged by the covering tests collected once, the target's code swapped for
    the mutant's (:mod:`gym_repost.programs.upstream`); the rest had runs of their own."""
    swap_fallback: str | None = None
    """Why no mutant was swapped in, where the target allowed it (a verdict that disagreed
    with a run of its own, say)."""
    calibration: str | None = None
    """What the original code's run of the covering tests, whose CPU seconds set the
    mutants' limits, said when it was not clean: covering tests it left out (they fail or
    are not collected with the original code, run alone), or why the coverage run's limits
    stood (None: every covering test passed and was timed)."""

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
            "swapped": self.swapped,
            "swap_fallback": self.swap_fallback,
            "calibration": self.calibration,
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
    patch: dict[str, Any] | None = None
    """``{"qualname", "first", "last"}`` when the kill runs may swap the target's code in
    tests collected once (:mod:`gym_repost.programs.upstream`, ``patch``)."""
    body_offset: int = -1
    """Where the body's first statement starts in the file: a mutant from there on may be
    swapped in; one before it (a decorator, a default) changes what runs at import."""


def audit_tasks(
    sandbox: Sandbox,
    tasks: Sequence[FunctionTask],
    repo: SourceRepository,
    *,
    mutants: int = MUTANTS,
    seed: int = 0,
    workers: int = 2,
    part: Part = "all",
    on_result: Callable[[TaskAudit], None] | None = None,
    install: Install | None = None,
    one_run_each: bool = False,
) -> list[TaskAudit]:
    """Audit ``tasks`` (built from ``repo``) against ``repo``'s own test suite: one coverage
    run of the suite, then each task's mutants (those of ``part``), ``workers`` tasks at a time.
    ``install(module)``: installs what provides a module the suite could not import (a
    :class:`~gym_repost.construct.execution.PackageInstaller`'s), True when it did.
    ``one_run_each=True``: every mutant has a run of its own against the repository's tests
    and another as a submission, none swapped into tests collected once or judged in a batch
    (the baseline of ``benchmarks/audit_speed.py``; the verdicts are the same).

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    audits: dict[str, TaskAudit] = {}
    targets: list[_Target] = []
    for task in tasks:
        found = _target(task, repo, mutants, seed, part)
        if isinstance(found, TaskAudit):
            audits[task.id] = found
        else:
            targets.append(found)
    plugins = _plugins(repo, install) if targets else []
    covering, problem, at_import, collect_cpu = (
        _covering(sandbox, repo, targets, install, plugins) if targets else ({}, None, set(), None)
    )
    shipped = bool(test_files(repo))

    def audit(target: _Target) -> TaskAudit:
        tests = covering.get(target.key)
        if tests is None:
            why = f"the coverage run failed: {problem}" if problem else "the coverage run failed"
            return TaskAudit(target.task.id, target.task.name, "error", why)
        if not tests:
            why = "no passing upstream test runs its body" if shipped else "the repository ships no tests"
            return TaskAudit(target.task.id, target.task.name, "uncovered", why)
        fails = _ground_truth_fails(sandbox, target.task, install)
        if fails is not None:  # every mutant would fail too, and be counted as rejected
            return TaskAudit(target.task.id, target.task.name, "error", f"the task's ground truth fails here: {fails}")
        swap = not one_run_each and target.key not in at_import
        return _audit_target(
            sandbox, repo, target, tests, plugins, patch=swap, batch=not one_run_each, collect_cpu=collect_cpu
        )

    with ThreadPoolExecutor(max(1, workers)) as pool:
        for target, result in zip(targets, pool.map(audit, targets)):
            audits[target.task.id] = result
            if on_result is not None:
                on_result(result)
    return [audits[t.id] for t in tasks]


def _ground_truth_fails(sandbox: Sandbox, task: FunctionTask, install: Install | None) -> str | None:
    """Why the task's ground truth fails its tests in ``sandbox`` (None: it passes). A module
    it cannot import (one of the task's requirements, in a package set that has not got it
    yet) is installed with ``install`` and the run tried again."""
    for attempt in range(INSTALL_ATTEMPTS + 1):
        report = run_function_tests(sandbox, task, task.ground_truth)
        if report.passed:
            return None
        missing = missing_module(report.message) if report.exception in ("ModuleNotFoundError", "ImportError") else None
        if missing is None or install is None or attempt == INSTALL_ATTEMPTS or not install(missing):
            return failure_cause(report)
    return None  # not reached: the last attempt returns above


def in_part(mutant: Mutant, part: Part) -> bool:
    """The mutant belongs to ``part`` (see :data:`Part`): a digest of its code decides, so
    the halves are the same whatever the seed, the sample size or the task file."""
    if part == "all":
        return True
    digest = hashlib.sha256(mutant.source.encode("utf-8", "surrogatepass")).digest()
    return (digest[0] % 2 == 0) == (part == "build")


def _target(task: FunctionTask, repo: SourceRepository, mutants: int, seed: int, part: Part) -> _Target | TaskAudit:
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
    population = [m for m in generate_mutants(segment, operators=(*OPERATORS, *AUDIT_OPERATORS)) if in_part(m, part)]
    body = (span.def_line + 1, span.end)
    first_statement = span.node.body[0]
    head = lines[first_statement.lineno - 1].encode("utf-8", "surrogatepass")[: first_statement.col_offset]
    body_offset = sum(len(line) + 1 for line in lines[: first_statement.lineno - 1])
    body_offset += len(head.decode("utf-8", "replace"))
    patch = {"qualname": qualname, "first": span.start, "last": span.end} if "<" not in qualname else None
    chosen = sample_mutants(population, mutants, seed)
    return _Target(task, task.id, path, body, offset, span.start, chosen, patch, body_offset)


def _calibration_note(report: Any) -> str | None:
    """:attr:`TaskAudit.calibration` from the kill run's report of the original code's run
    (untrusted data: only its strings and counts are read)."""
    if not isinstance(report, dict):
        return None
    why = report.get("why")
    if isinstance(why, str):
        return why[:300]
    count, named = report.get("left_out_count"), report.get("left_out")
    if type(count) is not int or count <= 0:
        return None
    names = [n for n in named if isinstance(n, str)][:3] if isinstance(named, list) else []
    shown = ", ".join(n[:120] for n in names) + (", ..." if count > len(names) else "")
    return f"{count} covering tests left out (they fail with the original code, run alone): {shown}"[:300]


def _same_code(a: str, b: str) -> bool:
    try:
        return ast.dump(parse_python(a)) == ast.dump(parse_python(b))
    except (SyntaxError, ValueError):
        return False


def _plugins(repo: SourceRepository, install: Install | None) -> list[str]:
    """The pytest plugins the suite uses (:func:`suite_plugins`) that ``install`` provided:
    both runs of the suite load them (``-p``), so a test that uses their fixtures passes in
    the coverage run and in the mutants' alike. Without an installer, none: such tests
    error in both, and cover nothing."""
    if install is None:
        return []
    return [p for p in suite_plugins(repo) if install(p.split(".")[0])]


def _covering(
    sandbox: Sandbox,
    repo: SourceRepository,
    targets: list[_Target],
    install: Install | None = None,
    plugins: Sequence[str] = (),
) -> tuple[dict[str, list[list[Any]]], str | None, set[str], float | None]:
    """The passing upstream tests that run each target's body, with their CPU seconds; or
    ``({}, why, ...)`` when the coverage run failed, or ran no test of a repository that has
    some; the targets whose body ran outside every test (at import or collection time); and
    the CPU seconds of the run until its collection was done (None: not reported).
    Modules the tests could not import are installed with ``install`` and the suite run
    again, a bounded number of times (as tracing does)."""
    if not test_files(repo):
        return {t.key: [] for t in targets}, None, set(), None
    config = {
        "mode": "cover",
        "args": pytest_arguments(repo, []),
        "plugins": list(plugins),
        "sys_path": source_roots(repo),
        "files": sorted({t.file for t in targets}),
        "targets": [{"key": t.key, "file": t.file, "first": t.body[0], "last": t.body[1]} for t in targets],
        "cpu": COVER_CPU,
        "wall": WALL_FACTOR * COVER_CPU,
    }
    tried: set[str] = set()
    for _ in range(INSTALL_ATTEMPTS + 1):
        run = run_program(
            sandbox,
            "upstream",
            suite_files(repo),
            config,
            timeout=WALL_STRETCH * WALL_FACTOR * COVER_CPU + 60.0,
            token=True,
            cpu_seconds=COVER_CPU + 30.0,
            max_chars=MAX_REPORT_CHARS,
        )
        payload = run.payload or {}
        named = [m for m in payload.get("missing") or [] if isinstance(m, str)]
        named += guarded_modules(repo, payload.get("undefined"))
        missing = [m for m in dict.fromkeys(named) if m not in tried]
        if install is None or not missing:
            break
        tried.update(missing)
        if not [m for m in missing if install(m)]:
            break
    covering, names = payload.get("covering"), payload.get("names")
    problem = run.problem or payload.get("error")
    if problem is None and not (isinstance(covering, dict) and isinstance(names, list)):
        problem = "the report has no table of covering tests"
    if problem is None and payload.get("tests") == 0:
        said = "; ".join(str(e)[:200] for e in (payload.get("errors") or [])[:3])
        problem = "the repository's own tests ran no test" + (f": {said}" if said else "")
    if problem is not None or not isinstance(covering, dict) or not isinstance(names, list):
        why = str(problem)[:400]
        logger.warning("audit of %s: the coverage run failed (%s)", repo.name, why)
        return {}, why, set(), None
    table = [
        n if isinstance(n, list) and len(n) == 2 and isinstance(n[0], str) and type(n[1]) in (int, float) else None
        for n in names
    ]
    out: dict[str, list[list[Any]]] = {}
    for key, indexes in covering.items():
        if isinstance(indexes, list):
            found = [table[i] for i in indexes if type(i) is int and 0 <= i < len(table)]
            out[key] = [n for n in found if n is not None]
    at_import = payload.get("at_import")
    imported = {k for k in at_import if isinstance(k, str)} if isinstance(at_import, list) else set()
    collected = payload.get("collect_cpu")
    collect_cpu = float(collected) if isinstance(collected, (int, float)) and collected >= 0 else None
    return out, None, imported, collect_cpu


def _audit_target(
    sandbox: Sandbox,
    repo: SourceRepository,
    target: _Target,
    tests: list[list[Any]],
    plugins: Sequence[str] = (),
    patch: bool = True,
    batch: bool = True,
    collect_cpu: float | None = None,
) -> TaskAudit:
    """Run the target's mutants against its covering tests; submit the known-wrong ones.
    ``patch``: the tests may be collected once and the mutants' code swapped in (the target
    does not run at import or collection time); otherwise each mutant's run collects them.
    ``batch``: the submissions are judged in batches; otherwise each in a run of its own.
    ``collect_cpu``: the coverage run's CPU seconds until its collection was done; a
    mutant's own run may use :data:`CPU_FACTOR` times it plus :data:`TEST_CPU_FLOOR` until
    its collection is done (a target that runs at import may loop there)."""
    nodeids = [str(test[0]) for test in tests]
    test_cpu = {str(test[0]): CPU_FACTOR * float(test[1]) + TEST_CPU_FLOOR for test in tests}
    collect_limit = CPU_FACTOR * collect_cpu + TEST_CPU_FLOOR if collect_cpu is not None else None
    cpu = CPU_FACTOR * (sum(float(test[1]) for test in tests) + (collect_cpu or 0.0)) + CPU_FLOOR
    config = {
        "mode": "kill",
        "plugins": list(plugins),
        "sys_path": source_roots(repo),
        "max_timeouts": MAX_TIMEOUTS,
        "calibrate": {"factor": CPU_FACTOR, "floor": TEST_CPU_FLOOR, "start": CPU_FLOOR},
        "nodeids": nodeids,
        "test_cpu": test_cpu,
        "collect_cpu": collect_limit,
        "mutants": [
            {
                "id": i,
                "file": target.file,
                "start": target.offset + m.offset,
                "end": target.offset + m.offset + len(m.original),
                "replacement": m.replacement,
                "cpu": cpu,
                "wall": WALL_FACTOR * cpu,
                "patch": target.offset + m.offset >= target.body_offset,
            }
            for i, m in enumerate(target.mutants)
        ],
    }
    if patch and target.patch is not None and target.mutants:
        config["patch"] = target.patch
    # every mutant at its limit, the original's run, the session's collection; twice that, as
    # the calibrated limits (untraced) exceed these (traced) when the machine got busier since
    worst = 2 * cpu * (len(target.mutants) + 2)
    run = run_program(
        sandbox,
        "upstream",
        suite_files(repo),
        config,
        timeout=WALL_STRETCH * WALL_FACTOR * worst + 60.0,
        token=True,
        cpu_seconds=worst + 30.0,
    )
    verdicts = (run.payload or {}).get("mutants") if run.completed else None
    audit = TaskAudit(target.task.id, target.task.name, "audited", covering_tests=len(nodeids))
    swapped, fallback = (run.payload or {}).get("patched"), (run.payload or {}).get("fallback")
    audit.swapped = swapped if type(swapped) is int else 0
    audit.swap_fallback = str(fallback)[:300] if fallback is not None and "patch" in config else None
    audit.calibration = _calibration_note((run.payload or {}).get("calibration"))
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
        audit.mutants.append(audited)
    known = [(audited, dedent_code(m.source)) for audited, m in zip(audit.mutants, target.mutants)]
    known = [(audited, code) for audited, code in known if audited.upstream in ("killed", "timeout")]
    codes = [code for _, code in known]
    reports = run_host_made(sandbox, target.task, codes) if batch and codes else [None] * len(codes)
    for (audited, code), report in zip(known, reports):
        if report is None or (report.timed_out and not report.passed):
            # the batch's CPU limit (a multiple of the ground truth's) is not a submission's:
            # judged as an agent's submit is, in a run of its own
            report = run_function_tests(sandbox, target.task, code)
        audited.accepted = report.passed
    return audit
