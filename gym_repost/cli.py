"""The ``gym-repost`` command line.

Library code logs through ``logging``; only this module installs rich handlers and
progress bars.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gym_repost.errors import BuildError, ConfigError, GymRepostError, TaskFormatError

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Turn Python repositories into sandboxed, executable coding tasks.",
)
sandbox_app = typer.Typer(no_args_is_help=True, help="Check and clean up sandboxes.")
env_app = typer.Typer(no_args_is_help=True, help="Install evaluation environments from envs/.")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(env_app, name="env")
data_app = typer.Typer(no_args_is_help=True, help="Build training data (JSONL for TRL / HF datasets).")
app.add_typer(data_app, name="data")

console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)
logger = logging.getLogger("gym_repost")


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log details.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False)],
    )


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print an error and return the exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
    )


def _load(tasks_path: Path) -> list[Any]:
    from gym_repost.task import load_tasks

    tasks = load_tasks(tasks_path)
    for error in tasks.errors:
        err_console.print(f"[yellow]skipped:[/] {error}", highlight=False)
    if not tasks:
        raise fail(f"{tasks_path}: no usable tasks")
    return list(tasks)


def _sandbox_options(
    workers: int,
    python: Optional[str],
    env: Optional[str],
    preload: Optional[list[str]],
    tasks: Optional[list[Any]] = None,
    env_preload: str = "auto",
) -> dict[str, Any]:
    """``env_preload``: ``auto`` adds the modules of the environment's preload.txt that
    ``tasks`` import, ``none`` nothing, else a comma-separated list of modules."""
    options: dict[str, Any] = {"workers": workers}
    if env:
        options["env"] = env
    if python:
        options["python"] = python
    chosen = list(preload or [])
    if env_preload == "auto" and env and tasks is not None:
        from gym_repost.sandbox.environments import preload_for

        chosen += preload_for(env, (p for t in tasks for p in t.metadata.external_packages))
    elif env_preload not in ("auto", "none"):
        chosen += [m.strip() for m in env_preload.split(",") if m.strip()]
    if chosen:
        options["preload"] = list(dict.fromkeys(chosen))
    return options


def _backend_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``--env`` names an image for the docker backend, a host virtual environment otherwise
    (an explicit ``--python`` wins). Preloading is a warm-worker speed-up of the local
    backend; docker images have the packages installed."""
    from gym_repost.sandbox.environments import resolve_env_python

    options = dict(options)
    env = options.pop("env", None)
    if name == "docker":
        options.pop("preload", None)
        if env:
            options["env"] = env
    elif env:
        options.setdefault("python", resolve_env_python(env))
    return options


@contextmanager
def _open_sandbox(name: str, options: dict[str, Any]) -> Iterator[Any]:
    from gym_repost.sandbox import get_sandbox

    sandbox = get_sandbox(name, **_backend_options(name, options))
    sandbox.start()
    try:
        yield sandbox
    finally:
        sandbox.close()


# --------------------------------------------------------------------------- build


def _is_import_source(source: str) -> bool:
    return source == "humaneval" or source.startswith("repost-eval:") or source.endswith(".toml")


def _import_tasks(source: str) -> tuple[list[Any], list[Any]]:
    from gym_repost.construct.sources import import_source

    tasks, dropped = [], []
    with _progress() as progress:
        bar = progress.add_task(f"importing {source}", total=None)
        for item in import_source(source):
            (dropped if isinstance(item, BuildError) else tasks).append(item)
            progress.advance(bar)
    return tasks, dropped


def _build_from_repository(
    source: str, settings: Any, sandbox: str, options: dict[str, Any], policy_factory: Any = None
) -> Any:
    from gym_repost.construct.pipeline import build_function_tasks

    with _open_sandbox(sandbox, options) as sb, _progress() as progress:
        bar = progress.add_task(f"building {source}", total=None)

        def on_stage(name: str, count: int) -> None:
            progress.update(bar, total=count, description=f"building {source}: {count} candidates")

        return build_function_tasks(
            source, settings, sb, policy_factory, on_stage=on_stage, on_candidate=lambda *_: progress.advance(bar)
        )


def _build_with_llm(
    spec: str,
    source: str,
    settings: Any,
    sandbox: str,
    options: dict[str, Any],
    *,
    base_url: Optional[str],
    builder_args: list[str],
    log_path: Path,
) -> Any:
    """``--builder llm:PROVIDER/MODEL``: the LLM builder over the pipeline; every exchange logged."""
    from gym_repost.construct.builder import BuilderSettings
    from gym_repost.construct.llm_builder import LLMBuild, split_builder_args
    from gym_repost.llm import llm_config

    budgets, llm_settings = split_builder_args(_parse_policy_args(builder_args))
    if base_url:
        llm_settings["base_url"] = base_url
    config = llm_config(spec.removeprefix("llm:"), **llm_settings)
    log_path.unlink(missing_ok=True)
    with LLMBuild(
        config,
        budgets,
        log_path=log_path,
        deterministic=BuilderSettings(test_executions=settings.test_executions, seed=settings.seed),
    ) as llm:
        result = _build_from_repository(source, LLMBuild.settings_for(settings), sandbox, options, llm.policy)
        result.llm_usage = llm.usage()
    return result


def _fmt_stat(value: Any) -> str:
    if isinstance(value, float):
        return f"{100 * value:.1f}%" if value <= 1.0 else f"{value:.1f}"
    if isinstance(value, list):
        return ", ".join(value) or "none"
    return "n/a" if value is None else str(value)


