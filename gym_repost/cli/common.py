"""What every command shares: the consoles, errors, progress, task loading, sandboxes.

Library code logs through ``logging``; only the CLI installs rich handlers and
progress bars.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from gym_repost.errors import ConfigError

console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)
_INTERRUPTED = ["interrupted"]


def resumable(what: str) -> None:
    """Say, should the command be interrupted, that ``what`` is saved and a rerun continues."""
    _INTERRUPTED[0] = f"interrupted; {what} is saved (rerun the same command to continue)"


def interrupted_note() -> str:
    """What an interrupted command prints: plain, or what :func:`resumable` said."""
    return _INTERRUPTED[0]


logger = logging.getLogger("gym_repost")


def print_error(message: str) -> None:
    """Print ``error: message`` on stderr as one line, never wrapped (a message's own line
    breaks become spaces); the message is text, not markup (``[docker]`` stays)."""
    line = " ".join(message.split())
    err_console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print an error and return the exit to raise."""
    print_error(message)
    return typer.Exit(code)


def invalid_settings(exc: Any) -> str:
    """A pydantic ``ValidationError`` as one sentence naming each setting, what is wrong and
    the value given (``invalid reward: Input should be 'binary' or 'shaped' (given 'foo')``)."""
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error.get("loc", ())) or "value"
        given = error.get("input")
        shown = "" if isinstance(given, dict) else f" (given {given!r})"[:200]
        parts.append(f"invalid {where}: {error.get('msg', 'invalid')}{shown}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def progress_bar(*, passes: bool = False) -> Progress:
    """A progress display on stderr: the bar, done of total, the time spent and the time
    left (ETA); with ``passes``, a live count of passed items (the task's ``passed``
    field). It shows nothing when stderr is not a terminal (a log, a pipe, CI)."""
    columns: list[Any] = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    if passes:
        columns.append(TextColumn("[green]{task.fields[passed]} passed[/]"))
    columns += [TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    return Progress(*columns, console=err_console, transient=False, disable=not err_console.is_terminal)


def load_tasks(tasks_path: Path, patterns: Sequence[str] = (), limit: Optional[int] = None) -> list[Any]:
    """The usable tasks of a task file (each unusable line reported), those ``--task``
    patterns match, the first ``--limit``; exit when none are."""
    from gym_repost.task import load_tasks as read_tasks
    from gym_repost.task import select_tasks

    tasks = read_tasks(tasks_path, log=False)
    for error in tasks.errors:
        err_console.print(f"[yellow]skipped:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
    if not tasks:
        raise fail(f"{tasks_path}: no usable tasks")
    return select_tasks(tasks, patterns, limit)


def check_output_file(path: Optional[Path], option: str) -> None:
    """Refuse, before any work, an output file the command could not write at its end: a
    directory, or a path under a file (missing folders are created when it is written).

    Raises:
        ConfigError: naming the option and the path.
    """
    if path is None:
        return
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a directory: give the path of a file to write")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{option} {path}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ConfigError(f"{option} {path}: the folder {parent} is not writable")
            return


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON, atomically (folders created as needed)."""
    from gym_repost.task import write_lines_atomically

    write_lines_atomically([json.dumps(data, indent=2)], path)


def sandbox_options(
    workers: int,
    python: Optional[str],
    env: Optional[str],
    preload: Optional[list[str]],
    tasks: Optional[list[Any]] = None,
    env_preload: str = "auto",
) -> dict[str, Any]:
    """``env_preload``: ``auto`` adds the modules of the environment's preload.txt that
    ``tasks`` import (those it preloads ``apart`` in workers of their own), ``none`` nothing,
    else a comma-separated list of modules."""
    options: dict[str, Any] = {"workers": workers}
    if env:
        options["env"] = env
    if python:
        options["python"] = python
    chosen = list(preload or [])
    if env_preload == "auto" and env and tasks is not None:
        from gym_repost.sandbox.environments import preload_apart_for, preload_for

        packages = {p for t in tasks for p in t.metadata.external_packages}
        chosen += preload_for(env, packages)
        apart = preload_apart_for(env, packages)
        if apart:
            options["preload_apart"] = apart
    elif env_preload not in ("auto", "none"):
        chosen += [m.strip() for m in env_preload.split(",") if m.strip()]
    if chosen:
        options["preload"] = list(dict.fromkeys(chosen))
    return options


def backend_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``--env`` names an image for the docker backend, a host virtual environment otherwise
    (an explicit ``--python`` wins). Preloading is a warm-worker speed-up of the local
    backend; docker images have the packages installed."""
    from gym_repost.sandbox.environments import resolve_env_python

    options = dict(options)
    env = options.pop("env", None)
    if name == "docker":
        options.pop("preload", None)
        options.pop("preload_apart", None)
        if env:
            options["env"] = env
    elif env:
        options.setdefault("python", resolve_env_python(env))
    return options


@contextmanager
def open_sandbox(name: str, options: dict[str, Any]) -> Iterator[Any]:
    """A started sandbox of backend ``name``, closed on exit."""
    from gym_repost.sandbox import get_sandbox

    sandbox = get_sandbox(name, **backend_options(name, options))
    sandbox.start()
    try:
        yield sandbox
    finally:
        sandbox.close()


class Reward(StrEnum):
    """``--reward``: of function tasks."""

    binary = "binary"
    shaped = "shaped"


class ExecutorKind(StrEnum):
    """``--executor``: where units of work run."""

    local = "local"
    ray = "ray"


# Options several commands share (one definition each; a command lists it as its default).
WORKERS = typer.Option(2, "--workers", "-w", min=1, help="Units of work at once (and warm sandbox workers).")
SANDBOX = typer.Option("local", help="Sandbox backend: local | docker.")
PYTHON = typer.Option(None, help="Interpreter inside the sandbox.")
ENV = typer.Option(None, help="Installed environment (see `gym-repost env`).")
SEED = typer.Option(0, help="Seed of everything sampled (the same seed gives the same result).")
LIMIT = typer.Option(None, min=1, metavar="N", help="Only the first N tasks (after --task).")
TASK = typer.Option(
    [], "--task", metavar="GLOB", help="Only the tasks whose name (or id) matches GLOB, as demo/pricing.* (repeatable)."
)
TEST_TIMEOUT = typer.Option(2.0, help="Seconds per test (script loading included).")
PRELOAD = typer.Option(
    "auto",
    help="Modules warm workers import ahead of runs: auto (those of "
    "the --env's preload.txt the tasks import), none, or MOD,MOD,...",
)
EXECUTOR = typer.Option(
    ExecutorKind.local,
    "--executor",
    help="Where units of work run: local (threads of this process) | ray (Ray actors).",
)
RAY_ADDRESS = typer.Option(
    None,
    "--ray-address",
    help="--executor ray: a cluster to join (auto, HOST:PORT, ray://HOST:PORT); none starts a local Ray instance.",
)


@contextmanager
def open_executor(
    kind: str, address: Optional[str], workers: int, sandbox: str, options: dict[str, Any]
) -> Iterator[Any]:
    """The ``--executor``, with the sandbox config its workers build their sandboxes from
    (``local``: one sandbox with ``workers`` warm workers; ``ray``: one per actor); closed on exit."""
    from gym_repost.executor import get_executor
    from gym_repost.sandbox import sandbox_config

    config = sandbox_config(sandbox, **backend_options(sandbox, options))
    with get_executor(kind, workers=workers, sandbox=config, address=address) as executor:
        yield executor


def parse_policy_args(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a value that parses as JSON is taken as JSON."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ConfigError(f"--policy-arg {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def counts_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    """A two-column table of named counts."""
    table = Table(title=title, title_justify="left")
    table.add_column("")
    table.add_column("count", justify="right")
    for name, value in rows:
        table.add_row(name, str(value))
    return table
