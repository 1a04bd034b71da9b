"""``gym-repost validate``: the ground truth passes, the tests reject wrong code."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from gym_repost.cli.app import app
from gym_repost.cli.common import (
    ENV,
    EXECUTOR,
    LIMIT,
    PRELOAD,
    PYTHON,
    RAY_ADDRESS,
    SANDBOX,
    TASK,
    WORKERS,
    ExecutorKind,
    check_output_file,
    console,
    err_console,
    load_tasks,
    open_executor,
    progress_bar,
    sandbox_options,
    write_json,
)


def _validation_table(results: list[Any]) -> Table:
    table = Table(title="validation per task")
    table.add_column("task", no_wrap=True)
    for col in ("ground truth", "trivial", "mutants killed", "branch cov."):
        table.add_column(col, no_wrap=True)
    table.add_column("cause", overflow="fold")
    for r in results:
        killed = f"{r.mutants_killed}/{r.mutants.total}" if r.mutants and r.mutants.total else "-"
        accepted = ", ".join(r.accepts_trivial)
        do_nothing = "-" if r.do_nothing is None else (f"[red]ACCEPTED[/] {accepted}" if accepted else "rejected")
        cov = "-" if r.coverage is None else f"{100 * r.coverage.branch_coverage:.0f}% ({r.coverage.branches})"
        verdict = ("[green]pass[/]" if r.passed else "[red]FAIL[/]") + (
            " [yellow](nondeterministic)[/]" if r.nondeterministic else ""
        )
        table.add_row(r.task_name, verdict, do_nothing, killed, cov, r.cause or "; ".join(r.nondeterministic[:2]))
    return table


@app.command()
def validate(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Task file (JSONL)."),
    mutants: int = typer.Option(10, min=0, help="Mutants of the ground truth tried per task."),
    coverage: bool = typer.Option(False, "--coverage", help="Also measure branch coverage."),
    task: list[str] = TASK,
    limit: Optional[int] = LIMIT,
    workers: int = WORKERS,
    sandbox: str = SANDBOX,
    python: Optional[str] = PYTHON,
    env: Optional[str] = ENV,
    preload: str = PRELOAD,
    seed: int = typer.Option(0, help="Seed of the mutant sample."),
    json_out: Optional[Path] = typer.Option(None, "--json", metavar="FILE", help="Write per-task results here (JSON)."),
    executor: ExecutorKind = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
) -> None:
    """Check that each ground truth passes and that the tests reject wrong code.

    Exit status: 0; 1 when a ground truth fails; 2 on a bad argument.

    Example: gym-repost validate tasks/demo.jsonl --coverage --json validation.json
    """
    from gym_repost.harness.validation import validate_tasks, validation_totals

    check_output_file(json_out, "--json")
    tasks = load_tasks(tasks_path, task, limit)
    testfile = [t for t in tasks if t.kind == "testfile"]
    if testfile:  # their ground truth was run and measured when built; `eval --policy oracle` re-runs it
        err_console.print(
            f"[yellow]skipped {len(testfile)} test-file task(s):[/] validate checks function tasks; "
            f"use `gym-repost eval {tasks_path} --policy oracle` (and mutant) for test-file tasks"
        )
        tasks = [t for t in tasks if t.kind != "testfile"]
        if not tasks:
            raise typer.Exit(0)
    options = sandbox_options(workers, python, env, None, tasks, preload)
    with open_executor(executor, ray_address, workers, sandbox, options) as ex, progress_bar() as progress:
        bar = progress.add_task("validating", total=len(tasks))
        results = validate_tasks(
            None,
            tasks,
            mutants=mutants,
            seed=seed,
            coverage=coverage,
            executor=ex,
            on_result=lambda _r: progress.advance(bar),
        )
    console.print(_validation_table(results))
    totals = validation_totals(results)
    _print_validation_totals(totals)
    if json_out:
        write_json(json_out, {"totals": totals, "tasks": [r.record() for r in results]})
    if totals["ground_truth_failed"]:
        raise typer.Exit(1)


def _print_validation_totals(totals: dict[str, Any]) -> None:
    rate = totals["mutant_kill_rate"]
    console.print(f"ground truth passes: [bold]{totals['ground_truth_passed']}/{totals['tasks']}[/]")
    console.print(
        f"mutants killed: [bold]{totals['mutants_killed']}/{totals['mutants_total']}[/]"
        + (f" ({100 * rate:.1f}%)" if rate is not None else "")
    )
    if totals["mean_branch_coverage"] is not None:
        console.print(f"mean branch coverage of the targets: {100 * totals['mean_branch_coverage']:.1f}%")
    flagged = totals["accepts_trivial"]
    listed = ", ".join(f"{task} ({', '.join(which)})" for task, which in flagged.items())
    console.print(
        "tests that accept a trivial candidate (None, the first argument, self, a constant, an exception): "
        f"[bold]{len(flagged)}[/]" + (f": {listed}" if listed else "")
    )
    unstable = totals["nondeterministic"]
    console.print(
        f"nondeterministic tests (differing fields not compared; keep out of eval): [bold]{len(unstable)}[/]"
        + (": " + ", ".join(unstable) if unstable else "")
    )
    modes = totals["verdict_modes"]
    console.print(
        f"verdicts by replayed inputs: {modes['inputs']}, by tests run beside the candidate: {modes['driver']}"
    )
    for failure in totals["ground_truth_failed"]:
        console.print(f"[red]ground truth fails[/] {failure['task']}: {failure['cause']}", highlight=False)
