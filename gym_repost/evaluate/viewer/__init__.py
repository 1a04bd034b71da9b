"""The run viewer: static HTML pages of one run, a comparison of several, or a folder of runs.

:func:`write_report` writes one folder (``index.html``, ``episodes/*.html``, ``assets/``)
that needs no server and no network: open ``index.html`` from disk, or zip the folder and
share it. One run: an overview (when, how long, versions, the configuration and its
sandbox as key/value tables, pass@k and self-repair charts, the tasks in natural order,
every episode, with filters, full-text search over failures and code, and sorting by any
column) and one page per episode with its whole transcript: the task prompt as step 0, then
per step the policy's messages (a model's replies with their tool calls, tokens and
seconds), the action, the tool result and the test report, and the traceback of a policy
or infrastructure error. Several runs: a comparison page (pass@k side by side, self-repair
curves, per-task wins and losses against the first run, each task linking to every run's
episodes and to their transcripts side by side in ``side/``) and each run's own report in
``run-1/``, ``run-2/``, ... A folder holding run directories: a sortable list of the runs,
each run's report in ``runs/NAME/``.

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
from gym_repost.evaluate.report import (
    INFRA_FAIL,
    SCORED,
    STATUS_LABELS,
    error_text,
    failure_text,
    figure_rows,
    natural_key,
    percent,
    policy_error,
    status_label,
    task_rows,
)
from gym_repost.evaluate.run_dir import CONFIG, EPISODES, Episode, RunConfig, RunDir, Trajectory
from gym_repost.evaluate.summary import summarize
from gym_repost.evaluate.viewer.folder import RUNS, run_folders, run_row, runs_of
from gym_repost.evaluate.viewer.trajectory import stop_reason, transcript_view

INDEX = "index.html"
ROWS = "rows.js"
SEARCH = "search.js"
ASSETS = ("viewer.css", "viewer.js")
ROLE_LABELS = {"system": "system", "user": "user", "assistant": "model", "tool": "tool result"}
SEARCH_CODE_CHARS = 20_000
"""Characters of an episode's final code the full-text search reads."""

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
    trajectories: dict[tuple[str, int], Trajectory] = field(default_factory=dict)

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
        raise RunDirError(f"{path} is not a run directory (no {CONFIG}, no {EPISODES}), nor a folder of them")
    episodes.sort(key=lambda e: (natural_key(e.task_name), e.sample))
    return RunView(Path(path), config, summarize(episodes, config), episodes, rd.trajectories())


# ---------------------------------------------------------------- what pages show


def _when(run: RunView) -> dict[str, Any]:
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
        "seconds": seconds,
    }


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min {secs:02d} s" if hours else f"{minutes} min {secs:02d} s"


ConfigValue = str | list[tuple[str, str]]
"""A configuration row's value: text, or the key/value rows of a nested setting."""


def _config_rows(config: RunConfig | None) -> list[tuple[str, ConfigValue]]:
    """The run's configuration; the sandbox's and the policy's options as nested rows."""
    if config is None:
        return []
    rows: list[tuple[str, ConfigValue]] = []
    for key, value in config.model_dump(mode="json", exclude={"versions"}).items():
        if isinstance(value, dict):
            items = sorted(value.items(), key=lambda item: item[0] != "type")  # the backend first
            rows.append((key, [(k, _setting(v)) for k, v in items]))
        else:
            rows.append((key, _setting(value)))
    return rows


def _setting(value: Any) -> str:
    return value if isinstance(value, str) else "not set" if value is None else json.dumps(value)


def _tokens(episode: Episode) -> str:
    stats = episode.stats
    if not isinstance(stats.get("input_tokens"), int):
        return ""
    return f"{stats['input_tokens']:,} in / {stats.get('output_tokens', 0):,} out"


def _tokens_total(episode: Episode) -> int | None:
    stats = episode.stats
    numbers = [stats.get(k) for k in ("input_tokens", "output_tokens")]
    return sum(n for n in numbers if isinstance(n, int)) if isinstance(numbers[0], int) else None


def _statuses(run: RunView) -> list[tuple[str, str]]:
    """The statuses the run's episodes have, as the overview's filter offers them."""
    present = {e.status for e in run.episodes} | {"passed", "failed", "infra_error"}
    known = [s for s in STATUS_LABELS if s in present]
    return [(s, status_label(s)) for s in known + sorted(present - set(known))]


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
                "label": status_label(e.status),
                "reward": f"{e.reward:.3f}",
                "submissions": "".join("✓" if s else "✗" for s in e.submissions),
                "test_runs": "" if e.test_runs is None else "".join("✓" if s else "✗" for s in e.test_runs),
                "steps": e.steps,
                "tokens": _tokens(e),
                "tokens_total": _tokens_total(e),
                "seconds": "" if e.seconds is None else f"{e.seconds:.1f}",
                "failure": error_text(e) or failure_text(e.final_report),
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


def _write_search(out: Path, run: RunView) -> None:
    """``search.js``: per episode, the text the overview's full-text search reads (its
    failure, its error, its final code), lower-cased; loaded by the page on the first search."""
    texts = []
    for e in run.episodes:
        error = policy_error(e) or {}
        parts = [failure_text(e.final_report, limit=4000), e.infra_error or "", *error.values()]
        texts.append("\n".join([*parts, (e.code or "")[:SEARCH_CODE_CHARS]]).lower())
    data = json.dumps(texts, ensure_ascii=True, separators=(",", ":"))
    (out / SEARCH).write_text(f"window.GYM_REPOST_SEARCH = {data};\n", encoding="utf-8")


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
    env.globals["ROLE_LABELS"] = ROLE_LABELS
    env.globals["status_label"] = status_label
    return env


