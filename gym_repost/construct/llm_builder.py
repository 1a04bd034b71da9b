"""The LLM construction policy: RepoST's sandboxing, tests, debugging, coverage and checks by a model.

``gym-repost build SOURCE --builder llm:PROVIDER/MODEL [--base-url URL]``. The model acts
through the same tools as the deterministic builder (:data:`~gym_repost.construct.agent.BUILD_TOOLS`),
on top of the same deterministic stages (ingest, extract, dependencies). Per candidate:

0. A candidate that does not touch the outside world goes to the deterministic builder
   first; when it drops the candidate (sandboxing, test generation or quality failed),
   the model takes over. A candidate that touches the network, a database or user input
   (extraction's keyword categories the deterministic builder drops) goes straight to
   the model.
1. *Aggregate*: the model writes one standalone script from the target, its file and
   the draft the dependency slice gave (as little editing as possible), with fakes for
   external services and example files created under the working directory.
2. *Tests*: the model writes ``test_{name}()`` and the ``__main__`` block.
3. *Debug*: a script that fails (as a module, or its tests with the ground truth) goes
   back to the model with the error, up to ``debug_iterations`` times; the model may
   ask for packages (a ``requirements`` block), installed inside the sandbox.
4. *Coverage*: while the target's branch coverage is under the split's threshold, the
   model is shown the missed lines and branches and adds tests (``coverage_rounds``).
5. *Judge*: the model judges functional equivalence (same / yes / no) and the tests'
   correctness; ``submit`` applies the split's keep rule
   (:func:`~gym_repost.construct.quality.judged_drop_reason`) and then the quality checks.

Every exchange with the model is appended to an :class:`ExchangeLog` (JSONL, one line per
call, tagged with the candidate and the step), and counted in the episode's and the
build's :class:`~gym_repost.llm.Ledger`. A failing endpoint raises
:class:`~gym_repost.errors.LLMError` after the client's retries: the pipeline records an
infrastructure error for the candidate, never a drop of the model's making.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from gym_repost.analysis.source import dedent_code
from gym_repost.construct.agent import BuildContext
from gym_repost.construct.builder import DeterministicBuilder, DeterministicBuilderSettings, PlannedBuilder
from gym_repost.construct.extract import DEFAULT_EXCLUDE_KEYWORDS, _keyword_hit
from gym_repost.construct.pipeline import BuildResult, BuildSettings, BuildWork, OnCandidate, OnStage, RepositoryUnit
from gym_repost.construct.stages import Candidate
from gym_repost.harness import extract_code_block
from gym_repost.llm import Ledger, LLMClient, LLMConfigBase, Message
from gym_repost.llm.accounting import Exchange
from gym_repost.prompting import render_prompt
from gym_repost.sandbox.base import Sandbox
from gym_repost.tools import tool_call

_PROMPTS = "gym_repost.construct"

Action = dict[str, Any]

MOCKABLE_CATEGORIES = ("network", "database", "interactive")
"""Keyword categories the LLM builder accepts: the model replaces them with fakes."""

LLM_EXCLUDE_KEYWORDS = {k: v for k, v in DEFAULT_EXCLUDE_KEYWORDS.items() if k not in MOCKABLE_CATEGORIES}
"""Extraction's keyword table for an LLM build (GPU, cloud, processes... still dropped)."""

