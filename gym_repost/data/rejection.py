"""Rejection sampling (RepoST): SFT data from the passing solutions of an evaluation run.

From a run directory made by ``gym-repost eval`` with n samples per task:

* every passing solution becomes an SFT example (the task's prompt, the code as the
  answer), duplicates within a task dropped;
* optionally the ground truth is added for every task;
* with a :class:`~gym_repost.data.base.Repairer` (``--debug-failures``), each failed
  solution is tested again to get its full report, handed to the repairer with that
  report, and the repaired code is added when it passes. :func:`load_repairer` makes
  one from a policy spec: an ``llm:PROVIDER/MODEL`` policy answers once from the failed
  code and its report (:class:`~gym_repost.data.llm_samplers.LLMRepairer`), unless it
  acts agentically; any other policy plays a repair episode (:class:`PolicyRepairer`).

:class:`RejectionSummary` holds RepoST's Table 9 numbers: tasks with at least one
passing solution before and after debugging.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gym_repost.data.base import Repairer
from gym_repost.data.llm_samplers import LLMTotals, add_llm_totals, close_samplers, llm_totals
from gym_repost.data.records import SftFormat, normalized_code, sft_record
from gym_repost.env.function_env import FunctionEnv
from gym_repost.errors import ConfigError, InfrastructureError, PolicyError, RunDirError, TaskFormatError
from gym_repost.evaluate.run_dir import Episode, RunConfig, RunDir
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.executor import Executor, LocalExecutor, with_sandbox
from gym_repost.harness import run_function_tests
from gym_repost.llm import Ledger
from gym_repost.policy.base import tool_call
from gym_repost.policy.loader import PolicyFactory, load_policy
from gym_repost.policy.privileged import reset_policy
from gym_repost.prompting import render_prompt
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask, load_tasks

logger = logging.getLogger(__name__)

Origin = Literal["sample", "repaired", "ground_truth"]


@dataclass(frozen=True)
class Solution:
    """A passing solution of a task and where it comes from."""

    code: str
    origin: Origin
    sample: int | None = None


@dataclass
class TaskOutcome:
    """What one task contributed."""

    task: FunctionTask
    solutions: list[Solution] = field(default_factory=list)
    solved_before: bool = False
    failed: int = 0
    repair_attempts: int = 0
    repaired: int = 0
    repair_errors: int = 0
    infra_errors: int = 0

    @property
    def solved_after(self) -> bool:
        """At least one passing sample or repaired solution."""
        return self.solved_before or self.repaired > 0

    llm: LLMTotals | None = None
    """What the task's repairs cost (None when no model ran)."""


@dataclass(frozen=True)
class RejectionSummary:
    """RepoST's Table 9 shape, plus the counts behind it.

    ``passing_samples``, ``repaired_solutions`` and ``ground_truth`` count the solutions
    kept (after dropping duplicates within a task); ``repaired`` counts every repair that
    passed.
    """

    tasks: int
    solved_before: int
    solved_after: int
    passing_samples: int
    repaired_solutions: int
    failed_samples: int
    repair_attempts: int
    repaired: int
    repair_errors: int
    ground_truth: int
    records: int
    infra_errors: int
    llm: LLMTotals | None = None
    """What the repair model's calls cost, over every task (None when no model ran)."""