def _print_build(result: Any) -> None:
    stats = result.statistics()
    table = Table(
        "statistic",
        "value",
        title=f"{result.repo.name} {result.repo.version or ''} ({result.repo.license or 'license unknown'})".strip(),
    )
    for key, value in stats["table2"].items():
        shown = (
            f"{value:.1f}"
            if isinstance(value, float) and key.startswith("avg") and "coverage" not in key
            else _fmt_stat(value)
        )
        table.add_row(key, shown)
    console.print(table)
    if stats["drops"]:
        drops = Table("stage", "reason", "count", "example", title="why candidates were dropped")
        for stage, reason, count, example in stats["drops"]:
            drops.add_row(stage, reason, str(count), example)
        console.print(drops)
    console.print("stage timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in stats["timings"].items()))
    if "llm" in stats:
        u = stats["llm"]
        cost = "cost n/a (set input_price/output_price)" if u["cost_usd"] is None else f"${u['cost_usd']:.4f}"
        console.print(
            f"LLM {u['model']}: {u['llm_calls']} calls ({u['cache_hits']} cached, {u['retries']} retries, "
            f"{u['llm_failures']} failed), {u['input_tokens']} input + {u['output_tokens']} output tokens, "
            f"{cost}",
            highlight=False,
        )
    if stats["infra_errors"]:
        console.print(
            f"[yellow]infrastructure errors (not counted as drops of the builder's making):[/] {stats['infra_errors']}",
            highlight=False,
        )
    for note in result.notes[:10]:
        console.print(f"[dim]note: {note}[/]", highlight=False)


@app.command()
def build(
    source: str = typer.Argument(
        ..., help="DIR | ARCHIVE | pypi:NAME[==VERSION] | humaneval | repost-eval:PATH | path/to/manifest.toml"
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Task file to write (JSONL)."),
    kind: str = typer.Option(
        "function",
        help="Task kind: function | testfile (a focal file and its test file, from a DIR, ARCHIVE or pypi: source).",
    ),
    builder: str = typer.Option(
        "deterministic",
        help="Construction policy: deterministic | llm:PROVIDER/MODEL "
        "(openai, anthropic, openai-compatible; the deterministic builder tries first).",
    ),
    base_url: Optional[str] = typer.Option(
        None,
        "--base-url",
        help="--builder llm:...: the model's endpoint (a proxy, "
        "vLLM http://localhost:8000/v1, Ollama http://localhost:11434/v1).",
    ),
    builder_arg: list[str] = typer.Option(
        [],
        "--builder-arg",
        help="KEY=VALUE for the LLM builder: debug_iterations, "
        "coverage_rounds, deterministic_first, or an LLM setting (temperature, "
        "max_tokens, cache_dir, input_price, output_price, timeout, ...).",
    ),
    only: list[str] = typer.Option(
        [], "--only", help="Glob on FILE::QUALNAME or QUALNAME; only matching candidates are built (repeatable)."
    ),
    split: str = typer.Option("train", help="train (branch coverage >= 80%) | eval (100%)."),
    max_candidates: int = typer.Option(
        30, min=1, help="Candidate functions (test files with --kind testfile) per repository."
    ),
    max_mutants: int = typer.Option(50, min=0, help="--kind testfile: seeded cap on mutants per focal file."),
    licenses: str = typer.Option("permissive", help="permissive | any | comma-separated SPDX ids."),
    min_kill_rate: float = typer.Option(0.5, min=0.0, max=1.0, help="Mutants the tests must kill."),
    mutants: int = typer.Option(10, min=0, help="Mutants tried per task in the quality check."),
    test_executions: int = typer.Option(
        2000,
        min=1,
        help="Runs of the target per input search (a count, not seconds: the build does not depend on machine load).",
    ),
    test_budget: Optional[float] = typer.Option(None, hidden=True, help="Replaced by --test-executions."),
    trace: bool = typer.Option(True, help="Harvest inputs by running the repository's own tests."),
    workers: int = typer.Option(2, "--workers", "-w", min=1),
    seed: int = typer.Option(0),
    sandbox: str = typer.Option("local", help="Sandbox backend."),
    python: Optional[str] = typer.Option(None, help="Interpreter inside the sandbox."),
    env: Optional[str] = typer.Option(None, help="Installed environment (see `gym-repost env`)."),
    stats_json: Optional[Path] = typer.Option(None, "--stats", help="Write the build statistics here."),
) -> None:
    """Build a task set from SOURCE."""
    from gym_repost.task import save_tasks

    if kind not in ("function", "testfile"):
        raise fail(f"--kind {kind}: choose function or testfile")
    if test_budget is not None:
        raise fail(
            "--test-budget (seconds of input search) was replaced by --test-executions N (runs of the "
            "target per search, default 2000): a count, so that what is built does not depend on "
            "machine load"
        )
    if builder != "deterministic" and not builder.startswith("llm:"):
        raise fail(f"--builder {builder}: choose deterministic or llm:PROVIDER/MODEL")
    if (base_url or builder_arg) and not builder.startswith("llm:"):
        raise fail("--base-url and --builder-arg apply to --builder llm:PROVIDER/MODEL")
    if builder.startswith("llm:") and (kind != "function" or _is_import_source(source)):
        raise fail("--builder llm builds function tasks from a repository (DIR, ARCHIVE or pypi:NAME)")
    if split not in ("train", "eval"):
        raise fail("--split must be train or eval")
    if kind == "testfile":
        if _is_import_source(source):
            raise fail(f"--kind testfile needs a repository (DIR, ARCHIVE or pypi:NAME), not {source}")
        _build_testfile(
            source,
            output,
            licenses=licenses,
            max_pairs=max_candidates,
            max_mutants=max_mutants,
            seed=seed,
            workers=workers,
            sandbox=sandbox,
            options=_sandbox_options(workers, python, env, ["pytest", "coverage"]),
            stats_json=stats_json,
        )
        return
    if _is_import_source(source):
        tasks, dropped = _import_tasks(source)
        written = save_tasks(tasks, output)
        console.print(f"wrote [bold]{written}[/] tasks to {output}")
        if dropped:
            table = Table("reason", title=f"{len(dropped)} dropped")
            for error in dropped:
                table.add_row(str(error))
            console.print(table)
        return
    from gym_repost.construct.pipeline import BuildSettings

    settings = BuildSettings(
        split=split,
        max_candidates=max_candidates,
        seed=seed,
        licenses=licenses,
        workers=workers,
        trace=trace,
        test_executions=test_executions,
        min_kill_rate=min_kill_rate,
        mutants=mutants,
        only=tuple(only),
    )
    options = _sandbox_options(workers, python, env, None)
    log_path = output.with_name(output.name + ".llm.jsonl")
    if builder.startswith("llm:"):
        result = _build_with_llm(
            builder, source, settings, sandbox, options, base_url=base_url, builder_args=builder_arg, log_path=log_path
        )
    else:
        result = _build_from_repository(source, settings, sandbox, options)
    written = save_tasks(result.tasks, output)
    _print_build(result)
    console.print(f"wrote [bold]{written}[/] tasks to {output}")
    if builder.startswith("llm:"):
        console.print(f"every LLM exchange of this build: {log_path}", highlight=False)
    if stats_json:
        stats_json.write_text(json.dumps(result.statistics(), indent=2), encoding="utf-8")


def _build_testfile(
    source: str,
    output: Path,
    *,
    licenses: str,
    max_pairs: int,
    max_mutants: int,
    seed: int,
    workers: int,
    sandbox: str,
    options: dict[str, Any],
    stats_json: Optional[Path],
) -> None:
    from gym_repost.construct.ingest import ingest
    from gym_repost.construct.testfile import TestFileBuildSettings, build_testfile_tasks, mining_summary
    from gym_repost.task import save_tasks

    repo = ingest(source, licenses=licenses)
    with _open_sandbox(sandbox, options) as sb, _progress() as progress:
        bar = progress.add_task(f"test files of {repo.name}", total=None)
        tasks, drops = build_testfile_tasks(
            repo,
            sb,
            max_pairs=max_pairs,
            seed=seed,
            workers=workers,
            settings=TestFileBuildSettings(max_mutants=max_mutants),
            on_pair=lambda _outcome: progress.advance(bar),
        )
    written = save_tasks(tasks, output)
    summary = mining_summary(repo, tasks, drops)
    _print_testfile_build(repo, tasks, summary)
    console.print(f"wrote [bold]{written}[/] test-file tasks to {output}")
    if stats_json:
        summary["references"] = {t.name: t.reference.model_dump() for t in tasks}
        stats_json.write_text(json.dumps(summary, indent=2), encoding="utf-8")


def _print_testfile_build(repo: Any, tasks: list[Any], summary: dict[str, Any]) -> None:
    def pct(v: Optional[float]) -> str:
        return "n/a" if v is None else f"{100 * v:.0f}%"

    console.print(
        f"{repo.name} {repo.version or ''}: {summary['test_files']} test files, {summary['pairs']} "
        f"paired with a focal file, {summary['pairs_measured']} measured, {summary['kept']} kept"
    )
    table = Table(
        "test file",
        "focal file",
        "tests",
        "lines",
        "branches",
        "mutation (95% interval)",
        title="ground truth of each kept task",
    )
    for t in tasks:
        r = t.reference
        table.add_row(
            t.evaluation.test_path,
            t.evaluation.focal_file,
            str(r.tests),
            pct(r.line_coverage),
            pct(r.branch_coverage),
            f"{pct(r.mutation_score)} ({pct(r.mutation_ci_low)}-"
            f"{pct(r.mutation_ci_high)}, {r.mutants_total} of {r.mutants_population})",
        )
    console.print(table)
    if summary["drops"]:
        drops = Table("stage", "reason", "count", "example", title="why test files were dropped")
        for d in summary["drops"]:
            drops.add_row(d["stage"], d["reason"], str(d["count"]), d["example"])
        console.print(drops)


# --------------------------------------------------------------------------- validate


def _validation_table(results: list[Any]) -> Table:
    table = Table(title="validation per task")
    table.add_column("task", no_wrap=True)
    for col in ("ground truth", "do-nothing", "mutants killed", "branch cov."):
        table.add_column(col, no_wrap=True)
    table.add_column("cause", overflow="fold")
    for r in results:
        killed = f"{r.mutants.killed + r.mutants.timeouts}/{r.mutants.total}" if r.mutants and r.mutants.total else "-"
        do_nothing = "-" if r.do_nothing is None else ("[red]ACCEPTED[/]" if r.accepts_do_nothing else "rejected")
        cov = "-" if r.coverage is None else f"{100 * r.coverage.branch_coverage:.0f}% ({r.coverage.branches})"
        verdict = ("[green]pass[/]" if r.passed else "[red]FAIL[/]") + (
            " [yellow](nondeterministic)[/]" if r.nondeterministic else ""
        )
        table.add_row(r.task_name, verdict, do_nothing, killed, cov, r.cause or "; ".join(r.nondeterministic[:2]))
    return table


def _validation_totals(results: list[Any]) -> dict[str, Any]:
    passed = [r for r in results if r.passed]
    killed = sum(r.mutants.killed + r.mutants.timeouts for r in passed if r.mutants)
    total = sum(r.mutants.total for r in passed if r.mutants)
    covs = [r.coverage.branch_coverage for r in passed if r.coverage is not None]
    return {
        "tasks": len(results),
        "ground_truth_passed": len(passed),
        "ground_truth_failed": [{"task": r.task_name, "cause": r.cause} for r in results if not r.passed],
        "accepts_do_nothing": [r.task_name for r in passed if r.accepts_do_nothing],
        "nondeterministic": [r.task_name for r in passed if r.nondeterministic],
        "verdict_modes": {mode: sum(r.verdict_mode == mode for r in passed) for mode in ("inputs", "driver")},
        "mutants_killed": killed,
        "mutants_total": total,
        "mutant_kill_rate": killed / total if total else None,
        "mean_branch_coverage": sum(covs) / len(covs) if covs else None,
    }


def _validation_record(r: Any) -> dict[str, Any]:
    return {
        "task_id": r.task_id,
        "task": r.task_name,
        "ground_truth_passed": r.passed,
        "cause": r.cause,
        "accepts_do_nothing": r.accepts_do_nothing,
        "verdict_mode": r.verdict_mode,
        "nondeterministic": r.nondeterministic,
        "mutants_killed": r.mutants.killed + r.mutants.timeouts if r.mutants else None,
        "mutant_timeouts": r.mutants.timeouts if r.mutants else None,
        "mutants_total": r.mutants.total if r.mutants else None,
        "surviving_mutants": [vars(s) for s in r.surviving],
        "branch_coverage": r.coverage.branch_coverage if r.coverage else None,
        "branches": r.coverage.branches if r.coverage else None,
    }


@app.command()
def validate(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Task file (JSONL)."),
    mutants: int = typer.Option(10, help="Mutants of the ground truth tried per task."),
    coverage: bool = typer.Option(False, "--coverage", help="Also measure branch coverage."),
    workers: int = typer.Option(2, "--workers", "-w", min=1),
    sandbox: str = typer.Option("local", help="Sandbox backend."),
    python: Optional[str] = typer.Option(None, help="Interpreter inside the sandbox."),
    env: Optional[str] = typer.Option(None, help="Installed environment (see `gym-repost env`)."),
    preload: str = typer.Option(
        "auto",
        help="Modules warm workers import ahead of runs: auto (those of "
        "the --env's preload.txt the tasks import), none, or MOD,MOD,...",
    ),
    seed: int = typer.Option(0, help="Seed of the mutant sample."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write per-task results here."),
) -> None:
    """Check that each ground truth passes and that the tests reject wrong code."""
    from gym_repost.harness.validation import validate_task

    tasks = _load(tasks_path)
    testfile = [t for t in tasks if t.kind == "testfile"]
    if testfile:  # their ground truth was run and measured when built; `eval --policy oracle` re-runs it
        err_console.print(
            f"[yellow]skipped {len(testfile)} test-file task(s):[/] validate checks function tasks; "
            f"use `gym-repost eval {tasks_path} --policy oracle` (and mutant) for test-file tasks"
        )
        tasks = [t for t in tasks if t.kind != "testfile"]
        if not tasks:
            raise typer.Exit(0)
    options = _sandbox_options(workers, python, env, None, tasks, preload)
    with _open_sandbox(sandbox, options) as sb, _progress() as progress:
        bar = progress.add_task("validating", total=len(tasks))

        def one(task: Any) -> Any:
            result = validate_task(sb, task, mutants=mutants, seed=seed, coverage=coverage)
            progress.advance(bar)
            return result

        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(one, tasks))
    console.print(_validation_table(results))
    totals = _validation_totals(results)
    _print_validation_totals(totals)
    if json_out:
        json_out.write_text(
            json.dumps({"totals": totals, "tasks": [_validation_record(r) for r in results]}, indent=2),
            encoding="utf-8",
        )
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
    flagged = totals["accepts_do_nothing"]
    console.print(
        f"tests that accept a do-nothing candidate: [bold]{len(flagged)}[/]"
        + (": " + ", ".join(flagged) if flagged else "")
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


# --------------------------------------------------------------------------- eval / report


def _parse_policy_args(pairs: list[str]) -> dict[str, Any]:
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
) -> None:
    """Run a policy on every task (n samples each) and score it."""
    from gym_repost.evaluate import RunConfig, RunDir, evaluate
    from gym_repost.evaluate.runner import tasks_digest
    from gym_repost.policy import load_policy

    tasks = _load(tasks_path)
    options = _parse_policy_args(policy_arg)
    factory = load_policy(policy, **options, **_llm_options(policy, base_url, output, options))
    testfile = any(t.kind == "testfile" for t in tasks)  # scored with pytest and coverage: preload them
    sandbox_options = _sandbox_options(
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
        sandbox_options={k: v for k, v in sandbox_options.items() if k != "workers"},
    )
    run_dir = RunDir(output)
    with run_dir.writer_lock(), _open_sandbox(sandbox, sandbox_options) as sb, _progress() as progress:
        bar = progress.add_task(f"{policy} on {tasks_path.name}", total=len(tasks) * n)
        progress.advance(bar, len(run_dir.finished() & {(t.id, s) for t in tasks for s in range(n)}))
        summary = evaluate(tasks, factory, config, run_dir, sb, on_episode=lambda _episode: progress.advance(bar))
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


# --------------------------------------------------------------------------- data


def _function_tasks(tasks_path: Path, limit: Optional[int]) -> list[Any]:
    from gym_repost.task import FunctionTask

    tasks = [t for t in _load(tasks_path) if isinstance(t, FunctionTask)]
    if not tasks:
        raise fail(f"{tasks_path}: no function tasks (training data is built from function tasks)")
    return tasks[:limit]


def _over_tasks(tasks: list[Any], work: Any, workers: int, label: str) -> list[Any]:
    """``work(task)`` for every task, ``workers`` at once, in task order, with a progress bar."""
    with _progress() as progress:
        bar = progress.add_task(label, total=len(tasks))

        def one(task: Any) -> Any:
            result = work(task)
            progress.advance(bar)
            return result

        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, tasks))


