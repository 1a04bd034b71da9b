"""The construction agent: one episode per candidate, acting through tools.

Like a coding agent in the gym, the builder reads repository files, writes code (here:
the whole evaluation script), runs it in the sandbox, installs packages, and submits;
``abandon`` ends the episode with a drop reason. The policy choosing the actions is
either deterministic (:mod:`gym_repost.construct.builder`) or an LLM; both see the same
tools and the same observations, and the tools decide what is kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from gym_repost.construct.execution import PackageInstaller, missing_module, run_with_installs
from gym_repost.construct.function_task import make_function_task, repository_view
from gym_repost.construct.quality import (
    Judgement,
    QualityReport,
    QualityThresholds,
    Split,
    check_quality,
    judged_drop_reason,
    sanity_checks,
)
from gym_repost.construct.stages import Candidate, DependencySlice, Drop, SandboxedScript, SourceRepository
from gym_repost.construct.testgen.trace import local_modules
from gym_repost.errors import BuildError, InfrastructureError, ToolError
from gym_repost.harness.coverage import FunctionCoverage, measure_coverage
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask, Provenance, RepositoryView
from gym_repost.tools import RepositoryTools, ToolResult, ToolSpec, parse_action, validate_args

logger = logging.getLogger(__name__)


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


BUILD_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "list_files",
        "List the repository's files (tests included), optionally under a directory.",
        _schema({"path": {"type": "string"}}, []),
    ),
    ToolSpec(
        "read_file",
        "Read a repository file with line numbers; optionally a line range.",
        _schema({"path": {"type": "string"}, "start": {"type": "integer"}, "end": {"type": "integer"}}, ["path"]),
    ),
    ToolSpec(
        "search",
        "Search the repository's files for a regular expression.",
        _schema({"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern"]),
    ),
    ToolSpec(
        "write_script",
        "Write the whole evaluation script: the target exactly as in the repository, "
        "its dependencies, mocks, `test_{name}()` comparing `{name}` with "
        '`{name}_new_implementation`, and `if __name__ == "__main__": test_{name}()`.',
        _schema({"script": {"type": "string"}}, ["script"]),
    ),
    ToolSpec(
        "run_script",
        "Run the script in the sandbox: with its test, the original target is inserted "
        "as the candidate and the report shows the result and the target's branch coverage "
        "(missing lines and branches); without a test yet, the script is run as a module to check "
        "that it imports and defines everything.",
        _schema({}, []),
    ),
    ToolSpec(
        "install",
        "Install Python distributions (space-separated pip names) into the sandbox's package cache.",
        _schema({"packages": {"type": "string"}}, ["packages"]),
    ),
    ToolSpec(
        "submit",
        "Submit the script; quality checks decide whether the task is kept. A model's judgement "
        "may come with it: `functionality` (same | yes | no: is the script's target the repository's "
        "code, edited but equivalent, or different) and `tests` (correct | incorrect); then the split's "
        "keep rule applies (eval: target unchanged and tests correct; train: also an edited target "
        "judged equivalent).",
        _schema({"functionality": {"type": "string"}, "tests": {"type": "string"}, "notes": {"type": "string"}}, []),
    ),
    ToolSpec(
        "abandon",
        "Give up on this target: a short reason category, optionally the pipeline stage "
        "that failed (tests, execution, sandboxing, ...) and details.",
        _schema({"reason": {"type": "string"}, "stage": {"type": "string"}, "detail": {"type": "string"}}, ["reason"]),
    ),
)


@dataclass
class BuildContext:
    """What one construction episode works on."""

    repo: SourceRepository
    candidate: Candidate
    slice: DependencySlice | None
    sandboxed: SandboxedScript | None
    sandbox: Sandbox
    installer: PackageInstaller
    thresholds: QualityThresholds
    split: str
    seeds: list[Any] = field(default_factory=list)
    repository: RepositoryView | None = None

    def provenance(self) -> Provenance:
        """Where the task comes from."""
        return Provenance(
            source=self.repo.source,
            repo=self.repo.name,
            version=self.repo.version,
            file=self.candidate.file,
            qualname=self.candidate.qualname,
            license=self.repo.license,
            url=self.repo.url,
        )


@dataclass
class BuildOutcome:
    """How an episode ended: a kept task, or a drop; the steps it took."""

    task: FunctionTask | None = None
    drop: Drop | None = None
    quality: QualityReport | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    installs: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    """The policy's ``stats()`` when it has one (an LLM builder's tokens and cost)."""


class BuildPolicy(Protocol):
    """Chooses the construction agent's tool calls (deterministic or LLM)."""

    def reset(self, context: BuildContext, observation: str) -> None:
        """Begin an episode on ``context.candidate``."""

    def act(self, observation: str, info: dict[str, Any]) -> Any:
        """The next tool call."""


