"""One episode as its page shows it: the task prompt (step 0), then each step's messages
(a model's replies with their tool calls, tokens and seconds), action, tool result, test
report, reward, tokens and seconds, and the code as a diff against its previous version.
Reads every version of ``trajectories.jsonl`` (:mod:`gym_repost.evaluate.transcript`)."""

from __future__ import annotations

import difflib
import html
import json
from dataclasses import dataclass, field
from typing import Any

from gym_repost.evaluate.report import policy_error
from gym_repost.evaluate.run_dir import Episode, Trajectory
from gym_repost.evaluate.transcript import bounded_text

CODE_TOOLS = ("write_code", "write_tests")
"""Tools whose ``code`` argument is a new version of the episode's code."""


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff: ``kind`` is ``add``, ``del``, ``ctx`` or ``hunk``."""

    kind: str
    text: str


@dataclass(frozen=True)
class ToolCallView:
    """A tool call a model wrote: its name and arguments (pretty JSON when they parse)."""

    name: str
    arguments: str
    summary: str = ""
    """The arguments in one short line."""


@dataclass
class MessageView:
    """One message of a policy's conversation."""

    role: str
    content: str
    tool_calls: list[ToolCallView] = field(default_factory=list)
    facts: str = ""
    """A model reply's tokens, seconds and cache hit, as a line."""
    observation_of_step: int | None = None
    """The content is the observation of this step (0: the task prompt), shown there."""
    is_error: bool = False


@dataclass
class PromptView:
    """Step 0: the task prompt (the reset's observation) and what the policy's reset said."""

    observation: str
    messages: list[MessageView] = field(default_factory=list)
    seconds: str = ""


@dataclass
class StepView:
    """One step of a trajectory, ready to show."""

    number: int
    tool: str
    ok: bool
    reward: float
    observation: str
    messages: list[MessageView] = field(default_factory=list)
    seconds: str = ""
    """The policy's and the environment's wall-clock seconds, as a line ('' if not recorded)."""
    args_text: str = ""
    """The arguments as JSON, when the action is not a code version."""
    code: str | None = None
    diff: list[DiffLine] = field(default_factory=list)
    version: int = 0
    """Which version of the code this step wrote (1, 2, ...), 0 when it wrote none."""
    report: dict[str, Any] | None = None
    tokens: dict[str, int] | None = None

    @property
    def tokens_text(self) -> str:
        """``120 in / 30 out tokens``; '' for a step that made no model call."""
        spent = self.tokens or {}
        if not any(isinstance(spent.get(k), int) and spent[k] > 0 for k in ("input", "output")):
            return ""
        return f"{spent.get('input', 0):,} in / {spent.get('output', 0):,} out tokens"

    @property
    def report_title(self) -> str:
        """The test report in a few words: the verdict, the reward of a test file, the exception."""
        report = self.report or {}
        reward = _number(report.get("reward"))
        status = str(report.get("status") or "failed")
        if report.get("passed"):
            title = "tests passed" if reward is None else f"accepted, reward {reward:.3f}"
        elif reward is not None:
            title = (
                f"tests passed, reward {reward:.3f} below the bar"
                if status == "passed"
                else f"tests {status}, reward {reward:.3f}"
            )
        else:
            title = f"tests {status}"
        return title + (f" · {report['exception']}" if report.get("exception") else "")

    @property
    def metrics(self) -> list[tuple[str, str]]:
        """A test file's main metrics as ``(name, value)`` rows (none for function tasks)."""
        metrics = (self.report or {}).get("metrics")
        if not isinstance(metrics, dict):
            return []
        rows = []
        for key, value in metrics.items():
            number = _number(value)
            if number is None:
                continue
            text = f"{number:.0f}" if key in ("tests", "passed") else f"{100 * number:.1f}%"
            rows.append((key.replace("_", " "), text))
        return rows

    @property
    def diff_html(self) -> str:
        """The diff as escaped HTML, a ``span`` per line (built here, not in the template:
        thousands of pages of diffs are most of a large report's writing time)."""
        return "".join(f'<span class="{d.kind}">{html.escape(d.text, quote=False)}</span>' for d in self.diff)


def code_diff(before: str, after: str) -> list[DiffLine]:
    """``after`` as a unified diff against ``before`` (every line added when ``before`` is empty)."""
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm="", n=3)
    out = []
    for line in lines:
        if line.startswith(("---", "+++")):
            continue
        kind = "hunk" if line.startswith("@@") else "add" if line[:1] == "+" else "del" if line[:1] == "-" else "ctx"
        out.append(DiffLine(kind, line))
    return out


def _tool_and_args(action: Any) -> tuple[str, Any]:
    """The tool and arguments of a recorded action (a dict, a JSON string, or anything)."""
    if isinstance(action, str):
        try:
            action = json.loads(action)
        except json.JSONDecodeError:
            return "", action
    if isinstance(action, dict):
        return str(action.get("tool") or ""), action.get("args", {k: v for k, v in action.items() if k != "tool"})
    return "", action


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def seconds_text(seconds: Any) -> str:
    """``policy 2.10 s · environment 0.35 s`` from a step's ``seconds`` ('' when absent)."""
    if not isinstance(seconds, dict):
        return ""
    names = (("policy", "policy"), ("env", "environment"))
    parts = [f"{label} {value:.2f} s" for key, label in names if (value := _number(seconds.get(key))) is not None]
    return " · ".join(parts)