def _counts_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("")
    table.add_column("count", justify="right")
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def _llm_cache(output: Path) -> Path:
    """The response cache of a data command's model calls: next to its output."""
    return output.parent / f"{output.stem}-llm-cache"


def _sampler_settings(
    specs: list[str], base_url: Optional[str], temperature: Optional[float], output: Path
) -> dict[str, dict[str, Any]]:
    """The model settings of each sampler spec: none for the deterministic one, which runs no model."""
    given = {k: v for k, v in {"base_url": base_url, "temperature": temperature}.items() if v is not None}
    if given and all(spec == "deterministic" for spec in specs):
        raise fail("--base-url and --temperature apply to llm:PROVIDER/MODEL samplers")
    return {
        spec: {}
        if spec == "deterministic"
        else {**given, **({"cache_dir": _llm_cache(output)} if spec.startswith("llm:") else {})}
        for spec in specs
    }


def _llm_rows(samplers: list[Any]) -> list[tuple[str, Any]]:
    """Token accounting rows for the LLM samplers among ``samplers`` (none without one)."""
    from gym_repost.data.llm_samplers import llm_totals

    found = llm_totals(samplers)
    if found is None:
        return []
    t, counts = found
    rows: list[tuple[str, Any]] = [
        ("LLM calls (cache hits)", f"{t.calls} ({t.cache_hits})"),
        ("LLM retries / failed calls", f"{t.retries} / {t.failures}"),
        ("LLM tokens in / out", f"{t.usage.input_tokens} / {t.usage.output_tokens}"),
    ]
    if t.cost is not None:
        rows.append(("LLM cost (USD)", f"{t.cost:.4f}"))
    rows += [(what.replace("_", " "), n) for what, n in sorted(counts.items())]
    return rows


