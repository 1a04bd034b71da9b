"""Reports of a run: table rows for the terminal and a self-contained HTML page."""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_repost.evaluate.records import Episode, RunConfig

REPORT = "report.html"


@dataclass(frozen=True)
class TaskRow:
    """Results of one task over its samples."""

    name: str
    samples: int
    passed: int
    infra_errors: int
    mean_submissions_to_pass: float | None
    last_failure: str


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
    """One row per task, sorted by name."""
    by_task: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        by_task[ep.task_name].append(ep)
    rows = []
    for name, eps in sorted(by_task.items()):
        scored = [e for e in eps if e.status != "infra_error"]
        solved = [e.solved_at + 1 for e in scored if e.solved_at is not None]
        failing = [e for e in scored if e.status == "failed" and e.final_report]
        last = failing[-1].final_report if failing else None
        rows.append(
            TaskRow(
                name=name,
                samples=len(scored),
                passed=len(solved),
                infra_errors=len(eps) - len(scored),
                mean_submissions_to_pass=sum(solved) / len(solved) if solved else None,
                last_failure=(
                    f"{last.get('exception') or last.get('status')}: {last.get('message') or ''}" if last else ""
                )[:120],
            )
        )
    return rows


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def bar_chart_svg(title: str, labels: Sequence[str], values: Sequence[float | None]) -> str:
    """A small inline SVG bar chart of rates in [0, 1]."""
    width, height, pad, bar_gap = 60 * max(1, len(values)) + 60, 220, 40, 12
    bar_w = (width - 2 * pad) / max(1, len(values)) - bar_gap
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{html.escape(title)}">',
        f'<text x="{pad}" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad / 2}" y2="{height - pad}" stroke="#888"/>',
    ]
    plot_h = height - 2 * pad - 10
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        v = value or 0.0
        x = pad + i * (bar_w + bar_gap) + bar_gap / 2
        h = plot_h * v
        y = height - pad - h
        parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="#4a7bd0"/>')
        parts.append(
            f'<text x="{x + bar_w / 2:.1f}" y="{y - 4:.1f}" font-size="11" text-anchor="middle">{_fmt(value)}</text>'
        )
        parts.append(
            f'<text x="{x + bar_w / 2:.1f}" y="{height - pad + 16}" font-size="11" '
            f'text-anchor="middle">{html.escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _side_by_side(what: str, figures: dict[str, list[tuple[str, float | None]]]) -> str:
    """A table with one column per figure (scored, infra = fail) and a chart of each."""
    labels = list(figures)
    keys = [k for k, _ in figures[SCORED]]
    rows = [[key, *(_fmt(dict(figures[label]).get(key)) for label in labels)] for key in keys]
    charts = [bar_chart_svg(f"{what} ({label})", keys, [dict(figures[label]).get(k) for k in keys]) for label in labels]
    return _table([what, *labels], rows) + "".join(charts)


def _infra_banner(summary: dict[str, Any]) -> str:
    warning = summary.get("infra_warning")
    if not warning:
        return ""
    return (
        "<div class='warning' role='alert' style='background:#fde2e1;border:2px solid #c0392b;"
        "color:#7b1d14;padding:0.8em 1em;font-weight:bold;margin:1em 0'>WARNING: "
        f"{html.escape(warning)}</div>"
    )


def render_html(summary: dict[str, Any], episodes: Sequence[Episode], config: RunConfig | None) -> str:
    """The whole report page (no external resources)."""
    figures = figure_rows(summary)
    tasks = task_rows(episodes)
    title = f"gym-repost run: {config.policy if config else ''}"
    settings = (
        ""
        if config is None
        else _table(
            ["tasks file", "policy", "samples (n)", "repairs", "max steps", "seed"],
            [[config.tasks, config.policy, config.n, config.repairs, config.max_steps, config.seed]],
        )
    )
    return "\n".join(
        [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:2em}}"
            "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
            "font-size:13px;text-align:left}th{background:#eee}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            _infra_banner(summary),
            settings,
            f"<p>{summary.get('episodes', 0)} episodes over {summary.get('tasks', 0)} tasks; "
            + (f"mean reward {summary['mean_reward']:.3f}; " if summary.get("mean_reward") is not None else "")
            + f"{summary.get('infra_errors', 0)} infrastructure errors "
            + f"({_fmt(summary.get('infra_error_share'))} of the episodes). "
            + f"<b>{SCORED}</b>: over scored episodes only; <b>{html.escape(INFRA_FAIL)}</b>: "
            + "infrastructure errors counted as failures.</p>",
            "<h2>pass@k</h2>",
            _side_by_side("pass@k", figures["pass@k"]),
            "<h2>Self-repair</h2><p>pass rate after r repair iterations</p>",
            _side_by_side("repairs", figures["self_repair"]),
            "<h2>Tasks</h2>",
            _table(
                ["task", "samples", "passed", "infra errors", "mean submissions to pass", "a failure"],
                [
                    [
                        t.name,
                        t.samples,
                        t.passed,
                        t.infra_errors,
                        "" if t.mean_submissions_to_pass is None else f"{t.mean_submissions_to_pass:.2f}",
                        t.last_failure,
                    ]
                    for t in tasks
                ],
            ),
            "</body></html>",
        ]
    )


def write_html(run_dir: Path, summary: dict[str, Any], episodes: Sequence[Episode], config: RunConfig | None) -> Path:
    """Write ``RUN_DIR/report.html``."""
    out = Path(run_dir) / REPORT
    out.write_text(render_html(summary, episodes, config), encoding="utf-8")
    return out
