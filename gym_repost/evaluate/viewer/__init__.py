"""The run viewer: static HTML pages of one run or a comparison of several.

:func:`write_report` writes one folder (``index.html``, ``episodes/*.html``, ``assets/``)
that needs no server and no network: open ``index.html`` from disk, or zip the folder and
share it. One run: an overview (when, how long, versions, configuration, pass@k and
self-repair charts, the tasks in natural order, every episode, with filters) and one
trajectory page per episode. Several runs: a comparison page (pass@k side by side,
self-repair curves, per-task wins and losses against the first run) and each run's own
report in ``run-1/``, ``run-2/``, ...

The folder is written whole or not at all: pages go to a hidden folder beside it, which
replaces the folder (an earlier report) once every page is written, so a failure never
leaves a half-written report.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from gym_repost.errors import ConfigError, RunDirError
from gym_repost.evaluate.charts import Series, bar_chart, line_chart
from gym_repost.evaluate.report import INFRA_FAIL, SCORED, failure_text, figure_rows, natural_key, percent, task_rows
from gym_repost.evaluate.run_dir import CONFIG, EPISODES, Episode, RunConfig, RunDir
from gym_repost.evaluate.summary import summarize
from gym_repost.evaluate.viewer.trajectory import step_views

INDEX = "index.html"
ROWS = "rows.js"
ASSETS = ("viewer.css", "viewer.js")
STATUS_LABELS = {"passed": "passed", "failed": "failed", "infra_error": "infra error"}

Progress = Callable[[int, int], None]
"""``on_progress(done, total)``: pages written so far, of how many."""


@dataclass
class RunView:
    """A run directory as the viewer reads it."""

    path: Path
    config: RunConfig | None
    summary: dict[str, Any]
    episodes: list[Episode]
    """In natural order of task names, then by sample."""
    trajectories: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def title(self) -> str:
        policy = self.config.policy if self.config else (self.episodes[0].policy if self.episodes else "?")
        tasks = Path(self.config.tasks).name if self.config else "?"
        return f"{policy} on {tasks}"


def load_run(path: str | Path) -> RunView:
    """Read a run directory (config, episodes, trajectories); its summary is recomputed.

    Raises:
        RunDirError: ``path`` holds no run (no config.json, no episodes.jsonl), or its
            config is damaged.
    """
    rd = RunDir(path)
    config = rd.read_config()
    episodes = rd.episodes()
    if config is None and not episodes:
        raise RunDirError(f"{path} is not a run directory (no {CONFIG}, no {EPISODES})")
    episodes.sort(key=lambda e: (natural_key(e.task_name), e.sample))
    return RunView(Path(path), config, summarize(episodes, config), episodes, rd.trajectories())


# ---------------------------------------------------------------- what pages show


def _when(run: RunView) -> dict[str, str]:
    """Date, start, end and duration of a run, from its episodes' start times (older runs:
    from the files' modification times, and said so)."""
    spans = [
        (datetime.fromisoformat(e.started_at).timestamp(), e.seconds or 0.0)
        for e in run.episodes
        if e.started_at is not None
    ]
    if spans:
        start, end, source = min(s for s, _ in spans), max(s + d for s, d in spans), ""
    else:
        times = [f.stat().st_mtime for f in (run.path / CONFIG, run.path / EPISODES) if f.exists()]
        start, end, source = min(times), max(times), " (from file times)"
    seconds = max(0.0, end - start)
    fmt = "%Y-%m-%d %H:%M:%S UTC"
    return {
        "date": datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%d") + source,
        "started": datetime.fromtimestamp(start, timezone.utc).strftime(fmt),
        "finished": datetime.fromtimestamp(end, timezone.utc).strftime(fmt),
        "duration": _duration(seconds) + (source or " (first episode's start to last one's end)"),
    }


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min {secs:02d} s" if hours else f"{minutes} min {secs:02d} s"


def _config_rows(config: RunConfig | None) -> list[tuple[str, str]]:
    if config is None:
        return []
    data = config.model_dump(exclude={"versions"})
    return [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in data.items()]