@data_app.command("rejection")
def data_rejection(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory made by `gym-repost eval`."),
    output: Path = typer.Option(..., "-o", "--output", help="SFT records to write (JSONL)."),
    fmt: str = typer.Option("messages", "--format", help="messages | prompt-completion"),
    ground_truth: bool = typer.Option(False, "--ground-truth", help="Add each task's ground truth too."),
    debug_failures: bool = typer.Option(
        False, "--debug-failures", help="Repair failed solutions from their test report; add those that pass."
    ),
    repair_policy: Optional[str] = typer.Option(None, help="Policy that repairs (default: the run's own policy)."),
    repair_policy_arg: list[str] = typer.Option([], "--repair-policy-arg", help="KEY=VALUE for the repair policy."),
    repair_steps: int = typer.Option(30, min=1, help="Step budget of one repair episode."),
    base_url: Optional[str] = typer.Option(
        None,
        "--base-url",
        help="LLM endpoint of an llm: repair policy (a proxy, "
        "vLLM http://localhost:8000/v1, Ollama http://localhost:11434/v1).",
    ),
    tasks_path: Optional[Path] = typer.Option(
        None, "--tasks", help="The run's task file, if config.json's path does not resolve from here."
    ),
    system: Optional[str] = typer.Option(None, help="System message (or prompt prefix) for every record."),
    keep_duplicates: bool = typer.Option(False, "--keep-duplicates", help="Keep equal solutions of a task."),
    workers: int = typer.Option(2, "--workers", "-w", min=1),
    sandbox: str = typer.Option("local", help="Sandbox backend (for --debug-failures)."),
    python: Optional[str] = typer.Option(None, help="Interpreter inside the sandbox."),
    env: Optional[str] = typer.Option(None, help="Installed environment (see `gym-repost env`)."),
) -> None:
    """SFT data from an evaluation run's passing solutions (RepoST's rejection sampling)."""
    from gym_repost.data.llm_samplers import close_samplers
    from gym_repost.data.records import write_jsonl
    from gym_repost.data.rejection import build_rejection, episodes_by_task, load_repairer, load_run

    if fmt not in ("messages", "prompt-completion"):
        raise fail("--format must be messages or prompt-completion")
    config, episodes, tasks = load_run(run_dir, tasks_path)
    groups = episodes_by_task(episodes, tasks)
    spec = repair_policy or config.policy
    options = _parse_policy_args(repair_policy_arg) if repair_policy else dict(config.policy_options)
    if base_url and not debug_failures:
        raise fail("--base-url applies to the repair policy of --debug-failures")
    llm = (
        {"base_url": base_url, "cache_dir": None if "cache_dir" in options else _llm_cache(output)}
        if spec.startswith("llm:")
        else {"base_url": base_url}
    )
    with _open_sandbox(sandbox, _sandbox_options(workers, python, env, None)) as sb, _progress() as progress:
        repairer = load_repairer(spec, options, sb, max_steps=repair_steps, **llm) if debug_failures else None
        bar = progress.add_task(
            f"tasks of {run_dir.name}" + (" (debugging failures)" if repairer else ""), total=len(groups)
        )
        try:
            records, summary = build_rejection(
                groups,
                sb,
                repairer=repairer,
                ground_truth=ground_truth,
                dedupe=not keep_duplicates,
                fmt=fmt,  # type: ignore[arg-type]
                system=system,
                workers=workers,
                on_task=lambda _o: progress.advance(bar),
            )
        finally:
            close_samplers([repairer])
    written = write_jsonl(records, output)
    _print_rejection(summary, config, debug_failures, spec)
    if rows := _llm_rows([repairer]):
        console.print(_counts_table(f"repair model ({spec})", rows))
    console.print(f"wrote [bold]{written}[/] SFT records ({fmt}) to {output}")


