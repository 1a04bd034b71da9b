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
    LIMIT,
    PRELOAD,
    PYTHON,
    RAY_ADDRESS,
    SANDBOX,
    SEED,
    TASK,
    WORKERS,
    ExecutorKind,
    Reward,
    backend_options,
    console,
    err_console,
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
        ...,
        metavar="SPEC",
        help="oracle | mutant | scripted:FILE | llm:PROVIDER/MODEL | file.py:Class | module:Class",
    ),
    output: Path = typer.Option(..., "-o", "--output", metavar="DIR", help="Run directory (resumable)."),
    n: int = typer.Option(1, "-n", "--samples", min=1, help="Samples per task."),
    repairs: int = typer.Option(0, "--repairs", min=0, help="Repair iterations after a failing submission."),
    task: list[str] = TASK,
    limit: Optional[int] = LIMIT,
    workers: int = WORKERS,
    max_steps: int = typer.Option(30, min=1, help="Step budget per episode."),
    reward: Reward = typer.Option(Reward.binary, help="Reward of function tasks."),
    seed: int = SEED,
    sandbox: str = SANDBOX,
    python: Optional[str] = PYTHON,
    env: Optional[str] = ENV,
    preload: str = PRELOAD,
    policy_arg: list[str] = typer.Option(
        [], "--policy-arg", metavar="KEY=VALUE", help="An option of the policy's constructor (repeatable)."
    ),
    base_url: Optional[str] = typer.Option(
        None,
        "--base-url",
        metavar="URL",
        help="LLM endpoint for llm: policies (a proxy, "
        "vLLM http://localhost:8000/v1, Ollama http://localhost:11434/v1).",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Start the run directory afresh (its earlier results are removed)."
    ),
    fail_fast: bool = typer.Option(
        False, "--fail-fast", help="Stop at the first policy or infrastructure error (what is done is kept)."
    ),
    executor: ExecutorKind = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
) -> None:
    """Run a policy on every task (n samples each) and score it.

    Rerunning the same command continues the run. Exit status: 0; 1 when policy or
    infrastructure errors pass 5% of the episodes, or --fail-fast stopped the run; 2 on
    a bad argument.

    Example: gym-repost eval tasks/demo.jsonl --policy oracle -o runs/demo
    """
    from gym_repost.evaluate import RunConfig, RunDir, evaluate
    from gym_repost.evaluate.runner import tasks_digest
    from gym_repost.policy import load_policy
    from gym_repost.policy.loader import policy_fingerprint
    from gym_repost.sandbox import sandbox_config

    run_dir = RunDir(output)
    run_dir.check_path()
    tasks = load_tasks(tasks_path, task, limit)
    options = parse_policy_args(policy_arg)
    factory = load_policy(policy, **options, **_llm_options(policy, base_url, output, options))  # builds one
    testfile = any(t.kind == "testfile" for t in tasks)  # scored with pytest and coverage: preload them
    options_of_sandbox = sandbox_options(
        workers, python, env, ["pytest", "coverage"] if testfile else None, tasks, preload
    )
    config = RunConfig(
        tasks=str(tasks_path),
        tasks_digest=tasks_digest(tasks),
        policy=policy,
        policy_options=options,
        policy_fingerprint=policy_fingerprint(policy, options),
        n=n,
        repairs=repairs,
        max_steps=max_steps,
        reward=reward.value,
        seed=seed,
        workers=workers,
        sandbox=sandbox_config(sandbox, **backend_options(sandbox, options_of_sandbox)),
    )
    if not overwrite:
        run_dir.check(config)  # before any work: another run there, damaged records
    resumable("every finished episode")
    with (
        run_dir.writer_lock(),
        open_executor(executor, ray_address, workers, sandbox, options_of_sandbox) as ex,
        progress_bar(passes=True) as progress,
    ):
        live = _Progress(progress, f"{policy} on {tasks_path.name}")
        summary = evaluate(
            tasks,
            factory,
            config,
            run_dir,
            on_episode=live.advance,
            executor=ex,
            overwrite=overwrite,
            fail_fast=fail_fast,
            on_start=live.start,
        )
    _print_summary(summary)
    console.print(f"results in {output}/ (summary.json, episodes.jsonl); `gym-repost report {output}` for the report")
    if summary.get("stopped_at") or summary.get("infra_warning") or summary.get("policy_warning"):
        raise typer.Exit(1)


class _Progress:
    """The eval's progress bar, and its "resuming" line."""

    def __init__(self, progress: Any, label: str) -> None:
        self._progress, self._label = progress, label
        self._bar: Any = None
        self._passed = 0

    def start(self, start: Any) -> None:
        if start.done:
            err_console.print(f"resuming: {start.done} done, {start.todo} to run", highlight=False)
        self._passed = start.passed
        total = start.done + start.todo
        self._bar = self._progress.add_task(self._label, total=total, completed=start.done, passed=self._passed)

    def advance(self, episode: Any) -> None:
        self._passed += episode.status == "passed"
        self._progress.update(self._bar, advance=1, passed=self._passed)


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
        + f"({pct(summary.get('infra_error_share'))}); "
        + f"policy errors: {summary.get('policy_errors', 0)} ({pct(summary.get('policy_error_share'))})"
    )
    for warning in ("infra_warning", "policy_warning"):
        if summary.get(warning):
            console.print(f"[bold red]WARNING: {escape(summary[warning])}[/]", highlight=False)
    if summary.get("stopped_at"):
        stop = summary["stopped_at"]
        console.print(
            f"[bold red]stopped (--fail-fast) at {escape(stop['task'])} sample {stop['sample']}:[/] "
            f"{escape(stop['error'])}; the episodes done are kept, a rerun continues",
            highlight=False,
        )


@app.command()
def report(
    runs: list[Path] = typer.Argument(
        ..., metavar="RUN_DIR...", help="Run directories made by `gym-repost eval`, or one folder holding several."
    ),
    output: Optional[Path] = typer.Option(
        None,
        "-o",
        "--output",
        metavar="DIR",
        help="Folder to write (default: RUN_DIR/report for one run; needed for several).",
    ),
) -> None:
    """Write the run viewer: static HTML pages of a run, a comparison of several, or a folder's runs.

    Example: gym-repost report runs/demo (then open runs/demo/report.html)
    """
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
        f"({summary['episodes']} episodes, {summary['infra_errors']} infrastructure errors, "
        f"{summary['policy_errors']} policy errors)",
        highlight=False,
    )
    for warning in ("infra_warning", "policy_warning"):
        if summary.get(warning):
            console.print(f"[bold red]WARNING: {escape(summary[warning])}[/]", highlight=False)
