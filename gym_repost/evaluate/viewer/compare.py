"""The comparison of several runs: pass@k side by side, self-repair curves, per-task wins
and losses of each run against the first (the baseline), links from each task to every
run's episodes, and the runs' transcripts of a task side by side, step by step."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gym_repost.evaluate.charts import Series, bar_chart, line_chart
from gym_repost.evaluate.report import (
    error_text,
    natural_key,
    pass_at_k_rows,
    percent,
    self_repair_rows,
    status_label,
    task_rows,
)
from gym_repost.evaluate.run_dir import Episode
from gym_repost.evaluate.viewer.trajectory import PromptView, StepView, stop_reason, transcript_view

if TYPE_CHECKING:
    from gym_repost.evaluate.viewer import RunView

SIDE = "side"
"""The folder of the side-by-side pages: ``side/T-S.html``, task row T, sample S."""


def task_pass_rates(run: RunView) -> dict[str, tuple[str, float | None]]:
    """``{task_id: (name, pass rate over scored samples)}``."""
    return {t.task_id: (t.name, t.pass_rate) for t in task_rows(run.episodes)}


def _verdict(rate: float | None, baseline: float | None) -> str:
    if rate is None or baseline is None:
        return "missing"
    return "win" if rate > baseline else "loss" if rate < baseline else "tie"


def _episodes_by_task(view: RunView, number: int) -> dict[str, list[dict[str, Any]]]:
    """Each task's episodes in run ``number``, as links from the comparison."""
    out: dict[str, list[dict[str, Any]]] = {}
    for index, e in enumerate(view.episodes):
        link = {"sample": e.sample, "status": e.status, "label": status_label(e.status)}
        out.setdefault(e.task_id, []).append({**link, "href": f"run-{number}/episodes/{index}.html"})
    return out


def _task_rows(views: Sequence[RunView]) -> list[dict[str, Any]]:
    rates = [task_pass_rates(v) for v in views]
    links = [_episodes_by_task(v, number) for number, v in enumerate(views, 1)]
    names = {tid: name for r in rates for tid, (name, _) in r.items()}
    rows = []
    for number, tid in enumerate(sorted(names, key=lambda t: natural_key(names[t]))):
        values = [r.get(tid, ("", None))[1] for r in rates]
        episodes = [by_task.get(tid, []) for by_task in links]
        samples = sorted({e["sample"] for run in episodes for e in run})
        rows.append(
            {
                "task": names[tid],
                "task_id": tid,
                "rates": values,
                "verdicts": [_verdict(v, values[0]) for v in values[1:]],
                "differs": len(set(values)) > 1,
                "episodes": episodes,
                "samples": samples,
                "side": f"{SIDE}/{number}-{samples[0]}.html" if samples else None,
                "number": number,
            }
        )
    return rows


def comparison(views: Sequence[RunView]) -> dict[str, Any]:
    """What ``compare.html.j2`` shows of ``views``."""
    labels = [f"run {i}: {v.title}" for i, v in enumerate(views, 1)]
    pass_k = [dict(pass_at_k_rows(v.summary)) for v in views]
    ks = sorted({k for p in pass_k for k in p}, key=lambda k: int(k[5:]))
    repairs = [dict(self_repair_rows(v.summary)) for v in views]
    rs = sorted({r for p in repairs for r in p})
    tasks = _task_rows(views)
    tallies = [
        {verdict: sum(row["verdicts"][i] == verdict for row in tasks) for verdict in ("win", "loss", "tie", "missing")}
        for i in range(len(views) - 1)
    ]
    digests = {v.config.tasks_digest if v.config else None for v in views}
    return {
        "same_tasks": len(digests) == 1 and None not in digests,
        "runs": [
            {"label": label, "view": v, "href": f"run-{i}/index.html"}
            for i, (label, v) in enumerate(zip(labels, views), 1)
        ],
        "pass_chart": bar_chart(
            "pass@k",
            ks,
            [Series(label, [p.get(k) for k in ks]) for label, p in zip(labels, pass_k)],
            x_label="k samples",
        ),
        "repair_chart": line_chart(
            "Self-repair: pass rate after r repairs",
            [str(r) for r in rs],
            [Series(label, [p.get(r) for r in rs]) for label, p in zip(labels, repairs)],
            x_label="r: failed submissions before the pass",
        ),
        "ks": ks,
        "pass_k": pass_k,
        "tasks": tasks,
        "tallies": tallies,
    }


# ---------------------------------------------------------------- side by side


@dataclass
class Column:
    """One run's episode of the task and sample a side-by-side page shows."""

    label: str
    episode: Episode | None
    href: str = ""
    """The episode's own page, from the side-by-side page."""
    error: str = ""


Cell = tuple[str, PromptView | StepView] | None
"""What a column shows in one row: ``("prompt", view)``, ``("step", view)`` or nothing."""


def _cells(view: RunView, episode: Episode | None) -> dict[int, Cell]:
    """A transcript's pieces by step number (0: the task prompt)."""
    if episode is None:
        return {}
    transcript = transcript_view(view.trajectories.get(episode.key), stop_reason(episode))
    cells: dict[int, Cell] = {s.number: ("step", s) for s in transcript.steps}
    if transcript.prompt is not None:
        cells[0] = ("prompt", transcript.prompt)
    if transcript.interrupted is not None:
        cells[transcript.interrupted.number] = ("step", transcript.interrupted)
    return cells


def side_by_side(views: Sequence[RunView], tasks: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(path, context of side.html.j2)`` for each task row and sample: every run's
    transcript of that sample in a column, step beside step."""
    indexes = [{e.key: (i, e) for i, e in enumerate(v.episodes)} for v in views]
    for row in tasks:
        for sample in row["samples"]:
            columns, cells = [], []
            for number, (view, index) in enumerate(zip(views, indexes), 1):
                found = index.get((row["task_id"], sample))
                episode = found[1] if found else None
                href = f"../run-{number}/episodes/{found[0]}.html" if found else ""
                error = error_text(episode) if episode is not None else ""
                columns.append(Column(f"run {number}: {view.title}", episode, href, error))
                cells.append(_cells(view, episode))
            numbers = [n for c in cells for n in c]
            first, last = min(numbers, default=0), max(numbers, default=-1)
            yield (
                f"{SIDE}/{row['number']}-{sample}.html",
                {
                    "task": row["task"],
                    "sample": sample,
                    "samples": [(s, f"{row['number']}-{s}.html") for s in row["samples"]],
                    "columns": columns,
                    "rows": [[c.get(n) for c in cells] for n in range(first, last + 1)],
                    "rates": [percent(r) for r in row["rates"]],
                },
            )
