"""``gym-repost eval`` and ``gym-repost report``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gym_repost.cli.app import app
from gym_repost.cli.common import (
    EXECUTOR,
    RAY_ADDRESS,
    console,
    fail,
    load_tasks,
    open_executor,
    parse_policy_args,
    progress_bar,
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
    workers: int = typer.Option(2, "--workers", "-w", min=1),
    max_steps: int = typer.Option(30, help="Step budget per episode."),
    reward: str = typer.Option("binary", help="binary | shaped"),
    seed: int = typer.Option(0),
    sandbox: str = typer.Option("local", help="Sandbox backend."),
    python: Optional[str] = typer.Option(None, help="Interpreter inside the sandbox."),
    env: Optional[str] = typer.Option(None, help="Installed environment (see `gym-repost env`)."),
    preload: str = typer.Option(
        "auto",
        help="Modules warm workers import ahead of runs: auto (those of "
        "the --env's preload.txt the tasks import), none, or MOD,MOD,...",
    ),
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

    tasks = load_tasks(tasks_path)
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
        reward=reward,
        seed=seed,
        workers=workers,
        sandbox=sandbox,
        sandbox_options={k: v for k, v in options_of_sandbox.items() if k != "workers"},
    )
    run_dir = RunDir(output)
    with (
        run_dir.writer_lock(),
        open_executor(executor, ray_address, workers, sandbox, options_of_sandbox) as ex,
        progress_bar() as progress,
    ):
        bar = progress.add_task(f"{policy} on {tasks_path.name}", total=len(tasks) * n)
        progress.advance(bar, len(run_dir.finished() & {(t.id, s) for t in tasks for s in range(n)}))
        summary = evaluate(
            tasks, factory, config, run_dir, on_episode=lambda _episode: progress.advance(bar), executor=ex
        )
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

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{100 * v:.1f}%"

    figures = figure_rows(summary)
    for name, title in (
        ("pass@k", "[bold]pass@k[/] (unbiased estimator, mean over tasks)"),
        ("self_repair", "[bold]self-repair[/]: pass rate after r repair iterations"),
    ):
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
def report(run_dir: Path = typer.Argument(..., help="A run directory made by `gym-repost eval`.")) -> None:
    """Print the pass@k and self-repair tables of a run and write report.html."""
    from gym_repost.evaluate import RunDir, summarize
    from gym_repost.evaluate.report import task_rows, write_html

    rd = RunDir(run_dir)
    config = rd.read_config()
    episodes = rd.episodes()
    if config is None and not episodes:
        raise fail(f"{run_dir} is not a run directory (no config.json, no episodes.jsonl)")
    summary = summarize(episodes, config)
    rd.write_summary(summary)
    _print_summary(summary)
    failing = [t for t in task_rows(episodes) if t.passed < t.samples]
    if failing:
        table = Table(title=f"tasks not always solved ({len(failing)})")
        for col in ("task", "passed", "a failure"):
            table.add_column(col, overflow="fold")
        for t in failing[:30]:
            table.add_row(t.name, f"{t.passed}/{t.samples}", t.last_failure)
        console.print(table)
    console.print(f"report: {write_html(run_dir, summary, episodes, config)}")