def load_run(
    run_dir: str | Path, tasks_path: str | Path | None = None
) -> tuple[RunConfig, list[Episode], dict[str, FunctionTask]]:
    """The configuration, episodes and function tasks (by id) of a finished evaluation run.

    Args:
        run_dir: the run directory.
        tasks_path: the task file, when not the one the run's ``config.json`` names.

    Raises:
        RunDirError: no such directory, no ``config.json``, the task file is missing or
            changed since the run.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise RunDirError(f"{path}: no such run directory")
    config = RunDir(path).read_config()
    if config is None:
        raise RunDirError(f"{path} has no config.json: not a run directory made by `gym-repost eval`")
    source = Path(tasks_path) if tasks_path is not None else Path(config.tasks)
    try:
        tasks = load_tasks(source)
    except TaskFormatError as exc:
        raise RunDirError(f"cannot read the run's tasks ({exc}); pass the task file with --tasks") from None
    if tasks_digest(tasks) != config.tasks_digest:
        raise RunDirError(
            f"{source} changed since the run in {path} (its task ids differ from the run's); "
            "pass the task file the run used with --tasks"
        )
    functions = {t.id: t for t in tasks if isinstance(t, FunctionTask)}
    if len(functions) < len(tasks):
        logger.warning(
            "%s: %d tasks are not function tasks; rejection sampling skips them", source, len(tasks) - len(functions)
        )
    return config, RunDir(path).episodes(), functions


def _repair_observation(statement: str, task: FunctionTask, code: str, report: str) -> str:
    return render_prompt(
        "gym_repost.data",
        "repair.j2",
        statement=statement.rstrip(),
        qualname=task.target.qualname,
        code=code,
        report=report,
    )


class PolicyRepairer:
    """Repairs with a policy acting in the task's environment.

    The environment starts with the failed code written; the policy's first observation
    is the task statement, the failed code and its test report (``prompts/repair.j2``),
    and its ``info`` also holds them as ``failed_code`` and ``failure_report``. The
    repaired code is whatever the policy has written when the episode ends.

    Args:
        factory: makes the policy (``load_policy(spec)``).
        sandbox: where tests run.
        max_steps: step budget of a repair episode.
        max_submissions: submissions allowed in a repair episode.

    Attributes:
        llm: what the repair episodes' models cost, summed from each policy's ``ledger``
            and ``counts`` (an ``llm:`` policy's); None while no policy had a ledger.
    """

    def __init__(
        self, factory: PolicyFactory, sandbox: Sandbox, *, max_steps: int = 30, max_submissions: int = 1
    ) -> None:
        self.factory = factory
        self.sandbox = sandbox
        self.max_steps = max_steps
        self.max_submissions = max_submissions
        self.llm: LLMTotals | None = None
        self._lock = threading.Lock()

    def repair(self, task: FunctionTask, code: str, report: str, *, seed: int) -> str | None:
        """Play one repair episode; return the code written at its end."""
        env = FunctionEnv(
            task, sandbox=self.sandbox, max_steps=self.max_steps + 1, max_submissions=self.max_submissions
        )
        policy = self.factory()
        try:
            statement, info = env.reset(seed=seed)
            env.step(tool_call("write_code", code=code))
            observation = _repair_observation(statement, task, code, report)
            info = {**info, "failed_code": code, "failure_report": report}
            reset_policy(policy, task, observation, info, seed=seed, statement=statement)
            done = False
            while not done:
                observation, _, terminated, truncated, info = env.step(policy.act(observation, info))
                if info.get("infra_error"):
                    raise InfrastructureError(info["infra_error"])
                done = terminated or truncated
            return env.code
        finally:
            self._account(policy)
            close = getattr(policy, "close", None)
            if callable(close):
                close()
            env.close()

    def _account(self, policy: Any) -> None:
        ledger = getattr(policy, "ledger", None)
        if isinstance(ledger, Ledger):
            spent = (ledger.totals(), Counter(getattr(policy, "counts", None) or {}))
            with self._lock:
                self.llm = add_llm_totals([self.llm, spent])


_POLICY_ONLY_OPTIONS = ("mode", "docstring", "tool_calling", "docstring_model")
"""Options of the LLM policy that are not LLM settings (an LLM repairer drops them)."""


def load_repairer(
    spec: str, options: dict[str, Any], sandbox: Sandbox, *, max_steps: int = 30, **llm_settings: Any
) -> Repairer:
    """The repairer for a policy spec and its options (a run's own policy, or another).

    ``llm:PROVIDER/MODEL`` in its default ``generate-and-repair`` mode gives an
    :class:`~gym_repost.data.llm_samplers.LLMRepairer` (one answer from the failed code and
    its report); with ``mode=agentic``, and for every other policy, a
    :class:`PolicyRepairer` plays a repair episode.

    Args:
        spec: the policy spec.
        options: the policy's options (the run's ``policy_options``, or ``--repair-policy-arg``).
        sandbox: where repair episodes run.
        max_steps: step budget of a repair episode.
        **llm_settings: LLM settings for ``llm:`` policies (``base_url``, ``cache_dir``);
            they override ``options``.

    Raises:
        ConfigError: LLM settings for a policy that is not ``llm:``, a bad option, a
            missing API key.
        MissingExtraError: the provider's SDK is not installed.
    """
    settings = {k: v for k, v in llm_settings.items() if v is not None}
    if not spec.startswith("llm:"):
        if settings:
            raise ConfigError(
                f"{', '.join(sorted(settings))} applies to llm:PROVIDER/MODEL repair policies, not {spec!r}"
            )
        return PolicyRepairer(load_policy(spec, **options), sandbox, max_steps=max_steps)
    merged = {**options, **settings}
    if merged.get("mode", "generate-and-repair") != "generate-and-repair":
        return PolicyRepairer(load_policy(spec, **merged), sandbox, max_steps=max_steps)
    from gym_repost.data.llm_samplers import LLMRepairer

    return LLMRepairer(spec.removeprefix("llm:"), **{k: v for k, v in merged.items() if k not in _POLICY_ONLY_OPTIONS})


@dataclass(frozen=True)
class RepairerSpec:
    """A repairer to make where a task's repairs run (:func:`load_repairer`'s arguments):
    it travels to a Ray actor, where the policy or LLM client is created next to the
    actor's sandbox."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)
    max_steps: int = 30
    llm_settings: dict[str, Any] = field(default_factory=dict)

    def make(self, sandbox: Sandbox | None) -> Repairer:
        """The repairer over ``sandbox``."""
        return load_repairer(self.spec, self.options, sandbox, max_steps=self.max_steps, **self.llm_settings)  # type: ignore[arg-type]


