"""``gym-repost build``: function tasks from a repository (deterministic or LLM builder),
test-file tasks, imported benchmarks."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.table import Table

from gym_repost.cli.app import app
from gym_repost.cli.common import (
    ENV,
    EXECUTOR,
    PYTHON,
    RAY_ADDRESS,
    SANDBOX,
    SEED,
    WORKERS,
    ExecutorKind,
    check_output_file,
    console,
    counts_table,
    fail,
    open_executor,
    open_sandbox,
    parse_policy_args,
    progress_bar,
    resumable,
    sandbox_options,
    write_json,
)
from gym_repost.errors import BuildError

if TYPE_CHECKING:
    from gym_repost.construct.testfile import TestFileBuildSettings


class TaskKind(StrEnum):
    """``--kind``: what tasks to build."""

    function = "function"
    testfile = "testfile"


class Split(StrEnum):
    """``--split``: the coverage a task's tests need (train 80%, eval 100%)."""

    train = "train"
    eval = "eval"


def _is_import_source(source: str) -> bool:
    return source == "humaneval" or source.startswith("repost-eval:") or source.endswith(".toml")


def _import_tasks(source: str) -> tuple[list[Any], list[Any]]:
    from gym_repost.construct.sources import import_source

    tasks: list[Any] = []
    dropped: list[Any] = []
    with progress_bar() as progress:
        bar = progress.add_task(f"importing {source}", total=None)
        for item in import_source(source):
            (dropped if isinstance(item, BuildError) else tasks).append(item)
            progress.advance(bar)
    return tasks, dropped


def _build_from_repository(source: str, work: Any, sandbox: str, options: dict[str, Any]) -> Any:
    """``work`` (a ``construct.pipeline.RepositoryUnit``) in this process, with a progress bar."""
    with open_sandbox(sandbox, options) as sb, progress_bar() as progress:
        bar = progress.add_task(f"building {source}", total=None)

        def on_stage(name: str, count: int) -> None:
            progress.update(bar, total=count, description=f"building {source}: {count} candidates")

        return work.build(source, sb, on_candidate=lambda *_: progress.advance(bar), on_stage=on_stage)


def _keep_options(text: str) -> tuple[str, ...]:
    from gym_repost.construct.extract import KEEP_OPTIONS

    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [c for c in chosen if c not in KEEP_OPTIONS]
    if unknown:
        raise fail(f"--keep {', '.join(unknown)}: choose among {', '.join(KEEP_OPTIONS)}")
    return chosen


