"""``gym-repost eval`` and ``gym-repost report``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gym_repost.cli.app import app
from gym_repost.cli.common import (
    ENV,
    EXECUTOR,
    PRELOAD,
    PYTHON,
    RAY_ADDRESS,
    SANDBOX,
    SEED,
    WORKERS,
    backend_options,
    console,
    fail,
    load_tasks,
    open_executor,
    parse_policy_args,
    progress_bar,
    resumable,
    sandbox_options,
)
from gym_repost.errors import ConfigError


@app.command("eval")
def eval_command(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Task file (JSONL)."),
    policy: str = typer.Option(
        ..., help="oracle | mutant | scripted:FILE | llm:PROVIDER/MODEL | file.py:Class | module:Class"
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Run directory (resumable)."),
    n: int = typer.Option(1, "-n", "--samples", min=1, help="Samples per task."),
    repairs: int = typer.Option(0, "--repairs", min=0, help="Repair iterations after a failing submission."),
    workers: int = WORKERS,
    max_steps: int = typer.Option(30, help="Step budget per episode."),
    reward: str = typer.Option("binary", help="binary | shaped"),
    seed: int = SEED,
    sandbox: str = SANDBOX,
    python: Optional[str] = PYTHON,
    env: Optional[str] = ENV,
    preload: str = PRELOAD,
    policy_arg: list[str] = typer.Option([], "--policy-arg", help="KEY=VALUE for the policy's constructor."),
    base_url: Optional[str] = typer.Option(
        None,
        "--base-url",
        help="LLM endpoint for llm: policies (a proxy, "
        "vLLM http://localhost:8000/v1, Ollama http://localhost:11434/v1).",
    ),
    executor: str = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
) -> None:
    """Run a policy on every task (n samples each) and score it."""
    from gym_repost.evaluate import RunConfig, RunDir, evaluate
    from gym_repost.evaluate.runner import tasks_digest
    from gym_repost.policy import load_policy
    from gym_repost.sandbox import sandbox_config

    tasks = load_tasks(tasks_path)
    resumable("every finished episode")
    options = parse_policy_args(policy_arg)
    factory = load_policy(policy, **options, **_llm_options(policy, base_url, output, options))
    testfile = any(t.kind == "testfile" for t in tasks)  # scored with pytest and coverage: preload them
    options_of_sandbox = sandbox_options(
        workers, python, env, ["pytest", "coverage"] if testfile else None, tasks, preload
    )
    config = RunConfig(
        tasks=str(tasks_path),
        tasks_digest=tasks_digest(tasks),
        policy=policy,
        policy_options=options,
        n=n,
        repairs=repairs,
        max_steps=max_steps,
        reward=reward,  # type: ignore[arg-type]  # pydantic checks it; main() reports a bad one
        seed=seed,
        workers=workers,
        sandbox=sandbox_config(sandbox, **backend_options(sandbox, options_of_sandbox)),
    )
    run_dir = RunDir(output)
    keys = {(t.id, s) for t in tasks for s in range(n)}
    with (
        run_dir.writer_lock(),
        open_executor(executor, ray_address, workers, sandbox, options_of_sandbox) as ex,
        progress_bar(passes=True) as progress,
    ):
        earlier = [e for e in run_dir.episodes() if e.key in keys and e.status != "infra_error"]
        passed = sum(e.status == "passed" for e in earlier)
        bar = progress.add_task(
            f"{policy} on {tasks_path.name}", total=len(keys), completed=len(earlier), passed=passed
        )

        def on_episode(episode: Any) -> None:
            nonlocal passed
            passed += episode.status == "passed"
            progress.update(bar, advance=1, passed=passed)

        summary = evaluate(tasks, factory, config, run_dir, on_episode=on_episode, executor=ex)
    _print_summary(summary)
    console.print(f"results in {output}/ (summary.json, episodes.jsonl); `gym-repost report {output}` for the report")


def _llm_options(policy: str, base_url: Optional[str], output: Path, options: dict[str, Any]) -> dict[str, Any]:
    """Where the model is served and the run's response cache: kept out of the run's identity."""
    if not policy.startswith("llm:"):
        if base_url:
            raise ConfigError("--base-url applies to llm:PROVIDER/MODEL policies")
        return {}
    extra: dict[str, Any] = {} if "cache_dir" in options else {"cache_dir": str(output / "llm-cache")}
    if base_url:
        if "base_url" in options:
            raise ConfigError("give the base URL once: --base-url or --policy-arg base_url=...")
        extra["base_url"] = base_url
    return extra


def _print_summary(summary: dict[str, Any]) -> None:
    from gym_repost.evaluate.report import figure_rows
    from gym_repost.evaluate.report import percent as pct

    figures = figure_rows(summary)
    for name, title in (
        ("pass@k", "[bold]pass@k[/] (unbiased estimator, mean over tasks)"),
        ("self_repair", "[bold]self-repair[/]: pass rate after r repair iterations (r: failed submissions)"),
        ("by_test_runs", "[bold]self-repair by test runs[/]: pass rate after r failing test runs (run_tests too)"),
    ):
        if not figures[name]:
            continue
        rows = figures[name]
        table = Table("figure", *[label for label, _ in next(iter(rows.values()))], title_justify="left")
        for figure, values in rows.items():
            table.add_row(figure, *[pct(v) for _, v in values])
        console.print(title)
        console.print(table)
    console.print("scored: infrastructure errors left out; infra = fail: counted as failures")
    mean_reward = summary.get("mean_reward")
    console.print(
        f"episodes: {summary['episodes']} over {summary['tasks']} tasks; "
        + (f"mean reward {mean_reward:.3f}; " if mean_reward is not None else "")
        + f"infrastructure errors: {summary['infra_errors']} "
        + f"({pct(summary.get('infra_error_share'))})"
    )
    if summary.get("infra_warning"):
        console.print(f"[bold red]WARNING: {escape(summary['infra_warning'])}[/]", highlight=False)


@app.command()
def report(
    runs: list[Path] = typer.Argument(
        ..., metavar="RUN_DIR...", help="Run directories made by `gym-repost eval`, or one folder holding several."
    ),
    output: Optional[Path] = typer.Option(
        None, "-o", "--output", help="Folder to write (default: RUN_DIR/report for one run; needed for several)."
    ),
) -> None:
    """Write the run viewer: static HTML pages of a run, a comparison of several, or a folder's runs."""
    from gym_repost.evaluate.viewer import runs_of, write_report

    if output is None and len(runs) > 1:
        raise fail("comparing several runs: say where to write the comparison with -o DIR")
    out = output if output is not None else runs[0] / "report"
    with progress_bar() as progress:
        bar = progress.add_task("writing the report", total=None)
        index = write_report(
            runs, out, on_progress=lambda done, total: progress.update(bar, completed=done, total=total)
        )
    if output is None:
        _redirect(runs[0] / REPORT_PAGE, index)
    for run in runs_of(runs):
        _print_brief(run)
    console.print(f"report: {index} (a static folder: open it in a browser, or zip {out} to share it)")