def _print_rejection(s: Any, config: Any, debugged: bool, spec: str) -> None:
    def share(k: int) -> str:
        return f"{k}/{s.tasks} ({100 * k / s.tasks:.1f}%)" if s.tasks else "0/0"

    table = Table(title=f"rejection sampling: policy {config.policy}, n={config.n}", title_justify="left")
    for col in ("", "tasks with >= 1 passing solution", "distinct solutions"):
        table.add_column(col)
    table.add_row("before debugging", share(s.solved_before), str(s.passing_samples))
    if debugged:
        table.add_row(f"after debugging ({spec})", share(s.solved_after), str(s.passing_samples + s.repaired_solutions))
    console.print(table)
    if debugged:
        console.print(
            f"failed samples: {s.failed_samples}; repair attempts: {s.repair_attempts}; "
            f"repaired and passing: {s.repaired}; repairs that crashed: {s.repair_errors}"
        )
    if s.ground_truth:
        console.print(f"ground truth added for {s.ground_truth} tasks")
    if s.infra_errors:
        console.print(f"[yellow]episodes with infrastructure errors (skipped): {s.infra_errors}[/]")


@data_app.command("dstc")
def data_dstc(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Task file (JSONL)."),
    output: Path = typer.Option(..., "-o", "--output", help="DPO records to write (JSONL)."),
    kto: Optional[Path] = typer.Option(None, "--kto", help="Also write KTO records here (JSONL)."),
    matrices: Optional[Path] = typer.Option(
        None,
        "--matrices",
        help="Also write each task's samples, execution matrix (with outcomes) and selection here (JSONL).",
    ),
    sampler: str = typer.Option(
        "deterministic", help="Code and test sampler: deterministic (offline) | llm:PROVIDER/MODEL | KIND:ARG."
    ),
    base_url: Optional[str] = typer.Option(
        None,
        "--base-url",
        help="LLM endpoint of an llm: sampler (a proxy, "
        "vLLM http://localhost:8000/v1, Ollama http://localhost:11434/v1).",
    ),
    temperature: Optional[float] = typer.Option(None, min=0.0, help="Sampling temperature of an llm: sampler."),
    samples: int = typer.Option(8, "-j", "--samples", min=1, help="J: codes and tests sampled per task."),
    test_timeout: float = typer.Option(2.0, help="Seconds per test (script loading included)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N tasks."),
    seed: int = typer.Option(0),
    workers: int = typer.Option(2, "--workers", "-w", min=1),
    sandbox: str = typer.Option("local", help="Sandbox backend."),
    python: Optional[str] = typer.Option(None, help="Interpreter inside the sandbox."),
    env: Optional[str] = typer.Option(None, help="Installed environment (see `gym-repost env`)."),
) -> None:
    """DSTC preference pairs: J codes x J tests per task, minimax selection."""
    from gym_repost.data.dstc import run_dstc_task
    from gym_repost.data.llm_samplers import close_samplers
    from gym_repost.data.records import write_jsonl
    from gym_repost.data.samplers import load_code_sampler, load_test_sampler

    tasks = _function_tasks(tasks_path, limit)
    settings = _sampler_settings([sampler], base_url, temperature, output)[sampler]
    code_sampler = load_code_sampler(sampler, **settings)
    samplers: list[Any] = [code_sampler]
    try:
        test_sampler = load_test_sampler(sampler, **settings)
        samplers.append(test_sampler)
        with _open_sandbox(sandbox, _sandbox_options(workers, python, env, None)) as sb:
            results = _over_tasks(
                tasks,
                lambda t: run_dstc_task(
                    t, code_sampler, test_sampler, sb, samples=samples, seed=seed, test_timeout=test_timeout
                ),
                workers,
                f"DSTC on {tasks_path.name}",
            )
    finally:
        close_samplers(samplers)
    dpo = [r for res in results if (r := res.dpo_record()) is not None]
    kto_records = [r for res in results for r in res.kto_records()]
    write_jsonl(dpo, output)
    if kto:
        write_jsonl(kto_records, kto)
    if matrices:
        write_jsonl([res.matrix_record() for res in results], matrices)
    cells = {"pass": 0, "fail": 0, "error": 0, "timeout": 0}
    for res in results:
        for key, value in res.execution.outcome_counts().items():
            cells[key] += value
    console.print(
        _counts_table(
            f"DSTC ({sampler}, J={samples})",
            [
                ("tasks", len(results)),
                ("with a chosen pair", sum(res.selection.chosen_test is not None for res in results)),
                ("with a rejected pair", sum(res.selection.rejected_code is not None for res in results)),
                ("DPO records", len(dpo)),
                (
                    "KTO records (desirable / undesirable)",
                    f"{sum(r['label'] for r in kto_records)} / {sum(not r['label'] for r in kto_records)}",
                ),
                ("cells: pass / fail / error / timeout", " / ".join(str(v) for v in cells.values())),
                (
                    "tests judged outside the code's process",
                    f"{sum(sum(r.execution.judged_outside) for r in results)}"
                    f" / {sum(r.execution.n_tests for r in results)}",
                ),
                *_llm_rows(samplers),
            ],
        )
    )
    console.print(
        f"wrote {len(dpo)} DPO records to {output}" + (f", {len(kto_records)} KTO records to {kto}" if kto else "")
    )


