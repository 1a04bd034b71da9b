"""A folder of runs (``gym-repost report DIR`` where DIR holds run directories): which of
its subdirectories are runs, and the row the list of runs shows for each."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gym_repost.evaluate.report import natural_key, percent
from gym_repost.evaluate.run_dir import CONFIG, EPISODES

if TYPE_CHECKING:
    from gym_repost.evaluate.viewer import RunView

RUNS = "runs"
"""Where a folder's report keeps each run's report: ``runs/NAME/``."""


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a run (its ``config.json`` or ``episodes.jsonl``)."""
    return any((Path(path) / name).is_file() for name in (CONFIG, EPISODES))


def run_folders(path: str | os.PathLike[str]) -> list[Path]:
    """The run directories directly inside ``path``, in natural order of their names
    (none when ``path`` is itself a run or not a directory)."""
    folder = Path(path)
    if not folder.is_dir() or is_run_dir(folder):
        return []
    return sorted((p for p in folder.iterdir() if p.is_dir() and is_run_dir(p)), key=lambda p: natural_key(p.name))


def runs_of(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The run directories a report of ``paths`` shows: the runs a folder holds when one
    folder of runs is given, else ``paths`` themselves."""
    found = run_folders(paths[0]) if len(paths) == 1 else []
    return found or [Path(p) for p in paths]


def run_row(view: RunView, when: dict[str, Any]) -> dict[str, Any]:
    """What the list of runs shows of one run, and where its report is."""
    summary = view.summary
    pass1 = summary.get("pass@1")
    reward = summary.get("mean_reward")
    return {
        "name": view.path.name,
        "href": f"{RUNS}/{quote(view.path.name)}/index.html",
        "title": view.title,
        "started": when["started"],
        "duration": when["duration"].split(" (")[0],
        "seconds": round(when["seconds"], 1),
        "episodes": summary["episodes"],
        "tasks": summary["tasks"],
        "pass1": percent(pass1),
        "pass1_value": "" if pass1 is None else pass1,
        "reward": "n/a" if reward is None else f"{reward:.3f}",
        "infra": summary["infra_errors"],
    }
