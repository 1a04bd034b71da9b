"""What reports of a run show, as data: the figures' rows, one row per task (in natural
order), a failure in a line. The terminal tables and the HTML viewer
(:mod:`gym_repost.evaluate.viewer`) both read them."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gym_repost.evaluate.run_dir import Episode

STATUS_LABELS = {"passed": "passed", "failed": "failed", "infra_error": "infra error", "policy_error": "policy error"}


def status_label(status: str) -> str:
    """How reports name an episode's status."""
    return STATUS_LABELS.get(status, status.replace("_", " "))


def policy_error(episode: Episode) -> dict[str, str] | None:
    """An episode's ``policy_error`` (``type``, ``message``, ``traceback``: the policy's own
    exception), if its record has one."""
    value: Any = getattr(episode, "policy_error", None)
    if value is not None and hasattr(value, "model_dump"):
        value = value.model_dump()
    if not isinstance(value, dict):
        return None
    return {key: str(value.get(key) or "") for key in ("type", "message", "traceback")}


def error_text(episode: Episode) -> str:
    """An episode's policy or infrastructure error in a line ('' without one)."""
    error = policy_error(episode)
    if error is not None:
        return f"policy error: {error['type']}: {error['message']}".rstrip(": ")
    return episode.infra_error or ""


def percent(value: float | None) -> str:
    """A rate as the reports print it: ``42.5%``, or ``n/a``."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders numbers by value and letters regardless of case:
    ``HumanEval/2`` before ``HumanEval/10``, ``orders.iter`` before ``orders.Order``."""
    parts = re.split(r"(\d+)", text)
    return (*((0, int(p)) if p.isdigit() else (1, p.casefold()) for p in parts if p), (2, text))


def failure_text(report: dict[str, Any] | None, limit: int = 160) -> str:
    """A failed test report in one line: the exception, the failing assertion with both
    sides' values when there is one, else the message; for a test file whose tests all
    passed, its reward below the bar."""
    if not report or report.get("passed"):
        return ""
    reward = report.get("reward")
    if isinstance(reward, (int, float)) and report.get("status") == "passed":  # a test file's tests all passed
        return f"below the bar: reward {reward:.3f}"
    head = str(report.get("exception") or report.get("status") or "failed")
    assertion = report.get("assertion") if isinstance(report.get("assertion"), dict) else None
    if assertion and assertion.get("source"):
        text = f"{head}: {assertion['source']}"
        if assertion.get("left") is not None:
            text += f" (left {assertion['left']}, right {assertion.get('right')})"
    else:
        text = f"{head}: {report.get('message') or ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


@dataclass(frozen=True)
class TaskRow:
    """Results of one task over its samples."""

    name: str
    samples: int
    passed: int
    infra_errors: int
    mean_submissions_to_pass: float | None
    last_failure: str
    task_id: str = ""

    @property
    def pass_rate(self) -> float | None:
        """Passing share of the scored samples (None with none scored)."""
        return self.passed / self.samples if self.samples else None


def pass_at_k_rows(summary: dict[str, Any]) -> list[tuple[str, float | None]]:
    """``[("pass@1", 0.42), ...]`` in order of k."""
    keys = sorted((k for k in summary if k.startswith("pass@")), key=lambda k: int(k[5:]))
    return [(k, summary[k]) for k in keys]


def self_repair_rows(summary: dict[str, Any]) -> list[tuple[int, float]]:
    """``[(repairs, pass rate), ...]``."""
    return sorted((int(r), v) for r, v in summary.get("self_repair", {}).items())


SCORED = "scored"
INFRA_FAIL = "infra = fail"
"""Labels of the two figures: over scored episodes only, and with infrastructure errors
counted as failures (``summary["with_infra_errors"]``)."""


def figure_rows(summary: dict[str, Any]) -> dict[str, dict[str, list[tuple[str, float | None]]]]:
    """pass@k and self-repair, each as ``{SCORED: rows, INFRA_FAIL: rows}``, and
    ``by_test_runs``: self-repair counting every failing test run (``{SCORED: rows}``, or
    ``{}`` for runs that did not record test runs).

    Rows are ``(label, value)``: ``("pass@2", 0.5)``, ``("r=1", 0.25)``. A summary written
    before infrastructure errors were scored has no ``INFRA_FAIL`` rows.
    """
    out: dict[str, dict[str, list[tuple[str, float | None]]]] = {"pass@k": {}, "self_repair": {}, "by_test_runs": {}}
    figures = {SCORED: summary, INFRA_FAIL: summary.get("with_infra_errors")}
    for label, figure in figures.items():
        if figure is None:
            continue
        out["pass@k"][label] = pass_at_k_rows(figure)
        out["self_repair"][label] = [(f"r={r}", v) for r, v in self_repair_rows(figure)]
    if summary.get("self_repair_by_test_runs"):
        by_runs = sorted((int(r), v) for r, v in summary["self_repair_by_test_runs"].items())
        out["by_test_runs"][SCORED] = [(f"r={r}", v) for r, v in by_runs]
    return out


def task_rows(episodes: Sequence[Episode]) -> list[TaskRow]:
    """One row per task, in natural order of the names (``HumanEval/2`` before ``/10``)."""
    by_task: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        by_task[ep.task_name].append(ep)
    rows = []
    for name in sorted(by_task, key=natural_key):
        eps = by_task[name]
        scored = [e for e in eps if e.status != "infra_error"]
        solved = [e.solved_at + 1 for e in scored if e.solved_at is not None]
        failing = [e for e in scored if e.status == "failed" and e.final_report]
        rows.append(
            TaskRow(
                name=name,
                samples=len(scored),
                passed=len(solved),
                infra_errors=len(eps) - len(scored),
                mean_submissions_to_pass=sum(solved) / len(solved) if solved else None,
                last_failure=failure_text(failing[-1].final_report) if failing else "",
                task_id=eps[0].task_id,
            )
        )
    return rows