class BuildTools(RepositoryTools):
    """The construction tools over one candidate (handlers of :data:`BUILD_TOOLS`)."""

    specs = BUILD_TOOLS

    def __init__(self, context: BuildContext) -> None:
        super().__init__(context.repo.files)
        self.context = context
        self.script: str | None = None
        self.outcome = BuildOutcome()
        self.done = False
        self.measured: dict[str, FunctionCoverage] = {}
        """The ground truth's coverage per task (content hash) run in this episode: ``submit``
        reuses it rather than measuring the same script again."""

    def _drop(self, stage: str, reason: str, detail: str = "") -> None:
        c = self.context.candidate
        self.outcome.drop = Drop(c.file, c.qualname, stage, reason, detail)  # type: ignore[arg-type]
        self.done = True

    def task_from_script(self) -> FunctionTask:
        """The task the current script makes.

        Raises:
            ToolError: there is no script, or it lacks the target or the test.
        """
        if self.script is None:
            raise ToolError("no script yet: call write_script first")
        ctx = self.context
        try:
            return make_function_task(
                name=f"{ctx.repo.name}/{ctx.candidate.qualname}",
                provenance=ctx.provenance(),
                script=self.script,
                repository=ctx.repository or _view(ctx),
                context=ctx.slice.context if ctx.slice else "",
                timeout=10.0,
                standalone=ctx.slice.standalone if ctx.slice else False,
                requirements=sorted(set(ctx.installer.installed)),
                local_modules=frozenset(local_modules(ctx.repo)),
                metadata={"split": ctx.split},
            )
        except BuildError as exc:
            raise ToolError(str(exc)) from None

    def write_script(self, script: str) -> ToolResult:
        """Store the evaluation script."""
        try:
            compile(script, "evaluation.py", "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise ToolError(f"the script does not parse: line {exc.lineno}: {exc.msg}") from None
        self.script = script
        return ToolResult(f"Script saved ({len(script.splitlines())} lines).")

    def run_script(self) -> ToolResult:
        """Run the script (with its test, or as a module)."""
        if self.script is None:
            raise ToolError("no script yet: call write_script first")
        if f"def test_{self.context.candidate.name}(" not in self.script:
            return self._run_module()
        task = self.task_from_script()
        outcome = run_with_installs(self.context.sandbox, task, None)
        text = outcome.report.to_text()
        data: dict[str, Any] = {"passed": outcome.passed, "report": outcome.report.model_dump()}
        if outcome.passed:
            cov = self._coverage(task)
            data.update(
                branch_coverage=cov.branch_coverage,
                branches=cov.branches,
                missing_lines=cov.missing_lines,
                missing_branches=cov.missing_branches,
            )
            text += (
                f"\nBranch coverage of the target: {100 * cov.branch_coverage:.0f}% "
                f"({cov.branches} branches); missing lines (target's own numbering): "
                f"{cov.missing_lines or 'none'}; missing branches: {cov.missing_branches or 'none'}"
            )
        return ToolResult(text, data=data)

    def _coverage(self, task: FunctionTask) -> FunctionCoverage:
        """The ground truth's coverage of ``task``, measured once per episode."""
        key = task.content_hash()
        if key not in self.measured:
            self.measured[key] = measure_coverage(self.context.sandbox, task)
        return self.measured[key]

    def _run_module(self) -> ToolResult:
        result = self.context.sandbox.run({"module.py": self.script or ""}, ["python3", "module.py"], timeout=30.0)
        if result.ok:
            return ToolResult(
                "The script runs as a module (it imports and defines everything).",
                data={"passed": True, "module_only": True},
            )
        tail = result.stderr.strip()[-1500:] or f"exit status {result.returncode}"
        module = missing_module(result.stderr)
        return ToolResult(
            f"The script fails as a module:\n{tail}",
            data={"passed": False, "module_only": True, "missing_module": module, "timed_out": result.timed_out},
        )

    def install(self, packages: str) -> ToolResult:
        """Install distributions (or the providers of import names) in the sandbox."""
        names = packages.split()
        if not names:
            raise ToolError("install: give at least one package name")
        results = [self.context.installer.install_for(name) for name in names]
        self.outcome.installs.extend(what for _, what in results)
        return ToolResult(
            "\n".join(what for _, what in results),
            ok=all(ok for ok, _ in results),
            data={"installed": [n for n, (ok, _) in zip(names, results, strict=True) if ok]},
        )

    def submit(self, functionality: str | None = None, tests: str | None = None, notes: str = "") -> ToolResult:
        """Check quality (and apply the split's keep rule to a judgement); keep the task or drop it."""
        task = self.task_from_script()
        ctx = self.context
        judgement = _judgement(functionality, tests, notes)
        if judgement is not None:
            checks = sanity_checks(task, ctx.candidate.source)
            split: Split = "eval" if ctx.split == "eval" else "train"
            reason = judged_drop_reason(split, checks["target unchanged (AST)"], judgement)
            if reason is not None:
                return self._rejected(QualityReport(checks=checks, reason=reason, detail=judgement.notes[:300]))
        quality = check_quality(
            ctx.sandbox,
            task,
            ctx.candidate.source,
            ctx.thresholds,
            allow_changed_target=judgement is not None,
            coverage=self.measured.get(task.content_hash()),
        )
        if not quality.passed:
            return self._rejected(quality)
        self.outcome.task = _with_measurements(task, quality, judgement)
        self.done = True
        return ToolResult("Kept: the task passed every quality check.", data={"kept": True})

    def _rejected(self, quality: QualityReport) -> ToolResult:
        self.outcome.quality = quality
        return ToolResult(
            f"Rejected: {quality.reason}" + (f" ({quality.detail})" if quality.detail else ""),
            ok=True,
            data={
                "kept": False,
                "reason": quality.reason,
                "detail": quality.detail,
                "branch_coverage": quality.branch_coverage,
                "kill_rate": quality.kill_rate,
            },
        )

    def abandon(self, reason: str, stage: str = "tests", detail: str = "") -> ToolResult:
        """End the episode with a drop."""
        if stage not in _STAGES:
            raise ToolError(f"abandon: unknown stage {stage!r}; one of {', '.join(sorted(_STAGES))}")
        self._drop(stage, reason, detail)
        return ToolResult(f"Abandoned: {reason}" + (f" ({detail})" if detail else ""))

    def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        """Validate and run a tool."""
        spec = next((s for s in self.specs if s.name == name), None)
        if spec is None:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(s.name for s in self.specs)}")
        validate_args(spec, args)
        return getattr(self, name)(**args)


