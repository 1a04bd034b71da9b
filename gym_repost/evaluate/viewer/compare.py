"""The comparison of several runs: pass@k side by side, self-repair curves, and per-task
wins and losses of each run against the first (the baseline)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gym_repost.evaluate.charts import Series, bar_chart, line_chart
from gym_repost.evaluate.report import natural_key, pass_at_k_rows, self_repair_rows, task_rows

if TYPE_CHECKING:
    from gym_repost.evaluate.viewer import RunView


def task_pass_rates(run: RunView) -> dict[str, tuple[str, float | None]]:
    """``{task_id: (name, pass rate over scored samples)}``."""
    return {t.task_id: (t.name, t.pass_rate) for t in task_rows(run.episodes)}


def _verdict(rate: float | None, baseline: float | None) -> str:
    if rate is None or baseline is None:
        return "missing"
    return "win" if rate > baseline else "loss" if rate < baseline else "tie"


def _task_rows(views: Sequence[RunView]) -> list[dict[str, Any]]:
    rates = [task_pass_rates(v) for v in views]
    names = {tid: name for r in rates for tid, (name, _) in r.items()}
    rows = []
    for tid in sorted(names, key=lambda t: natural_key(names[t])):
        values = [r.get(tid, ("", None))[1] for r in rates]
        verdicts = [_verdict(v, values[0]) for v in values[1:]]
        rows.append(
            {
                "task": names[tid],
                "rates": values,
                "verdicts": verdicts,
                "differs": len(set(values)) > 1,
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