def _add(outcome: TaskOutcome, seen: set[str], solution: Solution, dedupe: bool) -> None:
    key = normalized_code(solution.code)
    if dedupe and key in seen:
        return
    seen.add(key)
    outcome.solutions.append(solution)


def _try_repair(task: FunctionTask, episode: Episode, repairer: Repairer, sandbox: Sandbox) -> str | None:
    """The repaired code when it passes, else None.

    Raises:
        PolicyError: the repairer crashed (the caller counts a repair error).
    """
    assert episode.code is not None
    report = run_function_tests(sandbox, task, episode.code)
    if report.passed:
        logger.warning(
            "%s sample %d: failed in the run but passes now (flaky tests?); not repaired", task.name, episode.sample
        )
        return None
    try:
        repaired = repairer.repair(task, episode.code, report.to_text(), seed=episode.seed)
    except InfrastructureError:
        raise
    except Exception as exc:
        raise PolicyError(f"the repairer raised {type(exc).__name__}: {exc}") from exc
    if repaired is None or not run_function_tests(sandbox, task, repaired).passed:
        return None
    return repaired


def collect_task(
    task: FunctionTask,
    episodes: Sequence[Episode],
    sandbox: Sandbox | None,
    *,
    repairer: Repairer | None = None,
    ground_truth: bool = False,
    dedupe: bool = True,
) -> TaskOutcome:
    """The passing (and repaired) solutions of one task's episodes."""
    outcome = TaskOutcome(task)
    seen: set[str] = set()
    ordered = sorted(episodes, key=lambda e: e.sample)
    for ep in ordered:
        if ep.status == "infra_error":
            outcome.infra_errors += 1
        elif ep.status == "passed" and ep.code is not None:
            outcome.solved_before = True
            _add(outcome, seen, Solution(ep.code, "sample", ep.sample), dedupe)
        else:
            outcome.failed += 1
    for ep in ordered:
        if repairer is None or sandbox is None or ep.status != "failed" or not ep.code:
            continue
        outcome.repair_attempts += 1
        try:
            repaired = _try_repair(task, ep, repairer, sandbox)
        except (InfrastructureError, PolicyError) as exc:
            logger.error("%s sample %d: repair failed: %s", task.name, ep.sample, exc)
            outcome.repair_errors += 1
            continue
        if repaired is not None:
            outcome.repaired += 1
            _add(outcome, seen, Solution(repaired, "repaired", ep.sample), dedupe)
    if ground_truth:
        _add(outcome, seen, Solution(task.ground_truth, "ground_truth"), dedupe)
    return outcome


def solution_records(
    outcome: TaskOutcome, fmt: SftFormat = "messages", system: str | None = None
) -> list[dict[str, Any]]:
    """SFT records of one task's solutions."""
    return [
        {**sft_record(outcome.task, s.code, fmt, system), "method": "rejection", "origin": s.origin, "sample": s.sample}
        for s in outcome.solutions
    ]