def _tokens(episode: Episode) -> str:
    stats = episode.stats
    if not isinstance(stats.get("input_tokens"), int):
        return ""
    return f"{stats['input_tokens']:,} in / {stats.get('output_tokens', 0):,} out"


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The overview's charts and the tables beside them."""
    rows = figure_rows(summary)
    pass_k = rows["pass@k"]
    keys = [k for k, _ in pass_k.get(SCORED, [])]
    curves = {**rows["self_repair"]}
    if rows["by_test_runs"]:
        curves["scored, r = failing test runs"] = rows["by_test_runs"][SCORED]
    xs = max((list(dict(v)) for v in curves.values()), key=len, default=[])
    return {
        "pass_chart": bar_chart(
            "pass@k", keys, [Series(label, [v for _, v in r]) for label, r in pass_k.items()], x_label="k samples"
        ),
        "repair_chart": line_chart(
            "Self-repair: pass rate after r repairs",
            [x.removeprefix("r=") for x in xs],
            [Series(_curve_name(label), [dict(r).get(x) for x in xs]) for label, r in curves.items()],
            x_label="r: failed submissions (or failing test runs) before the pass",
        ),
        "pass_rows": [(k, [percent(dict(r).get(k)) for r in pass_k.values()]) for k in keys],
        "pass_labels": list(pass_k),
    }


def _curve_name(label: str) -> str:
    return {SCORED: "scored, r = failed submissions", INFRA_FAIL: "infra = fail, r = failed submissions"}.get(
        label, label
    )


def _episode_rows(run: RunView) -> list[dict[str, Any]]:
    """One row per episode, as ``rows.js`` holds it for the overview's script."""
    rows = []
    for index, e in enumerate(run.episodes):
        rows.append(
            {
                "index": index,
                "task": e.task_name,
                "sample": e.sample,
                "status": e.status,
                "statuses": [e.status],
                "label": STATUS_LABELS[e.status],
                "reward": f"{e.reward:.3f}",
                "submissions": "".join("✓" if s else "✗" for s in e.submissions),
                "test_runs": "" if e.test_runs is None else "".join("✓" if s else "✗" for s in e.test_runs),
                "steps": e.steps,
                "tokens": _tokens(e),
                "seconds": "" if e.seconds is None else f"{e.seconds:.1f}",
                "failure": e.infra_error or failure_text(e.final_report),
            }
        )
    return rows


