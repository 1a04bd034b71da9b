"""The construction pipeline: a repository in, function tasks and drop reasons out.

    ingest -> extract -> tracing -> dependencies -> sandboxing -> construction episodes
                                                                  (tests, execution, quality per candidate)

Static stages run on the host (they parse, never execute, the repository); everything
that executes repository code runs in the sandbox. Each candidate ends as a kept task or
a :class:`~gym_repost.construct.stages.Drop` naming the stage and the reason.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_repost.construct.agent import BuildContext, BuildOutcome, BuildPolicy, run_build_episode
from gym_repost.construct.execution import PackageInstaller, own_packages
from gym_repost.construct.quality import QualityThresholds, Split
from gym_repost.construct.stages import Candidate, DependencySlice, Drop, SandboxedScript, SourceRepository
from gym_repost.construct.stats import StageTimer, drop_table, table2
from gym_repost.construct.testgen.explore import SAFETY_NOTE
from gym_repost.construct.testgen.trace import CALL_BUDGET, TraceResult, local_modules, test_files
from gym_repost.errors import InfrastructureError
from gym_repost.executor import LocalExecutor, need_sandbox
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask

logger = logging.getLogger(__name__)


@dataclass
class BuildSettings:
    """What ``gym-repost build`` was asked to do."""

    split: Split = "train"
    max_candidates: int = 30
    seed: int = 0
    licenses: str = "permissive"
    workers: int = 2
    trace: bool = True
    """Run the repository's own tests (in the sandbox) to harvest real inputs."""
    test_executions: int = 2000
    """Budget of one input search, in runs of the target (it replaced ``test_budget``,
    seconds, whose results depended on the machine's load)."""
    min_kill_rate: float = 0.5
    mutants: int = 10
    cache_dir: Path | None = None
    exclude_keywords: Mapping[str, tuple[str, ...]] | None = None
    """Extraction's keyword table (None: the deterministic builder's, which drops targets
    touching the network, databases or user input; the LLM builder mocks those)."""
    only: tuple[str, ...] = ()
    """Glob patterns on ``file::qualname`` or the qualname; candidates matching none are
    left out (before the per-repository cap)."""
    max_steps: int = 24
    """Tool calls per construction episode."""
    rescue_static_drops: bool = False
    """Candidates whose dependency slice or sandboxed module failed still get an episode
    (with no slice or module): a policy that assembles the script itself may save them."""
    keep: tuple[str, ...] = ()
    """Candidates extraction drops by default that are kept: any of
    :data:`~gym_repost.construct.extract.KEEP_OPTIONS` (non-library code, single-statement
    bodies, bodies found elsewhere in the repository)."""
    max_false_accept: float | None = None
    """Audit the built tasks against the repository's own tests (:mod:`~gym_repost.construct.audit`,
    the ``build`` half of the mutants) and drop those that reward more than this share of the
    known-wrong mutants (None: no audit)."""
    constraints: tuple[str, ...] = ()
    """pip constraints (``NAME==VERSION``) every install of the build is held to: a corpus's
    lock file pins its repositories, these their tests' dependencies
    (:func:`~gym_repost.construct.execution.read_constraints`)."""
    chunk: tuple[int, int] | None = None
    """``(index, size)``: build only the extracted candidates ``[index * size, (index + 1) *
    size)``, one unit of a repository a corpus build splits (extraction's drops count in
    unit 0); None: every candidate."""

    def thresholds(self) -> QualityThresholds:
        """The quality thresholds of the split."""
        return QualityThresholds.for_split(
            self.split, min_kill_rate=self.min_kill_rate, mutants=self.mutants, seed=self.seed
        )


@dataclass
class Prepared:
    """A candidate after the static stages."""

    candidate: Candidate
    slice: DependencySlice | None
    sandboxed: SandboxedScript | None


