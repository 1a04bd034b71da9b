"""One episode as the trajectory page shows it: each step's action, observation, test
report, reward and tokens, and the code as a diff against its previous version."""

from __future__ import annotations

import difflib
import html
import json
from dataclasses import dataclass, field
from typing import Any

CODE_TOOLS = ("write_code", "write_tests")
"""Tools whose ``code`` argument is a new version of the episode's code."""


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff: ``kind`` is ``add``, ``del``, ``ctx`` or ``hunk``."""

    kind: str
    text: str


@dataclass
class StepView:
    """One step of a trajectory, ready to show."""

    number: int
    tool: str
    ok: bool
    reward: float
    observation: str
    args_text: str = ""
    """The arguments as JSON, when the action is not a code version."""
    code: str | None = None
    diff: list[DiffLine] = field(default_factory=list)
    version: int = 0
    """Which version of the code this step wrote (1, 2, ...), 0 when it wrote none."""
    report: dict[str, Any] | None = None
    tokens: dict[str, int] | None = None

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


def step_views(steps: list[dict[str, Any]]) -> list[StepView]:
    """The steps of ``trajectories.jsonl`` (old records lack ``test_report`` and ``tokens``)."""
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
            view.args_text = json.dumps(args, ensure_ascii=False, indent=1)[:4000]
        views.append(view)
    return views