def _pretty_arguments(text: str) -> str:
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, indent=1)
    except (json.JSONDecodeError, TypeError):
        return text


def _tool_call_view(call: dict[str, Any]) -> ToolCallView:
    arguments = str(call.get("arguments") or "")
    line = " ".join(arguments.split())
    return ToolCallView(
        str(call.get("name") or "?"), _pretty_arguments(arguments), line if len(line) <= 100 else line[:99] + "…"
    )


def message_views(messages: Any) -> list[MessageView]:
    """The recorded messages of a step (anything else in the record is left out)."""
    views = []
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        facts = []
        if _number(m.get("tokens_in")) is not None or _number(m.get("tokens_out")) is not None:
            facts.append(f"{int(m.get('tokens_in') or 0):,} in / {int(m.get('tokens_out') or 0):,} out tokens")
        if (seconds := _number(m.get("seconds"))) is not None:
            facts.append(f"{seconds:.2f} s")
        if m.get("cached") is True:
            facts.append("from the response cache")
        calls: list[Any] = m["tool_calls"] if isinstance(m.get("tool_calls"), list) else []
        pointer = m.get("observation_of_step")
        views.append(
            MessageView(
                role=str(m.get("role") or "?"),
                content=str(m.get("content") or ""),
                tool_calls=[_tool_call_view(c) for c in calls if isinstance(c, dict)],
                facts=" · ".join(facts),
                observation_of_step=pointer if isinstance(pointer, int) else None,
                is_error=m.get("is_error") is True,
            )
        )
    return views


def prompt_view(reset: dict[str, Any] | None) -> PromptView | None:
    """Step 0 of a trajectory record (None for runs recorded before it was kept)."""
    if not isinstance(reset, dict):
        return None
    return PromptView(
        observation=str(reset.get("observation", "")),
        messages=message_views(reset.get("messages")),
        seconds=seconds_text(reset.get("seconds")),
    )


def step_views(steps: list[dict[str, Any]]) -> list[StepView]:
    """The steps of ``trajectories.jsonl`` (old records lack ``test_report``, ``tokens``,
    ``messages`` and ``seconds``)."""
    views = []
    previous = ""
    version = 0
    for number, step in enumerate(steps, 1):
        named, args = _tool_and_args(step.get("action"))
        view = StepView(
            number=number,
            tool=str(step.get("tool") or named or "?"),
            ok=bool(step.get("ok")),
            reward=float(step.get("reward") or 0.0),
            observation=str(step.get("observation", "")),
            messages=message_views(step.get("messages")),
            seconds=seconds_text(step.get("seconds")),
            report=step.get("test_report") if isinstance(step.get("test_report"), dict) else None,
            tokens=step.get("tokens") if isinstance(step.get("tokens"), dict) else None,
        )
        code = args.get("code") if isinstance(args, dict) and named in CODE_TOOLS else None
        if isinstance(code, str):
            view.code = code
            if view.ok:  # a rejected version (it did not parse, say) is shown whole, not diffed
                version += 1
                view.version, view.diff = version, code_diff(previous, code)
                previous = code
        elif args not in ({}, None):
            view.args_text = bounded_text(json.dumps(args, ensure_ascii=False, indent=1), 4000)
        views.append(view)
    return views


def interrupted_view(interrupted: dict[str, Any] | None, number: int) -> StepView | None:
    """The step under way when the episode stopped (None when it did not stop in one)."""
    if not isinstance(interrupted, dict):
        return None
    named, args = _tool_and_args(interrupted.get("action"))
    view = StepView(
        number=number,
        tool=named or ("(no action)" if "action" not in interrupted else "?"),
        ok=False,
        reward=0.0,
        observation="",
        messages=message_views(interrupted.get("messages")),
        seconds=seconds_text(interrupted.get("seconds")),
    )
    if "action" in interrupted and args not in ({}, None):
        view.args_text = bounded_text(json.dumps(args, ensure_ascii=False, indent=1), 4000)
    return view


@dataclass
class TranscriptView:
    """A whole episode as its page shows it."""

    prompt: PromptView | None
    steps: list[StepView]
    interrupted: StepView | None = None
    stop_reason: str = ""
    """Why the episode stopped during :attr:`interrupted` (an error's text)."""


def transcript_view(trajectory: Trajectory | None, stop_reason: str = "") -> TranscriptView:
    """The view of a recorded trajectory (an empty one when none was recorded)."""
    if trajectory is None:
        return TranscriptView(None, [])
    steps = step_views(list(trajectory))
    return TranscriptView(
        prompt_view(trajectory.reset),
        steps,
        interrupted_view(trajectory.interrupted, len(steps) + 1),
        stop_reason,
    )


def stop_reason(episode: Episode) -> str:
    """Why an episode stopped during a step, for its transcript's last line."""
    error = policy_error(episode)
    if error is not None:
        return f"The policy raised {error['type']}: {error['message']} (its traceback is above)."
    if episode.infra_error:
        return f"Infrastructure error: {episode.infra_error}"
    return "The run stopped here."