def _llm_work(
    spec: str, settings: Any, *, base_url: Optional[str], builder_args: list[str], log_path: Optional[Path]
) -> Any:
    """``--builder llm:PROVIDER/MODEL``: the LLM builder's unit of work over the pipeline."""
    from gym_repost.construct.builder import DeterministicBuilderSettings
    from gym_repost.construct.llm_builder import LLMBuildWork, split_builder_args
    from gym_repost.llm import llm_config

    budgets, llm_settings = split_builder_args(parse_policy_args(builder_args))
    if base_url:
        llm_settings["base_url"] = base_url
    config = llm_config(spec.removeprefix("llm:"), **llm_settings)
    deterministic = DeterministicBuilderSettings(test_executions=settings.test_executions, seed=settings.seed)
    return LLMBuildWork(config, settings, budgets, deterministic, log_path=log_path)


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
    if "audit" in stats:
        audit = stats["audit"]
        console.print(
            f"audit: {audit['false_accepts']} of {audit['known_wrong']} mutants the repository's own tests reject "
            f"were rewarded, by {audit['tasks_rewarding_a_known_wrong_mutant']} task(s) (dropped above the limit)",
            highlight=False,
        )
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
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE", help="Task file to write (JSONL)."),
    kind: TaskKind = typer.Option(
        TaskKind.function,
        help="Task kind: function, or testfile (a focal file and its test file, from a DIR, ARCHIVE or pypi: source).",
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
    split: Split = typer.Option(Split.train, help="train (branch coverage >= 80%) or eval (100%)."),
    max_candidates: int = typer.Option(
        30, min=0, help="Candidate functions (test files with --kind testfile) per repository; 0: every one."
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
    keep: str = typer.Option(
        "",
        "--keep",
        help="Candidates dropped by default to keep, comma-separated: non-library (setup.py, docs, examples, "
        "benchmarks, a top-level bin/ or scripts/), single-statement (one-line bodies with no branch and no "
        "call into the repository), duplicates (bodies found elsewhere in the repository).",
    ),
    max_false_accept: Optional[float] = typer.Option(
        None,
        min=0.0,
        max=1.0,
        help="Audit the tasks against the repository's own tests and drop those rewarding more than "
        "this share of the mutants those tests reject (0 keeps only tasks that reward none).",
    ),
    constraints: Optional[Path] = typer.Option(
        None,
        "--constraints",
        metavar="FILE",
        help="pip constraints (NAME==VERSION lines) for what the build installs: the versions of the "
        "repositories' test dependencies a corpus was first built with.",
    ),
    workers: int = WORKERS,
    seed: int = SEED,
    sandbox: str = SANDBOX,
    python: Optional[str] = PYTHON,
    env: Optional[str] = ENV,
    stats_json: Optional[Path] = typer.Option(
        None, "--stats", metavar="FILE", help="Write the build statistics here (JSON)."
    ),
    eval_fraction: float = typer.Option(
        0.2, min=0.0, max=0.99, help="Corpus build: share of the repositories put in the eval split."
    ),
    duplicate_threshold: float = typer.Option(
        0.9, min=0.0, max=1.0, help="Corpus build: token 5-gram Jaccard similarity at which a target is a duplicate."
    ),
    chunk: int = typer.Option(
        0,
        min=0,
        metavar="N",
        help="Corpus build: a repository of more than N candidates is built as units of N each, "
        "so that a long package does not hold back the end of the corpus on a cluster (0: a repository per unit).",
    ),
    executor: ExecutorKind = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
) -> None:
    """Build a task set from SOURCE (a source list .txt: a corpus of many repositories).

    Example: gym-repost build tasks/demo/repo -o my-tasks.jsonl (add --kind testfile for test-file tasks)
    """
    from gym_repost.task import save_tasks

    check_output_file(output, "-o")
    check_output_file(stats_json, "--stats")
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
    if executor != "local" and _is_import_source(source):
        raise fail(f"--executor ray builds repositories (DIR, ARCHIVE, pypi:NAME, a source list), not {source}")
    if constraints is not None and _is_import_source(source):
        raise fail("--constraints holds what a build of a repository installs (DIR, ARCHIVE, pypi:NAME)")
    from gym_repost.construct.execution import read_constraints

    try:
        pins = read_constraints(constraints) if constraints is not None else ()
    except BuildError as exc:
        raise fail(f"--constraints {exc}") from None
    if kind == "testfile":
        if _is_import_source(source):
            raise fail(f"--kind testfile needs a repository (DIR, ARCHIVE or pypi:NAME), not {source}")
        from gym_repost.construct.testfile import TestFileBuildSettings

        _build_testfile(
            source,
            output,
            settings=TestFileBuildSettings(max_mutants=max_mutants, constraints=pins),
            licenses=licenses,
            max_pairs=max_candidates,
            seed=seed,
            workers=workers,
            sandbox=sandbox,
            options=sandbox_options(workers, python, env, ["pytest", "coverage"]),
            stats_json=stats_json,
            executor=executor,
            ray_address=ray_address,
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
    from gym_repost.construct.corpus import is_source_list
    from gym_repost.construct.pipeline import BuildSettings, BuildWork

    settings = BuildSettings(
        split=split.value,
        max_candidates=max_candidates,
        seed=seed,
        licenses=licenses,
        workers=workers,
        trace=trace,
        test_executions=test_executions,
        min_kill_rate=min_kill_rate,
        mutants=mutants,
        only=tuple(only),
        keep=_keep_options(keep),
        max_false_accept=max_false_accept,
        constraints=pins,
    )
    options = sandbox_options(workers, python, env, None)
    log_path = output.with_name(output.name + ".llm.jsonl")
    if is_source_list(source):
        if builder != "deterministic":
            raise fail("a corpus build (a source list) uses the deterministic builder")
        with open_executor(executor, ray_address, workers, sandbox, options) as ex:
            _build_corpus(source, output, settings, ex, eval_fraction, duplicate_threshold, chunk)
        return
    work: Any = BuildWork(settings)
    if builder.startswith("llm:"):
        # on Ray the exchanges come back with the result, and this process writes the log
        written_here = log_path if executor == "local" else None
        work = _llm_work(builder, settings, base_url=base_url, builder_args=builder_arg, log_path=written_here)
        log_path.unlink(missing_ok=True)
    if executor != "local":
        with open_executor(executor, ray_address, workers, sandbox, options) as ex:
            result = ex.map(work, [source])[0]
        if result.llm_log:
            from gym_repost.construct.llm_builder import ExchangeLog

            ExchangeLog(log_path).extend(result.llm_log)
    else:
        result = _build_from_repository(source, work, sandbox, options)
    written = save_tasks(result.tasks, output)
    _print_build(result)
    console.print(f"wrote [bold]{written}[/] tasks to {output}")
    if builder.startswith("llm:"):
        console.print(f"every LLM exchange of this build: {log_path}", highlight=False)
    if stats_json:
        write_json(stats_json, result.statistics())


def _units_text(sources: list[str], units: list[Any]) -> str:
    if len(units) == len(sources):
        return f"corpus of {len(sources)} repositories"
    return f"corpus of {len(sources)} repositories in {len(units)} units"


def _build_corpus(
    source: str,
    output: Path,
    settings: Any,
    executor: Any,
    eval_fraction: float,
    duplicate_threshold: float,
    chunk: int = 0,
) -> None:
    from gym_repost.construct.corpus import build_corpus, corpus_paths, read_sources

    sources = read_sources(source)
    with progress_bar() as progress:
        bar = progress.add_task(f"corpus of {len(sources)} repositories", total=len(sources))
        resumable("every finished repository" if not chunk else "every finished unit")
        result = build_corpus(
            sources,
            output,
            settings,
            executor,
            eval_fraction=eval_fraction,
            duplicate_threshold=duplicate_threshold,
            on_repository=lambda _r: progress.advance(bar),
            chunk_size=chunk,
            on_units=lambda units: progress.update(bar, total=len(units), description=_units_text(sources, units)),
        )
    table = Table("repository", "split", "candidates", "tasks", "dup.", "yield", "cov.", "kill", "s", "error")
    for row in result.rows():
        table.add_row(
            row["repository"],
            row["split"] or "-",
            str(row["candidates"]),
            str(row["tasks"]),
            str(row["near_duplicates"]),
            _fmt_stat(row["yield"]),
            _fmt_stat(row["avg_branch_coverage"]),
            _fmt_stat(row["median_kill_rate"]),
            f"{row['seconds']:.0f}",
            row["error"] or "",
        )
    console.print(table)
    totals = [(k, f"{v:.3f}" if isinstance(v, float) else str(v)) for k, v in result.totals().items()]
    console.print(counts_table("corpus totals (RepoST Table 2)", totals))
    paths = corpus_paths(output)
    if result.resumed:
        what = "repositories" if not chunk else "units of work"
        console.print(f"{result.resumed} {what} were already built (resumed from {paths['state']})")
    console.print(
        f"wrote [bold]{len(result.tasks())}[/] tasks to {output} (train: {paths['train']}, eval: {paths['eval']}); "
        f"statistics: {paths['stats_md']}",
        highlight=False,
    )


def _build_testfile(
    source: str,
    output: Path,
    *,
    settings: TestFileBuildSettings,
    licenses: str,
    max_pairs: int,
    seed: int,
    workers: int,
    sandbox: str,
    options: dict[str, Any],
    stats_json: Optional[Path],
    executor: str,
    ray_address: Optional[str],
) -> None:
    from gym_repost.construct.ingest import ingest
    from gym_repost.construct.testfile import build_testfile_tasks, mining_summary
    from gym_repost.task import save_tasks

    repo = ingest(source, licenses=licenses)
    with open_executor(executor, ray_address, workers, sandbox, options) as ex, progress_bar() as progress:
        bar = progress.add_task(f"test files of {repo.name}", total=None)
        tasks, drops = build_testfile_tasks(
            repo,
            max_pairs=max_pairs,
            seed=seed,
            settings=settings,
            on_pair=lambda _outcome: progress.advance(bar),
            executor=ex,
        )
    written = save_tasks(tasks, output)
    summary = mining_summary(repo, tasks, drops)
    _print_testfile_build(repo, tasks, summary)
    console.print(f"wrote [bold]{written}[/] test-file tasks to {output}")
    if stats_json:
        summary["references"] = {t.name: t.reference.model_dump() for t in tasks}
        write_json(stats_json, summary)


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