def _task_table(run: RunView, episode_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per task, in natural order, with links to its episodes."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in episode_rows:
        by_task.setdefault(row["task"], []).append({k: row[k] for k in ("index", "sample", "status", "label")})
    return [
        {
            "task": t.name,
            "samples": t.samples,
            "passed": t.passed,
            "rate": percent(t.pass_rate),
            "infra": t.infra_errors,
            "mean": "" if t.mean_submissions_to_pass is None else f"{t.mean_submissions_to_pass:.2f}",
            "failure": t.last_failure,
            "episodes": by_task.get(t.name, []),
            "statuses": sorted({e["status"] for e in by_task.get(t.name, [])}),
        }
        for t in task_rows(run.episodes)
    ]


def _write_rows(out: Path, tasks: list[dict[str, Any]], episodes: list[dict[str, Any]]) -> None:
    """``rows.js``: the overview's table rows as data, drawn by its script a page at a time,
    so that a run of thousands of episodes opens at once (a script file, not JSON: pages
    opened from disk may not fetch files)."""
    data = json.dumps({"tasks": tasks, "episodes": episodes}, ensure_ascii=True, separators=(",", ":"))
    (out / ROWS).write_text(f"window.GYM_REPOST_ROWS = {data};\n", encoding="utf-8")


# ---------------------------------------------------------------- writing


def _environment() -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("gym_repost.evaluate.viewer", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["generated"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    from gym_repost import __version__

    env.globals["version"] = __version__
    env.globals["pct"] = percent
    return env


def _copy_assets(out: Path) -> None:
    (out / "assets").mkdir(parents=True, exist_ok=True)
    for name in ASSETS:
        source = resources.files("gym_repost.evaluate.viewer").joinpath("assets", name)
        (out / "assets" / name).write_bytes(source.read_bytes())


def _write_run(
    env: Any, run: RunView, out: Path, root: str, on_page: Callable[[], None], back: str | None = None
) -> None:
    """One run's overview and trajectory pages into ``out`` (assets at ``root``)."""
    (out / "episodes").mkdir(parents=True, exist_ok=True)
    episode_rows = _episode_rows(run)
    tasks = _task_table(run, episode_rows)
    _write_rows(out, tasks, episode_rows)
    page = env.get_template("overview.html.j2").render(
        root=root,
        back=back,
        run=run,
        summary=run.summary,
        when=_when(run),
        versions=(run.config.versions if run.config else {}) or {},
        config_rows=_config_rows(run.config),
        figures=_figures(run.summary),
        tasks=len(tasks),
        episodes=len(episode_rows),
    )
    (out / INDEX).write_text(page, encoding="utf-8")
    on_page()
    template = env.get_template("episode.html.j2")
    for row, episode in zip(episode_rows, run.episodes, strict=True):
        index = row["index"]
        steps = run.trajectories.get(episode.key)
        html = template.render(
            root="../" + root,
            run=run,
            episode=episode,
            row=row,
            steps=None if steps is None else step_views(steps),
            previous=f"{index - 1}.html" if index > 0 else None,
            following=f"{index + 1}.html" if index + 1 < len(episode_rows) else None,
            final_failure=failure_text(episode.final_report, limit=2000),
        )
        (out / "episodes" / f"{index}.html").write_text(html, encoding="utf-8")
        on_page()


def write_report(runs: Sequence[str | Path], output: str | Path, on_progress: Progress | None = None) -> Path:
    """Write the viewer for one run, or the comparison of several, into ``output``
    (replacing a report there, all at once: see the module's docstring).

    Returns the path of ``output/index.html``.

    Raises:
        RunDirError: a path is not a run directory, or its records are damaged.
        ConfigError: ``output`` is a file, or a folder that holds something other than a report.
    """
    out = Path(output)
    check_report_folder(out)
    views = [load_run(p) for p in runs]
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)
        _write_pages(views, staging, on_progress)
        _replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:  # innermost first; only those still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return out / INDEX


def check_report_folder(out: Path) -> None:
    """Refuse, before any work, a report folder that would replace something else.

    Raises:
        ConfigError: ``out`` is a file, or a folder that is neither empty nor a report
            (no ``index.html``).
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file: give the report a folder (-o DIR)")
    if out.is_dir() and any(out.iterdir()) and not (out / INDEX).is_file():
        raise ConfigError(
            f"{out} is a folder that holds something other than a report (no {INDEX}): "
            "choose a new or empty folder (-o DIR)"
        )


def _replace_folder(new: Path, out: Path) -> None:
    """Put the folder ``new`` in the place of ``out`` (an earlier report goes)."""
    if not out.exists():
        new.rename(out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
    out.rename(old / out.name)
    try:
        new.rename(out)
    except BaseException:
        (old / out.name).rename(out)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def _write_pages(views: list[RunView], out: Path, on_progress: Progress | None) -> None:
    total = sum(len(v.episodes) + 1 for v in views) + (len(views) > 1)
    done = 0

    def on_page() -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, total)

    env = _environment()
    _copy_assets(out)
    if len(views) == 1:
        _write_run(env, views[0], out, "", on_page)
        return
    from gym_repost.evaluate.viewer.compare import comparison

    for number, view in enumerate(views, 1):
        _write_run(env, view, out / f"run-{number}", "../", on_page, back="../index.html")
    page = env.get_template("compare.html.j2").render(root="", back=None, **comparison(views))
    (out / INDEX).write_text(page, encoding="utf-8")
    on_page()


__all__ = ["RunView", "check_report_folder", "load_run", "write_report"]