def _copy_assets(out: Path) -> None:
    (out / "assets").mkdir(parents=True, exist_ok=True)
    for name in ASSETS:
        source = resources.files("gym_repost.evaluate.viewer").joinpath("assets", name)
        (out / "assets" / name).write_bytes(source.read_bytes())


def _write_run(
    env: Any, run: RunView, out: Path, root: str, on_page: Callable[[], None], back: tuple[str, str] | None = None
) -> None:
    """One run's overview and episode pages into ``out`` (assets at ``root``); ``back``: a
    link (address, label) to the page that leads here."""
    (out / "episodes").mkdir(parents=True, exist_ok=True)
    episode_rows = _episode_rows(run)
    tasks = _task_table(run, episode_rows)
    _write_rows(out, tasks, episode_rows)
    _write_search(out, run)
    page = env.get_template("overview.html.j2").render(
        root=root,
        back=back[0] if back else None,
        back_label=back[1] if back else "",
        run=run,
        summary=run.summary,
        when=_when(run),
        versions=(run.config.versions if run.config else {}) or {},
        config_rows=_config_rows(run.config),
        figures=_figures(run.summary),
        tasks=len(tasks),
        episodes=len(episode_rows),
        statuses=_statuses(run),
    )
    (out / INDEX).write_text(page, encoding="utf-8")
    on_page()
    template = env.get_template("episode.html.j2")
    for row, episode in zip(episode_rows, run.episodes, strict=True):
        index = row["index"]
        html = template.render(
            root="../" + root,
            run=run,
            episode=episode,
            row=row,
            transcript=transcript_view(run.trajectories.get(episode.key), stop_reason(episode)),
            policy_error=policy_error(episode),
            previous=f"{index - 1}.html" if index > 0 else None,
            following=f"{index + 1}.html" if index + 1 < len(episode_rows) else None,
            final_failure=failure_text(episode.final_report, limit=2000),
        )
        (out / "episodes" / f"{index}.html").write_text(html, encoding="utf-8")
        on_page()


class _Pages:
    """Counts the pages written, for ``on_progress``."""

    def __init__(self, total: int, on_progress: Progress | None) -> None:
        self.total, self.done, self._on_progress = total, 0, on_progress

    def __call__(self) -> None:
        self.done += 1
        if self._on_progress is not None:
            self._on_progress(self.done, self.total)


def write_report(runs: Sequence[str | Path], output: str | Path, on_progress: Progress | None = None) -> Path:
    """Write the viewer for one run, the comparison of several, or the list of the runs a
    folder holds (one path that is not a run but holds run directories), into ``output``
    (replacing a report there, all at once: see the module's docstring).

    Returns the path of ``output/index.html``.

    Raises:
        RunDirError: a path is not a run directory (nor a folder of them), or its records are damaged.
        ConfigError: ``output`` is a file, or a folder that holds something other than a report.
    """
    out = Path(output)
    check_report_folder(out)
    found = run_folders(runs[0]) if len(runs) == 1 else []
    views = [] if found else [load_run(p) for p in runs]
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)
        if found:
            _write_folder(Path(runs[0]), found, staging, on_progress)
        else:
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
    """One run's report, or the comparison of several and each run's report, into ``out``."""
    on_page = _Pages(sum(len(v.episodes) + 1 for v in views), on_progress)
    env = _environment()
    _copy_assets(out)
    if len(views) == 1:
        _write_run(env, views[0], out, "", on_page)
        return
    from gym_repost.evaluate.viewer.compare import SIDE, comparison, side_by_side

    for number, view in enumerate(views, 1):
        _write_run(env, view, out / f"run-{number}", "../", on_page, back=("../index.html", "← comparison"))
    context = comparison(views)
    sides = list(side_by_side(views, context["tasks"]))
    on_page.total += 1 + len(sides)
    shutil.rmtree(out / SIDE, ignore_errors=True)
    (out / SIDE).mkdir()
    template = env.get_template("side.html.j2")
    for path, page in sides:
        (out / path).write_text(template.render(root="../", **page), encoding="utf-8")
        on_page()
    (out / INDEX).write_text(env.get_template("compare.html.j2").render(root="", **context), encoding="utf-8")
    on_page()


def _write_folder(folder: Path, found: list[Path], out: Path, on_progress: Progress | None) -> None:
    """The list of the runs in ``folder``, each run's report in ``out/runs/NAME/``."""
    views, unreadable = [], []
    for path in found:
        try:
            views.append(load_run(path))
        except RunDirError as exc:
            unreadable.append((path.name, str(exc)))
    on_page = _Pages(sum(len(v.episodes) + 1 for v in views) + 1, on_progress)
    env = _environment()
    out.mkdir(parents=True, exist_ok=True)
    _copy_assets(out)
    rows = []
    for view in views:
        _write_run(env, view, out / RUNS / view.path.name, "../../", on_page, back=("../../index.html", "← all runs"))
        rows.append(run_row(view, _when(view)))
    page = env.get_template("runs.html.j2").render(root="", folder=folder, runs=rows, unreadable=unreadable)
    (out / INDEX).write_text(page, encoding="utf-8")
    on_page()


__all__ = ["RunView", "check_report_folder", "load_run", "runs_of", "write_report"]