def _removed(questions: list[Any]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for q in questions:
        for label, count in q.removed_labels().items():
            totals[label] = totals.get(label, 0) + count
    return totals


@data_app.command("acecoder")
def data_acecoder(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Task file (JSONL)."),
    output: Path = typer.Option(..., "-o", "--output", help="DPO pair records to write (JSONL)."),
    tests_output: Optional[Path] = typer.Option(
        None, "--tests-output", help="Also write each question's filtered tests here (JSONL)."
    ),
    test_sampler: str = typer.Option(
        "deterministic", help="Test synthesizer: deterministic (offline) | llm:PROVIDER/MODEL | KIND:ARG."
    ),
    sampler: list[str] = typer.Option(
        ["deterministic"],
        "--sampler",
        help="A model whose programs are sampled (repeat for several): deterministic | llm:PROVIDER/MODEL | KIND:ARG.",
    ),
    proxy: str = typer.Option("ground-truth", help="Proxy solution that filters tests: ground-truth | a sampler."),
    base_url: Optional[str] = typer.Option(
        None,
        "--base-url",
        help="LLM endpoint of the llm: samplers (a proxy, "
        "vLLM http://localhost:8000/v1, Ollama http://localhost:11434/v1).",
    ),
    temperature: Optional[float] = typer.Option(None, min=0.0, help="Sampling temperature of the llm: samplers."),
    n_tests: int = typer.Option(20, "--tests", min=1, help="Tests proposed per question."),
    samples: int = typer.Option(16, "-n", "--samples", min=1, help="Programs sampled per question and model."),
    min_tests: int = typer.Option(5, min=1, help="Drop questions left with fewer tests after filtering."),
    non_strict: bool = typer.Option(
        False,
        "--non-strict",
        help="Use >= for the 0.4 gap and the 0.8 bar (AceCoder's released code) instead of the paper's >.",
    ),
    test_timeout: float = typer.Option(2.0, help="Seconds per test (script loading included)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N tasks."),
    seed: int = typer.Option(0),
    workers: int = typer.Option(2, "--workers", "-w", min=1),
    sandbox: str = typer.Option("local", help="Sandbox backend."),
    python: Optional[str] = typer.Option(None, help="Interpreter inside the sandbox."),
    env: Optional[str] = typer.Option(None, help="Installed environment (see `gym-repost env`)."),
) -> None:
    """AceCoder pairs: synthesized tests filtered by a proxy, pass rates, pair rule."""
    from gym_repost.data.acecoder import run_acecoder_task
    from gym_repost.data.llm_samplers import close_samplers
    from gym_repost.data.records import write_jsonl
    from gym_repost.data.samplers import load_code_sampler, load_test_sampler

    tasks = _function_tasks(tasks_path, limit)
    code_specs = sampler + ([] if proxy == "ground-truth" else [proxy])
    settings = _sampler_settings([test_sampler, *code_specs], base_url, temperature, output)
    samplers: list[Any] = []
    try:
        tester = load_test_sampler(test_sampler, **settings[test_sampler])
        samplers.append(tester)
        samplers += [load_code_sampler(spec, **settings[spec]) for spec in code_specs]
        models, proxy_sampler = samplers[1 : 1 + len(sampler)], (None if proxy == "ground-truth" else samplers[-1])
        with _open_sandbox(sandbox, _sandbox_options(workers, python, env, None)) as sb:
            questions = _over_tasks(
                tasks,
                lambda t: run_acecoder_task(
                    t,
                    tester,
                    models,
                    sb,
                    n_tests=n_tests,
                    samples=samples,
                    min_tests=min_tests,
                    strict=not non_strict,
                    proxy=proxy_sampler,
                    seed=seed,
                    test_timeout=test_timeout,
                ),
                workers,
                f"AceCoder on {tasks_path.name}",
            )
    finally:
        close_samplers(samplers)
    pairs = [r for q in questions for r in q.pair_records()]
    write_jsonl(pairs, output)
    if tests_output:
        write_jsonl([q.tests_record() for q in questions], tests_output)
    kept = [q for q in questions if q.dropped is None]
    console.print(
        _counts_table(
            f"AceCoder ({'non-strict' if non_strict else 'strict'} rule)",
            [
                ("questions", len(questions)),
                (f"dropped (< {min_tests} tests after filtering)", len(questions) - len(kept)),
                (
                    "tests proposed / kept",
                    f"{sum(len(q.proposed) for q in questions)} / {sum(len(q.tests) for q in questions)}",
                ),
                (
                    "tests removed by the proxy, by label",
                    ", ".join(f"{k}: {v}" for k, v in _removed(questions).items()) or "-",
                ),
                ("programs (deduplicated, kept questions)", sum(len(q.programs) for q in kept)),
                ("questions with >= 1 pair", sum(bool(q.pairs) for q in kept)),
                ("preference pairs", len(pairs)),
                *_llm_rows(samplers),
            ],
        )
    )
    console.print(f"wrote {len(pairs)} pair records to {output}")


@data_app.command("testgen")
def data_testgen(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Test-file task file (JSONL, --kind testfile)."),
    output: Path = typer.Option(..., "-o", "--output", help="Records to write (JSONL)."),
    generator: str = typer.Option(
        ..., help='llm:PROVIDER/MODEL | scripted:FILE (JSONL of {"text": reply}, served in order: use -w 1).'
    ),
    rounds: int = typer.Option(3, "--rounds", min=0, help="Guided repair rounds at most, per task."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="LLM endpoint (a proxy, vLLM, Ollama)."),
    temperature: Optional[float] = typer.Option(None, min=0.0, help="Sampling temperature of the model."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N tasks."),
    seed: int = typer.Option(0),
    workers: int = typer.Option(2, "--workers", "-w", min=1),
    sandbox: str = typer.Option("local", help="Sandbox backend."),
    python: Optional[str] = typer.Option(None, help="Interpreter inside the sandbox."),
    env: Optional[str] = typer.Option(None, help="Installed environment (see `gym-repost env`)."),
) -> None:
    """Test-generation data (Repo-Smith): generate a test file, repair its weakest metric, compress the reasoning."""
    from gym_repost.data.records import task_seed, write_jsonl
    from gym_repost.data.testgen import load_generator, synthesize_tests

    tasks = [t for t in _load(tasks_path) if t.kind == "testfile"][:limit]
    if not tasks:
        raise fail(f"{tasks_path}: no test-file tasks (build them with `gym-repost build SOURCE --kind testfile`)")
    settings = (
        {}
        if generator.startswith("scripted:")
        else {"base_url": base_url, "temperature": temperature, "cache_dir": output.parent / f"{output.stem}-llm-cache"}
    )
    model = load_generator(generator, **settings)
    try:
        with _open_sandbox(sandbox, _sandbox_options(workers, python, env, ["pytest", "coverage"])) as sb:
            results = _over_tasks(
                tasks,
                lambda t: synthesize_tests(t, model, sb, max_rounds=rounds, seed=task_seed(seed, t.id, "testgen")),
                workers,
                f"test generation on {tasks_path.name}",
            )
    finally:
        close = getattr(model, "close", None)
        if callable(close):
            close()
    write_jsonl([r.record() for r in results], output)
    repairs = [r for res in results for r in res.rounds[1:]]
    console.print(
        _counts_table(
            f"test generation ({generator}, up to {rounds} repair rounds)",
            [
                ("tasks", len(results)),
                (
                    "passing after generation / at the end",
                    f"{sum(res.rounds[0].report.passed for res in results)} / "
                    f"{sum(res.final.report.passed for res in results)}",
                ),
                (
                    "mean reward after generation / at the end",
                    f"{sum(res.rounds[0].report.reward for res in results) / len(results):.3f} / "
                    f"{sum(res.final.report.reward for res in results) / len(results):.3f}",
                ),
                ("repair rounds (accepted)", f"{len(repairs)} ({sum(r.accepted for r in repairs)})"),
                (
                    "repairs by target",
                    ", ".join(
                        f"{k.split(':')[1]}: {sum(r.kind == k for r in repairs)}"
                        for k in sorted({r.kind for r in repairs})
                    )
                    or "-",
                ),
            ],
        )
    )
    console.print(f"wrote {len(results)} records to {output}")


# --------------------------------------------------------------------------- serve


@app.command("serve")
def serve_command(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Task file (JSONL)."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port (0: a free one)."),
    max_sessions: int = typer.Option(16, min=1, help="Sessions open at once; more are refused."),
    session_timeout: float = typer.Option(600.0, min=0.001, help="Seconds before an idle session is closed."),
    sandbox: str = typer.Option("local", help="Sandbox backend: local | docker."),
    env: Optional[str] = typer.Option(None, help="Installed environment (see `gym-repost env`)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, help="Sandbox runs at once (default: CPUs)."),
    max_steps: int = typer.Option(30, min=1, help="Step budget per episode."),
    repairs: int = typer.Option(0, "--repairs", min=0, help="Repair iterations after a failing submission."),
    token_file: Optional[Path] = typer.Option(None, help="File holding the token every request must carry."),
) -> None:
    """Serve the tasks as environments over the network (OpenEnv's protocol)."""
    from gym_repost.serve import ServeConfig, read_token, require_serve_extra, serve

    token = read_token(token_file) if token_file else None
    tasks = _load(tasks_path)
    require_serve_extra()
    config = ServeConfig(
        host=host,
        port=port,
        max_sessions=max_sessions,
        session_timeout=session_timeout,
        max_steps=max_steps,
        max_submissions=repairs + 1,
        token=token,
    )
    preload = ["pytest", "coverage"] if any(t.kind == "testfile" for t in tasks) else None
    options = _sandbox_options(workers or min(max_sessions, os.cpu_count() or 1), None, env, preload, tasks)

    def ready(url: str) -> None:
        auth = ", token required" if token else ""
        console.print(
            f"serving {len(tasks)} task(s) from {tasks_path} on {url} (OpenEnv: GenericEnvClient(base_url=...)); "
            f"{max_sessions} session(s) at most{auth}; Ctrl-C or SIGTERM stops",
            highlight=False,
        )
        sys.stdout.flush()  # a supervisor reading the URL from a pipe sees it now

    with _open_sandbox(sandbox, options) as sb:
        serve(tasks, sb, config, on_ready=ready)


# --------------------------------------------------------------------------- sandbox / env


@sandbox_app.command("check")
def sandbox_check(
    sandbox: str = typer.Option("local", help="Backend to check."),
    python: Optional[str] = typer.Option(None, help="Interpreter inside the sandbox."),
) -> None:
    """Run the sandbox conformance suite against a backend."""
    from gym_repost.sandbox.conformance import run_conformance

    options: dict[str, Any] = {"python": python} if python else {}
    with _open_sandbox(sandbox, options) as sb:
        results = run_conformance(sb)
    table = Table(title=f"sandbox conformance: {sandbox}")
    for col in ("check", "result", "detail"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r.name, "[green]pass[/]" if r.passed else "[red]FAIL[/]", r.detail)
    console.print(table)
    failed = [r for r in results if not r.passed]
    console.print(f"{len(results) - len(failed)}/{len(results)} checks passed")
    if failed:
        raise typer.Exit(1)


@sandbox_app.command("cleanup")
def sandbox_cleanup(
    all_containers: bool = typer.Option(
        False, "--all", help="Also remove the containers of live gym-repost processes (and of other hosts)."
    ),
) -> None:
    """Remove sandbox processes, directories and containers left behind by a crashed run."""
    from gym_repost.sandbox.local import cleanup_leftovers

    report = cleanup_leftovers()
    console.print(
        f"removed {len(report.killed_pids)} leftover worker process(es) and "
        f"{len(report.removed_dirs)} directory(ies) of crashed runs"
    )
    for pid in report.killed_pids:
        console.print(f"  killed worker pid {pid}", highlight=False)
    for directory in report.removed_dirs:
        console.print(f"  removed {directory}", highlight=False)
    _cleanup_containers(all_containers)


def _cleanup_containers(all_containers: bool) -> None:
    from gym_repost.errors import MissingExtraError, SandboxUnavailableError

    try:
        from gym_repost.sandbox.docker import cleanup_containers

        containers = cleanup_containers(all_owners=all_containers)
    except (MissingExtraError, SandboxUnavailableError) as exc:
        console.print(f"docker containers: not checked ({exc})", highlight=False)
        return
    console.print(
        f"removed {len(containers.removed)} leftover docker container(s); {len(containers.kept)} of live runs kept"
    )
    for name in containers.removed:
        console.print(f"  removed container {name}", highlight=False)


@sandbox_app.command("build-image")
def sandbox_build_image(
    env: Optional[str] = typer.Option(
        None,
        "--env",
        help="Environment definition whose "
        "requirements go into the image, e.g. envs/repost-eval; "
        "default: the base set of envs/docker.",
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the image is up to date."),
    docker_host: Optional[str] = typer.Option(None, help="Docker daemon URL (default: DOCKER_HOST)."),
) -> None:
    """Build the docker sandbox's image locally (debootstrap, then pip); reused when current."""
    from gym_repost.sandbox.docker import connect
    from gym_repost.sandbox.docker_image import build_image, resolve_recipe

    recipe = resolve_recipe(env)
    client = connect(docker_host, timeout=3600)
    tag = build_image(
        client, recipe, force=force, log=lambda line: err_console.print(line, highlight=False, markup=False)
    )
    console.print(
        f"image: {tag} (recipe {recipe.recipe_hash}); use it with --sandbox docker"
        + (f" --env {recipe.env}" if recipe.env != "base" else "")
    )


@env_app.command("install")
def env_install(
    definition: Path = typer.Argument(..., help="Environment definition, e.g. envs/repost-eval."),
    target: Optional[Path] = typer.Option(None, help="Virtual environment to create."),
) -> None:
    """Create a virtual environment with the packages an environment definition lists."""
    from gym_repost.sandbox.environments import install_env

    python = install_env(definition, target)
    console.print(f"installed: {python}\nuse it with: --env {target or definition.name}")


_SIGNALS: list[int] = []
"""The signal that interrupted this process, if one did."""


def _interrupt_on_signals() -> None:
    """SIGINT and SIGTERM unwind as KeyboardInterrupt, so that sandboxes close (workers are
    killed, containers removed); a second signal exits at once."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        if _SIGNALS:
            os._exit(128 + _SIGNALS[0])
        _SIGNALS.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


def _exit_interrupted() -> None:
    """Exit with 128 + the signal (130 for Ctrl-C, 143 for SIGTERM), promptly.

    Records are written and synced as episodes finish, and the sandbox is closed by the
    time the interrupt gets here, so nothing is lost by not waiting for threads still in
    an interrupted episode (a policy stuck in a call, a hung step): they would otherwise
    hold up the interpreter's exit.
    """
    import signal

    code = 128 + (_SIGNALS[0] if _SIGNALS else signal.SIGINT)
    err_console.print("interrupted; finished work is saved (rerun the same command to continue)")
    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not busy:
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    """Entry point of the ``gym-repost`` console script."""
    _interrupt_on_signals()
    try:
        try:
            app()
        except (TaskFormatError, BuildError, ConfigError, GymRepostError) as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
            sys.exit(2)
    except KeyboardInterrupt:
        _exit_interrupted()
    except SystemExit:  # typer turns KeyboardInterrupt into exit status 130
        if not _SIGNALS:
            raise
        _exit_interrupted()


if __name__ == "__main__":
    main()
