"""``gym-repost audit``: how often the tasks reward code their repository's own tests reject."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from gym_repost.cli.app import app
from gym_repost.cli.common import (
    ENV,
    PYTHON,
    SANDBOX,
    WORKERS,
    AuditPart,
    console,
    fail,
    load_tasks,
    open_sandbox,
    progress_bar,
    sandbox_options,
)
from gym_repost.errors import BuildError


@app.command()
def audit(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Task file (JSONL) built from SOURCE."),
    upstream: str = typer.Option(
        ...,
        "--upstream",
        metavar="SOURCE",
        help="What the tasks were built from: a directory, an archive or pypi:NAME==VERSION.",
    ),
    mutants: int = typer.Option(30, min=1, help="Mutants tried per task (a reproducible sample)."),
    seed: int = typer.Option(0, help="Seed of the mutant sample."),
    part: AuditPart = typer.Option(
        AuditPart.all,
        help="Mutants drawn from: all, or one of two fixed halves; build --max-false-accept filters on "
        "'build', so 'held-out' measures what that filter kept with mutants it never saw.",
    ),
    constraints: Optional[Path] = typer.Option(
        None,
        "--constraints",
        metavar="FILE",
        help="pip constraints (NAME==VERSION lines) for what the audit installs, as the build's --constraints.",
    ),
    workers: int = WORKERS,
    sandbox: str = SANDBOX,
    python: Optional[str] = PYTHON,
    env: Optional[str] = ENV,
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write per-task results (JSON) here."),
) -> None:
    """Measure test strength: mutants of each target that the repository's own tests reject
    (known wrong), submitted to the task; a task that rewards one is a false accept.

    Example: gym-repost audit tasks.jsonl --upstream pypi:inflection==0.5.1 --json audit.json
    """
    from gym_repost.construct.audit import audit_tasks, audit_totals
    from gym_repost.construct.execution import PackageInstaller, own_packages, read_constraints
    from gym_repost.construct.ingest import ingest
    from gym_repost.construct.testgen.trace import local_modules

    if json_out is not None and json_out.is_dir():
        raise fail(f"--json {json_out}: is a directory; give a file to write")
    try:
        pins = read_constraints(constraints) if constraints is not None else ()
    except BuildError as exc:
        raise fail(f"--constraints {exc}") from None
    tasks = [t for t in load_tasks(tasks_path) if t.kind == "function"]
    if not tasks:
        raise fail(f"{tasks_path}: no function tasks to audit")
    repo = ingest(upstream, licenses="any")
    options = sandbox_options(workers, python, env, ["pytest", "coverage"], tasks)
    with open_sandbox(sandbox, options) as opened, own_packages(opened) as (box, _), progress_bar() as progress:
        installer = PackageInstaller(box, refuse=frozenset(local_modules(repo)), constraints=pins)
        bar = progress.add_task("auditing", total=len(tasks))
        audits = audit_tasks(
            box,
            tasks,
            repo,
            mutants=mutants,
            seed=seed,
            workers=workers,
            part=part.value,
            on_result=lambda _a: progress.advance(bar),
            install=installer.provide,
        )
    console.print(_table(audits))
    totals = audit_totals(audits)
    _print_totals(totals)
    if json_out is not None:
        json_out.write_text(
            json.dumps({"totals": totals, "tasks": [a.record() for a in audits]}, indent=2), encoding="utf-8"
        )


def _table(audits: list[Any]) -> Table:
    table = Table(title="audit per task: mutants the repository's own tests reject, rewarded by the task")
    table.add_column("task", no_wrap=True)
    for column in ("status", "covering tests", "known wrong", "false accepts"):
        table.add_column(column, no_wrap=True)
    table.add_column("a false accept", overflow="fold")
    for a in audits:
        shown = a.false_accepts[0] if a.false_accepts else None
        example = "" if shown is None else f"line {shown.line}: {shown.original!r} -> {shown.replacement!r}"
        accepted = f"[red]{len(a.false_accepts)}[/]" if a.false_accepts else "0"
        status = a.status if a.status == "audited" else f"[yellow]{a.status}[/] {a.detail}"
        table.add_row(a.task_name, status, str(a.covering_tests), str(len(a.known_wrong)), accepted, example)
    return table


def _print_totals(totals: dict[str, Any]) -> None:
    rate = totals["false_accept_rate"]
    share = totals["share_of_tasks_rewarding_any"]
    console.print(
        f"known-wrong mutants rewarded: [bold]{totals['false_accepts']}/{totals['known_wrong']}[/]"
        + (f" ({100 * rate:.1f}%)" if rate is not None else "")
    )
    console.print(
        f"tasks rewarding a known-wrong mutant: [bold]{totals['tasks_rewarding_a_known_wrong_mutant']}"
        f"/{totals['tasks_with_known_wrong_mutants']}[/]" + (f" ({100 * share:.1f}%)" if share is not None else "")
    )
    statuses = ", ".join(f"{k}: {v}" for k, v in totals["by_status"].items() if v)
    console.print(f"tasks: {totals['tasks']} ({statuses})")
