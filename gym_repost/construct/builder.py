"""The deterministic construction policy: no LLM.

Per candidate it writes the sandboxed module (dependency slice) and runs it, installing
what is missing; generates equivalence tests from traced, strategy and searched inputs
(:mod:`gym_repost.construct.testgen`); runs the finished script with the ground truth;
submits; and, when the quality checks reject the tests for coverage, searches again
with twice the budget (runs of the target, never seconds) before giving up.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gym_repost.construct.agent import BuildContext
from gym_repost.construct.stages import Drop, GeneratedTests
from gym_repost.tools import tool_call


@dataclass(frozen=True)
class DeterministicBuilderSettings:
    """Budgets of the deterministic builder."""

    test_executions: int = 2000
    """Budget of the first attempt's input search, in runs of the target (inside the
    sandbox; see :func:`~gym_repost.construct.testgen.generate_tests`). A count, not
    seconds: the same seed builds the same tests whatever the machine's load."""
    attempts: int = 2
    """Test-generation attempts (each with twice the budget of the previous)."""
    max_installs: int = 3
    seed: int = 0


class PlannedBuilder:
    """A :class:`~gym_repost.construct.agent.BuildPolicy` written as a generator of actions.

    :meth:`_actions` yields one tool call at a time; ``act`` hands it to the episode and
    keeps the observation and info of the previous result in ``_last`` (``_data``: its
    structured data). A plan that ends without a verdict abandons the candidate.
    """

    def __init__(self) -> None:
        self._plan: Iterator[dict[str, Any]] | None = None
        self._last: tuple[str, dict[str, Any]] = ("", {})

    def reset(self, context: BuildContext, observation: str) -> None:
        """Begin an episode."""
        self.context = context
        self._plan = self._actions()

    def act(self, observation: str, info: dict[str, Any]) -> dict[str, Any]:
        """The next step of the plan."""
        assert self._plan is not None, "reset() first"
        self._last = (observation, info)
        try:
            return next(self._plan)
        except StopIteration:
            return tool_call("abandon", reason="builder finished without a verdict", stage="quality")

    @property
    def _data(self) -> dict[str, Any]:
        return self._last[1].get("data", {})

    def _actions(self) -> Iterator[dict[str, Any]]:
        raise NotImplementedError


class DeterministicBuilder(PlannedBuilder):
    """A :class:`~gym_repost.construct.agent.BuildPolicy` that needs no model.

    Written as a generator of actions: each ``yield`` hands a tool call to the episode
    and receives the observation and info of its result.
    """

    def __init__(self, settings: DeterministicBuilderSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or DeterministicBuilderSettings()
        self.safety_limits: list[str] = []

    def reset(self, context: BuildContext, observation: str) -> None:
        """Begin an episode."""
        self.safety_limits = []
        super().reset(context, observation)

    def stats(self) -> dict[str, Any]:
        """The wall-clock safety limits that fired in this episode's searches, if any."""
        return {"safety_limits": list(self.safety_limits)} if self.safety_limits else {}

    def _actions(self) -> Iterator[dict[str, Any]]:
        sandboxed = self.context.sandboxed
        if sandboxed is None:
            yield tool_call("abandon", reason="no sandboxed script", stage="sandboxing")
            return
        yield tool_call("write_script", script=sandboxed.module)
        if not self._last[1].get("ok"):  # what the tool said, not "no script yet" later
            yield tool_call("abandon", reason="script not accepted", stage="sandboxing", detail=self._last[0][-300:])
            return
        yield from self._run_installing("sandboxing", "script does not run as a module")
        for attempt in range(self.settings.attempts):
            generated = self._generate(attempt)
            if isinstance(generated, Drop):
                yield tool_call("abandon", reason=generated.reason, stage=generated.stage, detail=generated.detail)
                return
            yield tool_call("write_script", script=sandboxed.module.rstrip("\n") + "\n\n\n" + generated.code)
            if not self._last[1].get("ok"):
                yield tool_call("abandon", reason="script not accepted", stage="tests", detail=self._last[0][-300:])
                return
            yield from self._run_installing("execution", "ground truth fails")
            yield tool_call("submit")
            if self._data.get("kept"):
                return
            if self._data.get("reason") != "branch coverage below threshold":
                break
        yield tool_call(
            "abandon",
            reason=self._data.get("reason") or "rejected",
            stage="quality",
            detail=self._data.get("detail", ""),
        )

    def _run_installing(self, stage: str, reason: str) -> Iterator[dict[str, Any]]:
        """Run the script; install a missing module and rerun, a bounded number of times."""
        for _ in range(self.settings.max_installs + 1):
            yield tool_call("run_script")
            if self._data.get("passed"):
                return
            module = self._data.get("missing_module") or _missing_from_report(self._data.get("report"))
            if module is None:
                break
            yield tool_call("install", packages=module)
            if not self._last[1].get("ok"):
                break
        yield tool_call("abandon", reason=reason, stage=stage, detail=self._last[0][-300:])

    def _generate(self, attempt: int) -> GeneratedTests | Drop:
        from gym_repost.construct.testgen import generate_tests
        from gym_repost.construct.testgen.explore import SAFETY_NOTES

        ctx = self.context
        assert ctx.sandboxed is not None
        generated = generate_tests(
            ctx.sandbox,
            ctx.sandboxed,
            seeds=ctx.seeds,
            executions=self.settings.test_executions * (2**attempt),
            seed=self.settings.seed + attempt,
            min_assertions=ctx.thresholds.min_assertions,
        )
        if isinstance(generated, GeneratedTests):
            self.safety_limits += generated.safety_limits
        elif any(note in generated.detail for note in SAFETY_NOTES):
            self.safety_limits.append(generated.detail)
        return generated


def _missing_from_report(report: dict[str, Any] | None) -> str | None:
    from gym_repost.construct.execution import missing_module

    if not report or report.get("exception") not in ("ModuleNotFoundError", "ImportError"):
        return None
    return missing_module(report.get("message") or "")