@dataclass
class BuildResult:
    """Everything a build produced."""

    repo: SourceRepository
    tasks: list[FunctionTask]
    drops: list[Drop]
    candidates: int
    timings: dict[str, float]
    outcomes: list[tuple[Candidate, BuildOutcome]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    infra_errors: list[str] = field(default_factory=list)
    llm_usage: dict[str, Any] | None = None
    """The LLM builder's totals (calls, retries, tokens, cost), when a model was used."""
    audit: dict[str, Any] | None = None
    """The audit's totals, when the build audited its tasks (``max_false_accept``)."""
    audited: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per audited task id: its status, known-wrong mutants and false accepts (kept tasks and dropped ones)."""
    llm_log: list[str] = field(default_factory=list)
    """The exchange log's lines of a build that kept them rather than writing them (one
    run by a Ray actor: the driver writes them, see :class:`~gym_repost.construct.llm_builder.LLMBuildWork`)."""
    limits: list[str] = field(default_factory=list)
    """Limits that cut the tracing of the repository's tests short (its call budget, the
    CPU-time or the wall-clock safety limit), and an audit gate that could not run: what a corpus reports
    per repository as cut short but not failed (:meth:`all_limits`)."""
    installed: list[str] = field(default_factory=list)
    """``NAME==VERSION`` of what pip installed for the build (into its package set)."""

    def statistics(self) -> dict[str, Any]:
        """Table 2, the drop table, the stage timings, the wall-clock safety limits that fired
        (normally none: a build that lists some may differ from an unloaded one), and the LLM usage."""
        stats = {
            "table2": table2(self.candidates, self.tasks),
            "drops": drop_table(self.drops),
            "timings": dict(self.timings),
            "infra_errors": len(self.infra_errors),
            "safety_limits": self.safety_limits(),
        }
        if self.llm_usage is not None:
            stats["llm"] = dict(self.llm_usage)
        if self.audit is not None:
            stats["audit"] = dict(self.audit)
        return stats

    def all_limits(self) -> list[str]:
        """What cut the build's work short and was survived, each once, in order: the limits
        that stopped tracing (:attr:`limits`, the audit's failures too), then the wall-clock
        safety limits of the construction episodes."""
        return list(dict.fromkeys([*self.limits, *self.safety_limits()]))

    def safety_limits(self) -> list[str]:
        """The wall-clock safety limits that fired: the build's notes about them (tracing),
        then ``file::qualname: note`` for each in a construction episode."""
        return [n for n in self.notes if SAFETY_NOTE in n] + [
            f"{candidate.key}: {note}"
            for candidate, outcome in self.outcomes
            for note in outcome.stats.get("safety_limits", [])
        ]


def prepare(
    repo: SourceRepository,
    candidates: Sequence[Candidate],
    rescue: bool = False,
    seeds: Mapping[str, Sequence[Any]] | None = None,
) -> tuple[list[Prepared], list[Drop]]:
    """Stages 3 and 4 for every candidate: dependency slice, then the sandboxed module.

    With ``rescue``, a candidate failing either stage is prepared all the same, with what
    it has (no slice, or no module), instead of being dropped. ``seeds``: the traced calls
    per candidate key; the repository classes and functions they name are put in the
    script too, so that they run there (a tested function's argument of a class it never
    names itself: ``build_filter_stack(stack, options)``).
    """
    from gym_repost.construct.dependencies import build_index, slice_dependencies
    from gym_repost.construct.sandboxing import sandbox_script

    index = build_index(repo)
    prepared, drops = [], []
    for candidate in candidates:
        names = {name for call in (seeds or {}).get(candidate.key, []) for name in getattr(call, "names", ())}
        sliced = slice_dependencies(index, candidate, sorted(names))
        script = sandbox_script(sliced) if not isinstance(sliced, Drop) else sliced
        if isinstance(script, Drop) and not rescue:
            drops.append(script)
            continue
        prepared.append(
            Prepared(
                candidate, None if isinstance(sliced, Drop) else sliced, None if isinstance(script, Drop) else script
            )
        )
    return prepared, drops


def trace_seeds(
    sandbox: Sandbox,
    repo: SourceRepository,
    candidates: Sequence[Candidate],
    installer: PackageInstaller,
    attempts: int = 4,
) -> tuple[dict[str, list[Any]], list[str], list[str]]:
    """Inputs the repository's own tests pass to the candidates (run in the sandbox).

    The pytest plugins whose fixtures or marks the suite uses are installed first (the
    tracer loads what is installed); missing third-party modules are installed and the
    suite rerun, a bounded number of times. Returns the recorded calls per candidate key,
    notes, and the limits that cut the tracing short (each also a note:
    :attr:`BuildResult.limits`).
    """
    from gym_repost.construct.testgen import trace_repository
    from gym_repost.construct.testgen.trace import suite_plugins, verify_trace

    notes: list[str] = []
    plugins = suite_plugins(repo)
    if plugins:  # their fixtures are no missing module: installed before the suite runs
        provided = [p for p in plugins if installer.install_for(p.split(".")[0])[0]]
        notes.append(f"tracing: installed the pytest plugins {', '.join(provided) or 'none'} of {', '.join(plugins)}")
    result = trace_repository(sandbox, repo, candidates, verify=False)
    for _ in range(attempts):
        missing = [m for m in result.missing_modules if m not in installer.refuse]
        if not missing:
            break
        installed = [m for m in missing if installer.install_for(m)[0]]
        notes.append(
            f"tracing: installed providers of {', '.join(installed) or 'nothing'} (missing: {', '.join(missing)})"
        )
        if not installed:
            break
        result = trace_repository(sandbox, repo, candidates, verify=False)
    result = verify_trace(sandbox, repo, candidates, result)
    if result.unsteady:
        notes.append(
            f"tracing: {result.unsteady} recorded call(s) dropped: a second run of their tests, in another "
            f"directory with the clock moved, did not make them (the time, a random draw or a temporary path)"
        )
    notes.extend(f"tracing: {e}" for e in result.errors[:5])
    limits = _tracing_limits(result)
    if result.tests_run == 0 and test_files(repo):
        why = f": {'; '.join(e[:200] for e in result.errors[:3])}" if result.errors else ""
        limits.insert(0, f"tracing: the repository's own tests ran no test{why}")
    for note in limits:
        logger.warning("%s: %s", repo.name, note)
        notes.append(note)
    return result.calls, notes, limits


def _tracing_limits(result: TraceResult) -> list[str]:
    """Notes on the limits that stopped the tracing of a repository's tests."""
    stopped = f"stopped the repository's tests after {result.tests_run} test(s)"
    cut = " (the last one was cut)" if result.cut else ""
    notes = []
    if result.wall_stops:
        notes.append(
            f"tracing: {SAFETY_NOTE}: {result.wall_stops} test(s) stopped by the wall clock rather than "
            f"by their CPU-time limit; inputs they would have given are missing"
        )
    if result.budget_limited:
        notes.append(
            f"tracing: the call budget ({CALL_BUDGET:,} calls) {stopped}; the inputs recorded until then "
            f"are kept, those of the rest are missing"
        )
    if result.cpu_limited:
        notes.append(
            f"tracing: the run's CPU-time limit (a safety limit) {stopped}{cut}, {result.cpu_seconds:.0f} CPU "
            f"seconds and {result.events:,} calls in; the inputs recorded until then are kept, those of the rest "
            f"are missing, and where it stops varies from run to run"
        )
    if result.timed_out:
        notes.append(
            f"tracing: {SAFETY_NOTE}: the wall clock {stopped}{cut}; inputs the rest would have given "
            f"are missing, so the build may differ from an unloaded run's"
        )
    return notes


PolicyFactory = Callable[[], BuildPolicy]
OnCandidate = Callable[[Candidate, BuildOutcome | None], None]
"""Called as each construction episode ends, with its outcome (None: an infrastructure error)."""
OnStage = Callable[[str, int], None]
"""Called with a stage's name and count (``candidates``, N) as the build learns it."""


@dataclass(frozen=True)
class _CandidateWork:
    """One construction episode, on a thread of the repository's build: the units share
    the build's sandbox, package installer and traced inputs, so they stay in the process
    that built them (the repository is the unit a corpus build sends to other workers)."""

    repo: SourceRepository
    installer: PackageInstaller
    seeds: dict[str, list[Any]]
    settings: BuildSettings
    policy_factory: PolicyFactory
    on_candidate: OnCandidate | None

    def __call__(self, item: Prepared, sandbox: Sandbox | None) -> tuple[Candidate, BuildOutcome | str]:
        context = BuildContext(
            repo=self.repo,
            candidate=item.candidate,
            slice=item.slice,
            sandboxed=item.sandboxed,
            sandbox=need_sandbox(sandbox, "a construction episode"),
            installer=self.installer,
            thresholds=self.settings.thresholds(),
            split=self.settings.split,
            seeds=self.seeds.get(item.candidate.key, []),
        )
        try:
            outcome: BuildOutcome | str = run_build_episode(context, self.policy_factory(), self.settings.max_steps)
        except InfrastructureError as exc:
            outcome = f"{item.candidate.key}: {type(exc).__name__}: {exc}"
        if self.on_candidate is not None:
            self.on_candidate(item.candidate, outcome if isinstance(outcome, BuildOutcome) else None)
        return item.candidate, outcome


def build_function_tasks(
    source: str,
    settings: BuildSettings,
    sandbox: Sandbox,
    policy_factory: PolicyFactory | None = None,
    on_candidate: OnCandidate | None = None,
    on_stage: OnStage | None = None,
) -> BuildResult:
    """Build function tasks from ``source`` (a directory, an archive or ``pypi:NAME[==V]``).

    Raises:
        BuildError: the source as a whole cannot be used (missing, not an archive, a
            refused license, too large).
    """
    from gym_repost.construct.builder import DeterministicBuilder, DeterministicBuilderSettings
    from gym_repost.construct.ingest import ingest

    timer = StageTimer()
    with timer("ingest"):
        repo = ingest(source, cache_dir=settings.cache_dir, licenses=settings.licenses)
    with timer("extract"):
        candidates, drops = _extract(repo, settings)
        if settings.chunk is not None:
            index, size = settings.chunk
            candidates, drops = candidates[index * size : (index + 1) * size], drops if index == 0 else []
    if on_stage:
        on_stage("candidates", len(candidates))
    factory = policy_factory or (
        lambda: DeterministicBuilder(
            DeterministicBuilderSettings(test_executions=settings.test_executions, seed=settings.seed)
        )
    )
    with own_packages(sandbox) as (box, shared):
        installer = PackageInstaller(box, refuse=frozenset(local_modules(repo)), constraints=settings.constraints)
        notes: list[str] = []
        limits: list[str] = [shared] if shared else []
        seeds: dict[str, list[Any]] = {}
        if settings.trace and candidates:
            with timer("tracing"):
                seeds, notes, traced = trace_seeds(box, repo, candidates, installer)
                limits += traced
        with timer("dependencies+sandboxing"):
            prepared, static_drops = prepare(repo, candidates, rescue=settings.rescue_static_drops, seeds=seeds)
        with timer("construction"):
            work = _CandidateWork(repo, installer, seeds, settings, factory, on_candidate)
            results = LocalExecutor(settings.workers, box).map(work, prepared)
        built = _collect(repo, len(candidates), drops + static_drops, results, timer, notes)
        built.limits = limits
        if settings.max_false_accept is not None and built.tasks:
            with timer("audit"):
                _drop_false_acceptors(built, box, settings, installer)
            built.timings = timer.seconds
        built.installed = installer.pins()
    return built


def _drop_false_acceptors(
    built: BuildResult, sandbox: Sandbox, settings: BuildSettings, installer: PackageInstaller
) -> None:
    """Audit the built tasks; drop those above ``max_false_accept`` (the audit's totals go in
    the build's statistics)."""
    from gym_repost.construct.audit import audit_tasks, audit_totals

    limit = settings.max_false_accept or 0.0
    audits = audit_tasks(
        sandbox,
        built.tasks,
        built.repo,
        seed=settings.seed,
        workers=settings.workers,
        part="build",
        install=installer.provide,
    )
    built.audit = audit_totals(audits)
    failed = [a for a in audits if a.status == "error"]
    if failed:
        built.limits.append(
            f"audit: {len(failed)} task(s) kept unaudited, the gate could not run: {failed[0].detail[:300]}"
        )
    built.audited = {
        a.task_id: {
            "status": a.status,
            "known_wrong": len(a.known_wrong),
            "false_accepts": len(a.false_accepts),
            "not_run": sum(m.upstream == "not run" for m in a.mutants),
        }
        for a in audits
    }
    rates = {a.task_id: a.false_accept_rate for a in audits}
    kept = []
    for task in built.tasks:
        rate = rates.get(task.id)
        if rate is not None and rate > limit:
            detail = f"{100 * rate:.0f}% of the mutants its repository's own tests reject are rewarded"
            built.drops.append(Drop(task.provenance.file, task.provenance.qualname, "audit", "false accepts", detail))
        else:
            kept.append(task)
    built.tasks = kept


class RepositoryUnit:
    """What builds one repository: a unit of work (``unit(source, sandbox)``, as an executor
    calls it, in the sandbox it is handed), or :meth:`build` in this process, with progress."""

    def __call__(self, source: str, sandbox: Sandbox | None) -> BuildResult:
        return self.build(source, need_sandbox(sandbox, "a build"))

    def build(
        self, source: str, sandbox: Sandbox, on_candidate: OnCandidate | None = None, on_stage: OnStage | None = None
    ) -> BuildResult:
        """Build ``source`` in ``sandbox``, calling the progress callbacks of :func:`build_function_tasks`."""
        raise NotImplementedError


@dataclass(frozen=True)
class BuildWork(RepositoryUnit):
    """One repository's build as a unit of work (``--executor ray`` sends it to an actor,
    whose sandbox builds it); the deterministic builder, or ``policy_factory``."""

    settings: BuildSettings
    policy_factory: PolicyFactory | None = None

    def build(
        self, source: str, sandbox: Sandbox, on_candidate: OnCandidate | None = None, on_stage: OnStage | None = None
    ) -> BuildResult:
        """The build in this process, with progress callbacks (:func:`build_function_tasks`)."""
        return build_function_tasks(source, self.settings, sandbox, self.policy_factory, on_candidate, on_stage)


def _collect(
    repo: SourceRepository,
    n_candidates: int,
    drops: list[Drop],
    results: list[Any],
    timer: StageTimer,
    notes: list[str],
) -> BuildResult:
    tasks, outcomes, infra = [], [], []
    for candidate, outcome in results:
        if isinstance(outcome, str):
            infra.append(outcome)
            reason = "LLM failure" if ": LLMError: " in outcome else "sandbox failure"
            drops.append(Drop(candidate.file, candidate.qualname, "execution", reason, outcome))
            continue
        outcomes.append((candidate, outcome))
        if outcome.task is not None:
            tasks.append(outcome.task)
        elif outcome.drop is not None:
            drops.append(outcome.drop)
    return BuildResult(
        repo=repo,
        tasks=tasks,
        drops=drops,
        candidates=n_candidates,
        timings=timer.seconds,
        outcomes=outcomes,
        notes=repo.notes + notes,
        infra_errors=infra,
    )


def count_candidates(source: str, settings: BuildSettings) -> int:
    """How many candidates a build of ``source`` with ``settings`` extracts (no sandbox:
    ingest and extraction only, a second for a large package).

    Raises:
        BuildError: the source as a whole cannot be used.
    """
    from gym_repost.construct.ingest import ingest

    repo = ingest(source, cache_dir=settings.cache_dir, licenses=settings.licenses)
    return len(_extract(repo, settings)[0])


def _extract(repo: SourceRepository, settings: BuildSettings) -> tuple[list[Candidate], list[Drop]]:
    """Extraction with the settings' keyword table; ``only`` is applied before the cap."""
    from gym_repost.construct.extract import DEFAULT_EXCLUDE_KEYWORDS, extract_candidates, select_candidates

    keywords = DEFAULT_EXCLUDE_KEYWORDS if settings.exclude_keywords is None else settings.exclude_keywords
    if not settings.only:
        candidates, drops, _ = extract_candidates(
            repo, max_candidates=settings.max_candidates, seed=settings.seed, keywords=keywords, keep=settings.keep
        )
        return candidates, drops
    found, drops, _ = extract_candidates(
        repo, max_candidates=1_000_000, seed=settings.seed, keywords=keywords, keep=settings.keep
    )
    chosen = [c for c in found if _selected(c.file, c.qualname, settings.only)]
    kept = select_candidates(chosen, settings.max_candidates, settings.seed)
    drops = [d for d in drops if _selected(d.file, d.qualname, settings.only)]
    drops += [Drop(c.file, c.qualname, "extract", "over the per-repository cap") for c in chosen if c not in kept]
    return kept, drops


def _selected(file: str, qualname: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(f"{file}::{qualname}", p) or fnmatch.fnmatchcase(qualname, p) for p in patterns)