_REQUIREMENTS = re.compile(r"```[ \t]*requirements[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_VERDICT = re.compile(r"VERDICT:\s*\**\s*([A-Za-z]+)", re.IGNORECASE)


@dataclass(frozen=True)
class LLMBuilderBudgets:
    """Budgets of the LLM builder (``--builder-arg KEY=VALUE``)."""

    debug_iterations: int = 3
    """Times a failing script goes back to the model with its error (RepoST's k)."""
    coverage_rounds: int = 2
    """Rounds of adding tests for missed lines and branches."""
    deterministic_first: bool = True
    """Let the deterministic builder try candidates that do not touch the outside world."""
    max_context_chars: int = 24_000
    """Longest repository text (the target's file, the draft) put in one prompt."""


def outside_world(candidate: Candidate) -> str | None:
    """What external thing the candidate touches (``network (urlopen)``), or None."""
    hit = _keyword_hit(candidate.source, {k: DEFAULT_EXCLUDE_KEYWORDS[k] for k in MOCKABLE_CATEGORIES})
    return None if hit is None else f"{hit[0]} ({hit[1]})"


def parse_reply(text: str) -> tuple[str | None, list[str]]:
    """The ``python`` code block of a reply and the packages of its ``requirements`` block."""
    packages = [
        line.strip().split()[0]
        for block in _REQUIREMENTS.findall(text)
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    without = _REQUIREMENTS.sub("", text)
    return extract_code_block(without), [p for p in packages if p not in ("pip", "install")]


def parse_verdict(text: str, choices: Sequence[str]) -> str | None:
    """The last ``VERDICT: X`` of a reply, lower-cased, when X is one of ``choices``."""
    found = [m.lower() for m in _VERDICT.findall(text)]
    return found[-1] if found and found[-1] in choices else None


def numbered(code: str) -> str:
    """``code`` with 1-based line numbers (the coverage report's numbering of the target)."""
    lines = code.rstrip("\n").split("\n")
    return "\n".join(f"{i:>4}  {line}" for i, line in enumerate(lines, 1))


class ExchangeLog:
    """Every model exchange of a build as JSONL lines (thread-safe): appended to a file as
    they happen, or, without a path, kept in :attr:`lines` (a build on a Ray actor sends
    them back with its result, and the driver appends them with :meth:`extend`).

    Each line: ``time``, ``client``, ``candidate`` (``file::qualname``), ``step``
    (aggregate, tests, debug, coverage, judge functionality, judge tests), then the
    request, the response (or ``error``), usage and seconds.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.lines: list[str] = []
        """The lines written, when there is no :attr:`path`."""
        self._lock = threading.Lock()

    def write(self, exchange: Exchange, *, client: str, candidate: str, step: str) -> None:
        """Append one exchange."""
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "client": client,
            "candidate": candidate,
            "step": step,
            **exchange.to_dict(),
        }
        self.extend([json.dumps(record, ensure_ascii=False, default=str) + "\n"])

    def extend(self, lines: Sequence[str]) -> None:
        """Append lines already made (those another log kept), in order."""
        with self._lock:
            if self.path is None:
                self.lines.extend(lines)
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.writelines(lines)


class LLMBuilder(PlannedBuilder):
    """A :class:`~gym_repost.construct.agent.BuildPolicy` driven by a model (see the module docstring).

    Args:
        client: the model (shared by the build's episodes; not closed here).
        settings: budgets.
        log: where exchanges are appended, if anywhere.
        deterministic: the policy that tries first (None: the model does everything).
    """

    def __init__(
        self,
        client: LLMClient,
        settings: LLMBuilderBudgets | None = None,
        *,
        log: ExchangeLog | None = None,
        deterministic: DeterministicBuilder | None = None,
    ) -> None:
        super().__init__()
        self.client = client
        self.settings = settings or LLMBuilderBudgets()
        self.log = log
        self.deterministic = deterministic

    def reset(self, context: BuildContext, observation: str) -> None:
        """Begin an episode."""
        self.ledger = Ledger(keep_exchanges=True)
        self.counts: Counter[str] = Counter()
        self.takeover: str | None = None
        self.script: str | None = None
        """The last script that passed its run."""
        self.coverage: dict[str, Any] = {}
        """Branch coverage, missed lines and branches of :attr:`script`."""
        self._tried: str | None = None
        self._written: str | None = None
        self._first_observation = observation
        super().reset(context, observation)

    def stats(self) -> dict[str, Any]:
        """Tokens, cost, calls per step, and why the model took the candidate."""
        first = self.deterministic.stats() if self.deterministic is not None else {}
        return {
            "builder": "llm",
            "model": self.client.config.model,
            "takeover": self.takeover,
            **self.ledger.to_dict(),
            **{f"asked {k}": v for k, v in self.counts.items()},
            **first,
        }

    # ------------------------------------------------------------------ the plan

    @property
    def _ok(self) -> bool:
        return bool(self._last[1].get("ok", True))

    def _actions(self) -> Iterator[dict[str, Any]]:
        self.takeover = outside_world(self.context.candidate)
        if self.takeover is not None:
            self.takeover = f"the target touches the outside world: {self.takeover}; mock it"
        elif self.deterministic is not None:
            dropped = yield from self._deterministic()
            self.takeover = (
                f"the deterministic builder failed at {dropped.get('stage', '?')}: "
                f"{dropped.get('reason', '?')} {dropped.get('detail', '')}".strip()
            )
        script = yield from self._develop("aggregate", self._aggregate_prompt(), "module", None)
        if script is None:
            yield self._abandon("sandboxing", "script does not run")
            return
        if f"def test_{self.context.candidate.name}(" not in script:
            script = yield from self._develop("tests", self._tests_prompt(script), "tests", script)
            if script is None:
                yield self._abandon("execution", "ground truth fails")
                return
        script = yield from self._improve_coverage(script)
        judgement = self._judge(script)
        if judgement is None:
            yield self._abandon("quality", "judge answer unusable")
            return
        yield tool_call("submit", **judgement)
        if not self._data.get("kept"):
            yield tool_call(
                "abandon",
                reason=self._data.get("reason") or "rejected",
                stage="quality",
                detail=self._data.get("detail", ""),
            )

    def _deterministic(self) -> Generator[Action, None, dict[str, Any]]:
        """Pass the deterministic builder's actions through until it abandons (returns the abandon's args)."""
        assert self.deterministic is not None
        self.deterministic.reset(self.context, self._first_observation)
        while True:
            action = self.deterministic.act(*self._last)
            if action["tool"] == "abandon":
                return action["args"]
            yield action

    def _abandon(self, stage: str, reason: str) -> dict[str, Any]:
        return tool_call("abandon", reason=f"{reason} (LLM)", stage=stage, detail=self._last[0][-300:])

    def _develop(self, step: str, prompt: str, phase: str, base: str | None) -> Generator[Action, None, str | None]:
        """Ask, write, run; on failure send the error back, up to ``debug_iterations`` times.

        Returns the passing script, or None.
        """
        reply = self._ask(step, [Message.user(prompt)])
        for attempt in range(self.settings.debug_iterations + 1):
            error = yield from self._try(reply, base)
            if error is None:
                return self.script
            if attempt == self.settings.debug_iterations:
                break
            left = self.settings.debug_iterations - attempt - 1
            reply = self._ask(
                "debug",
                [
                    Message.user(
                        self._render(
                            "debug.j2", script=self._tried or base or "", error=error[-3000:], phase=phase, left=left
                        )
                    )
                ],
            )
        return None

    def _try(self, reply: str, base: str | None) -> Generator[Action, None, str | None]:
        """Install what the reply asks for, write its script and run it; the error, or None."""
        code, packages = parse_reply(reply)
        self._tried = base
        if code is None:
            return "Your answer has no ```python code block."
        if packages:
            yield tool_call("install", packages=" ".join(packages))
        script = (
            code
            if base is None or f"def {self.context.candidate.name}(" in code
            else base.rstrip("\n") + "\n\n\n" + code
        )
        self._tried = script
        yield tool_call("write_script", script=script)
        if not self._ok:
            return self._last[0]
        self._written = script
        yield tool_call("run_script")
        if not self._data.get("passed"):
            return self._last[0]
        self.script = script
        if "branch_coverage" in self._data:
            self.coverage = {k: self._data[k] for k in ("branch_coverage", "missing_lines", "missing_branches")}
        return None

    def _improve_coverage(self, script: str) -> Generator[Action, None, str]:
        """Add tests for missed lines and branches while under the threshold; the best script."""
        threshold = self.context.thresholds.min_branch_coverage
        best, coverage = script, dict(self.coverage)
        for _ in range(self.settings.coverage_rounds):
            if coverage.get("branch_coverage") is None or coverage["branch_coverage"] >= threshold:
                break
            improved = yield from self._develop(
                "coverage", self._coverage_prompt(best, coverage, threshold), "tests", best
            )
            if improved is not None and self.coverage.get("branch_coverage", 0.0) >= coverage["branch_coverage"]:
                best, coverage = improved, dict(self.coverage)
        self.script, self.coverage = best, coverage
        if self._written != best:  # a later attempt failed or covered less: back to the best script
            yield tool_call("write_script", script=best)
            self._written = best
        return best

    def _judge(self, script: str) -> dict[str, str] | None:
        """The model's verdicts as ``submit`` arguments, or None when it gave none."""
        c = self.context.candidate
        context = self.context.slice.context if self.context.slice else ""
        functionality, why_f = self._verdict(
            "judge functionality",
            self._render(
                "judge_functionality.j2",
                target=dedent_code(c.source),
                context=self._clip(context),
                script=self._clip(script),
            ),
            ("same", "yes", "no"),
        )
        tests, why_t = self._verdict(
            "judge tests", self._render("judge_tests.j2", script=self._clip(script)), ("correct", "incorrect")
        )
        if functionality is None or tests is None:
            return None
        return {
            "functionality": functionality,
            "tests": tests,
            "notes": f"functionality {functionality}: {why_f[:400]} | tests {tests}: {why_t[:400]}",
        }

    def _verdict(self, step: str, prompt: str, choices: tuple[str, ...]) -> tuple[str | None, str]:
        """Ask for a verdict; remind the model once if its answer has no verdict line."""
        messages = [Message.user(prompt)]
        answer = self._ask(step, messages)
        verdict = parse_verdict(answer, choices)
        if verdict is None:
            messages += [
                Message("assistant", answer),
                Message.user(self._render("verdict_reminder.j2", choices=choices)),
            ]
            verdict = parse_verdict(self._ask(step, messages), choices)
        explanation = " ".join(_VERDICT.sub("", answer).split())
        return verdict, explanation

    # ------------------------------------------------------------------ prompts and the model

    def _ask(self, step: str, messages: list[Message]) -> str:
        """One exchange with the model, logged and accounted."""
        conversation = [Message.system(self._render("build_system.j2")), *messages]
        seen = len(self.ledger.exchanges)
        self.counts[step] += 1
        try:
            return self.client.complete(conversation, ledger=self.ledger).text
        finally:
            if self.log is not None:
                for exchange in self.ledger.exchanges[seen:]:
                    self.log.write(
                        exchange, client=self.client.describe(), candidate=self.context.candidate.key, step=step
                    )

    def _render(self, name: str, **values: Any) -> str:
        c = self.context.candidate
        return render_prompt(
            _PROMPTS, name, **{"qualname": c.qualname, "func": c.name, "class_name": c.class_name, **values}
        )

    def _clip(self, text: str) -> str:
        limit = self.settings.max_context_chars
        return text if len(text) <= limit else text[:limit] + f"\n# ... ({len(text) - limit} more characters cut)"

    def _aggregate_prompt(self) -> str:
        ctx = self.context
        c = ctx.candidate
        return self._render(
            "aggregate.j2",
            file=c.file,
            repo=ctx.repo.name,
            takeover=self.takeover,
            target=dedent_code(c.source),
            draft=self._clip(ctx.sandboxed.module) if ctx.sandboxed else None,
            context=self._clip(ctx.slice.context) if ctx.slice else "",
            file_text=self._clip(ctx.repo.files.get(c.file, "")),
        )

    def _tests_prompt(self, script: str) -> str:
        return self._render(
            "write_tests.j2", script=self._clip(script), min_assertions=self.context.thresholds.min_assertions
        )

    def _coverage_prompt(self, script: str, coverage: dict[str, Any], threshold: float) -> str:
        return self._render(
            "improve_coverage.j2",
            script=self._clip(script),
            numbered=numbered(dedent_code(self.context.candidate.source)),
            coverage=f"{100 * coverage['branch_coverage']:.0f}%",
            threshold=f"{100 * threshold:.0f}%",
            missing_lines=coverage.get("missing_lines"),
            missing_branches=coverage.get("missing_branches"),
        )


class LLMBuildSession:
    """The LLM builder of one build: a client, the builder settings and the exchange log.

    >>> with LLMBuildSession(llm_config("openai/gpt-4o-mini"), log_path=Path("tasks.jsonl.llm.jsonl")) as llm:
    ...     result = build_function_tasks(source, llm.settings_for(settings), sandbox, llm.policy)
    ...     result.llm_usage = llm.usage()

    Args:
        config: the model's configuration.
        settings: the LLM builder's budgets.
        log_path: the JSONL file every exchange is appended to (None: not logged).
        deterministic: the deterministic builder's budgets, for the first try
            (used when ``settings.deterministic_first``).
        log: the exchange log itself, in place of ``log_path`` (``ExchangeLog()`` keeps
            the lines in memory).
    """

    def __init__(
        self,
        config: LLMConfigBase,
        settings: LLMBuilderBudgets | None = None,
        *,
        log_path: Path | None = None,
        deterministic: DeterministicBuilderSettings | None = None,
        log: ExchangeLog | None = None,
    ) -> None:
        self.config = config
        self.settings = settings or LLMBuilderBudgets()
        self.log = log if log is not None else ExchangeLog(log_path) if log_path is not None else None
        self.deterministic = deterministic or DeterministicBuilderSettings()
        self.client: LLMClient | None = None

    def __enter__(self) -> LLMBuildSession:
        self.client = self.config.build()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()

    def policy(self) -> LLMBuilder:
        """A builder policy for one episode (the factory :func:`build_function_tasks` takes)."""
        assert self.client is not None, "use LLMBuildSession as a context manager"
        first = DeterministicBuilder(self.deterministic) if self.settings.deterministic_first else None
        return LLMBuilder(self.client, self.settings, log=self.log, deterministic=first)

    @staticmethod
    def settings_for(settings: BuildSettings) -> BuildSettings:
        """The pipeline settings of an LLM build: mockable targets extracted, static drops
        rescued, and room for the model's steps."""
        return replace(
            settings,
            exclude_keywords=LLM_EXCLUDE_KEYWORDS,
            rescue_static_drops=True,
            max_steps=max(settings.max_steps, 160),
        )

    def usage(self) -> dict[str, Any]:
        """The build's totals: calls, cache hits, failures, retries, tokens, cost."""
        assert self.client is not None
        return {"model": self.client.describe(), **self.client.ledger.to_dict()}


@dataclass(frozen=True)
class LLMBuildWork(RepositoryUnit):
    """One repository's build by the LLM builder as a unit of work: the LLM twin of
    :class:`~gym_repost.construct.pipeline.BuildWork` (``--builder llm --executor ray``).

    The model's configuration travels and the client is created where the unit runs, as
    an LLM policy's is in an evaluation. What the client did comes back with the result:
    the build's totals (``llm_usage``: calls, cache hits, failures, retries, tokens,
    cost) and, without ``log_path``, every exchange's log line (``llm_log``) for the
    driver to append to its log (:meth:`ExchangeLog.extend`), so totals and log are those
    of a build in this process. A relative cache folder or log file of the configuration
    is made absolute here, in the driver, so the client finds the driver's (on a cluster,
    at the same path on every node).
    """

    config: LLMConfigBase
    settings: BuildSettings
    budgets: LLMBuilderBudgets = field(default_factory=LLMBuilderBudgets)
    deterministic: DeterministicBuilderSettings = field(default_factory=DeterministicBuilderSettings)
    log_path: Path | None = None
    """Where each exchange is appended as it happens (a build in this process); None:
    the lines are kept and come back in the result's ``llm_log``."""

    def __post_init__(self) -> None:
        paths = {k: Path(v).resolve() for k in ("cache_dir", "log_file") if (v := getattr(self.config, k)) is not None}
        object.__setattr__(self, "config", self.config.model_copy(update=paths))

    def build(
        self, source: str, sandbox: Sandbox, on_candidate: OnCandidate | None = None, on_stage: OnStage | None = None
    ) -> BuildResult:
        """The build in this process, with progress callbacks."""
        log = ExchangeLog(self.log_path)
        with LLMBuildSession(self.config, self.budgets, log=log, deterministic=self.deterministic) as llm:
            work = BuildWork(LLMBuildSession.settings_for(self.settings), llm.policy)
            result = work.build(source, sandbox, on_candidate, on_stage)
            result.llm_usage = llm.usage()
        result.llm_log = log.lines
        return result


def split_builder_args(options: dict[str, Any]) -> tuple[LLMBuilderBudgets, dict[str, Any]]:
    """``--builder-arg`` options: the builder's budgets, and the rest (LLM settings)."""
    names = {f.name for f in fields(LLMBuilderBudgets)}
    mine = {k: v for k, v in options.items() if k in names}
    return LLMBuilderBudgets(**mine), {k: v for k, v in options.items() if k not in names}


__all__ = [
    "LLM_EXCLUDE_KEYWORDS",
    "MOCKABLE_CATEGORIES",
    "ExchangeLog",
    "LLMBuildSession",
    "LLMBuildWork",
    "LLMBuilder",
    "LLMBuilderBudgets",
    "outside_world",
    "parse_reply",
    "parse_verdict",
    "split_builder_args",
]