REPORT_PAGE = "report.html"
"""``RUN_DIR/report.html``: a page that opens the viewer in ``RUN_DIR/report/``."""


def _redirect(page: Path, index: Path) -> None:
    target = index.relative_to(page.parent).as_posix()
    page.write_text(
        f"<!doctype html><meta charset='utf-8'><meta http-equiv='refresh' content='0; url={target}'>"
        f"<title>gym-repost report</title><p>The report is in <a href='{target}'>{target}</a>.</p>\n",
        encoding="utf-8",
    )


def _print_brief(run: Path) -> None:
    """One line per run (the eval printed the tables already), and its infrastructure warning."""
    from gym_repost.evaluate import RunDir, summarize

    rd = RunDir(run)
    summary = summarize(rd.episodes(), rd.read_config())
    figures = ", ".join(f"{k} {100 * v:.1f}%" for k, v in summary.items() if k.startswith("pass@") and v is not None)
    console.print(
        f"{run}: {figures or 'no scored episodes'} over {summary['tasks']} tasks "
        f"({summary['episodes']} episodes, {summary['infra_errors']} infrastructure errors)",
        highlight=False,
    )
    if summary.get("infra_warning"):
        console.print(f"[bold red]WARNING: {escape(summary['infra_warning'])}[/]", highlight=False)