def summarize_rejection(outcomes: Sequence[TaskOutcome], records: int) -> RejectionSummary:
    """Table 9's numbers over every task of the run."""
    return RejectionSummary(
        tasks=len(outcomes),
        solved_before=sum(o.solved_before for o in outcomes),
        solved_after=sum(o.solved_after for o in outcomes),
        passing_samples=sum(s.origin == "sample" for o in outcomes for s in o.solutions),
        repaired_solutions=sum(s.origin == "repaired" for o in outcomes for s in o.solutions),
        failed_samples=sum(o.failed for o in outcomes),
        repair_attempts=sum(o.repair_attempts for o in outcomes),
        repaired=sum(o.repaired for o in outcomes),
        repair_errors=sum(o.repair_errors for o in outcomes),
        ground_truth=sum(s.origin == "ground_truth" for o in outcomes for s in o.solutions),
        records=records,
        infra_errors=sum(o.infra_errors for o in outcomes),
        llm=add_llm_totals(o.llm for o in outcomes),
    )


def episodes_by_task(
    episodes: Sequence[Episode], tasks: dict[str, FunctionTask]
) -> list[tuple[FunctionTask, list[Episode]]]:
    """Each task of the run (in task-file order) with its episodes."""
    grouped: dict[str, list[Episode]] = {task_id: [] for task_id in tasks}
    for ep in episodes:
        if ep.task_id in grouped:
            grouped[ep.task_id].append(ep)
    return [(tasks[task_id], eps) for task_id, eps in grouped.items()]


@dataclass(frozen=True)
class RejectionWork:
    """The unit of work of :func:`build_rejection`: one task's solutions and repairs. A
    :class:`RepairerSpec` makes its repairer where the task runs (and closes it after);
    a live repairer runs on this process's threads only."""

    repairer: Repairer | RepairerSpec | None
    ground_truth: bool
    dedupe: bool

    @property
    def runs_code(self) -> bool:
        """Only repairs run code: without them no sandbox is started."""
        return self.repairer is not None

    def __call__(self, group: tuple[FunctionTask, list[Episode]], sandbox: Sandbox | None) -> TaskOutcome:
        made = self.repairer.make(sandbox) if isinstance(self.repairer, RepairerSpec) else self.repairer
        try:
            outcome = collect_task(
                group[0], group[1], sandbox, repairer=made, ground_truth=self.ground_truth, dedupe=self.dedupe
            )
        finally:
            if isinstance(self.repairer, RepairerSpec):
                close_samplers([made])
        if isinstance(self.repairer, RepairerSpec):
            outcome.llm = made.llm if isinstance(made, PolicyRepairer) else llm_totals([made])
        return outcome


def build_rejection(
    groups: Sequence[tuple[FunctionTask, list[Episode]]],
    sandbox: Sandbox | None,
    *,
    repairer: Repairer | RepairerSpec | None = None,
    ground_truth: bool = False,
    dedupe: bool = True,
    fmt: SftFormat = "messages",
    system: str | None = None,
    workers: int = 1,
    on_task: Callable[[TaskOutcome], None] | None = None,
    executor: Executor | None = None,
) -> tuple[list[dict[str, Any]], RejectionSummary]:
    """SFT records and Table 9's numbers for a run's tasks, on ``executor`` (default:
    ``workers`` threads over ``sandbox``); records keep the order of ``groups``.

    Args:
        sandbox: where repairs are tested; needed only with a ``repairer``.
        repairer: a :class:`RepairerSpec` (made where each task runs, any executor) or a
            live repairer (this process's threads only).
    """
    if isinstance(repairer, RepairerSpec):
        close_samplers([repairer.make(None)])  # a bad spec or a missing key fails before any task runs
    elif repairer is not None and executor is not None and not isinstance(executor, LocalExecutor):
        raise ConfigError("a live repairer runs on this process's threads only: give a RepairerSpec")
    work = RejectionWork(repairer, ground_truth, dedupe)
    outcomes = with_sandbox(executor, sandbox, workers).map(work, groups, on_task)
    records = [r for o in outcomes for r in solution_records(o, fmt, system)]
    return records, summarize_rejection(outcomes, len(records))