_STAGES = {"ingest", "extract", "dependencies", "sandboxing", "tests", "execution", "quality"}


def _view(ctx: BuildContext) -> RepositoryView:
    return repository_view(ctx.repo.files, ctx.candidate.file, ctx.candidate.qualname, complete=True)


def _judgement(functionality: str | None, tests: str | None, notes: str) -> Judgement | None:
    """The judgement ``submit`` was given, or None (no model judged the script)."""
    if functionality is None and tests is None:
        return None
    if functionality not in ("same", "yes", "no") or tests not in ("correct", "incorrect"):
        raise ToolError(
            "submit: a judgement needs functionality=same|yes|no and tests=correct|incorrect, "
            f"got functionality={functionality!r}, tests={tests!r}"
        )
    return Judgement(functionality, tests == "correct", notes)  # type: ignore[arg-type]


def _with_measurements(task: FunctionTask, quality: QualityReport, judgement: Judgement | None = None) -> FunctionTask:
    task.metadata.branch_coverage = quality.branch_coverage
    task.metadata.checks = {
        **quality.checks,
        "branch_coverage": quality.branch_coverage,
        "branches": quality.branches,
        "mutant_kill_rate": quality.kill_rate,
        "mutants": quality.mutants,
    }
    if judgement is not None:
        task.metadata.checks.update(
            {"judged functionality": judgement.functionality, "tests judged correct": judgement.tests_correct}
        )
        if judgement.notes:
            task.metadata.notes.append(f"judge: {judgement.notes[:500]}")
    return task.with_id()


def run_build_episode(context: BuildContext, policy: BuildPolicy, max_steps: int = 24) -> BuildOutcome:
    """Let ``policy`` build a task for ``context.candidate`` through :class:`BuildTools`.

    Raises:
        InfrastructureError: the sandbox failed (the caller records it apart from drops).
    """
    tools = BuildTools(context)
    observation = f"Build a task for {context.candidate.qualname} in {context.candidate.file}."
    policy.reset(context, observation)
    info: dict[str, Any] = {"tool": None, "ok": True, "data": {}}
    for _ in range(max_steps):
        action = policy.act(observation, info)
        try:
            name, args = parse_action(action)
            result = tools.call(name, args)
        except ToolError as exc:
            name, result = None, ToolResult(f"Error: {exc}", ok=False)
        except InfrastructureError:
            raise
        tools.outcome.steps.append({"tool": name, "ok": result.ok, "observation": result.output[:2000]})
        observation, info = result.output, {"tool": name, "ok": result.ok, "data": result.data}
        if tools.done:
            return _with_stats(tools.outcome, policy)
    tools._drop("quality", "step budget exhausted", f"{max_steps} steps")
    return _with_stats(tools.outcome, policy)


def _with_stats(outcome: BuildOutcome, policy: BuildPolicy) -> BuildOutcome:
    stats = getattr(policy, "stats", None)
    if callable(stats):
        outcome.stats = dict(stats())
    return outcome


__all__ = ["BUILD_TOOLS", "BuildContext", "BuildOutcome", "BuildPolicy", "BuildTools", "run_build_episode"]
