"""``gym-repost data``: rejection sampling, DSTC, AceCoder and test-generation training data."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from gym_repost.cli.app import data_app
from gym_repost.cli.common import (
    ENV,
    EXECUTOR,
    LIMIT,
    PYTHON,
    RAY_ADDRESS,
    SANDBOX,
    SEED,
    TASK,
    TEST_TIMEOUT,
    WORKERS,
    ExecutorKind,
    check_output_file,
    console,
    counts_table,
    fail,
    load_tasks,
    open_executor,
    parse_policy_args,
    progress_bar,
    sandbox_options,
)


class SFTFormat(StrEnum):
    """``--format`` of SFT records."""

    messages = "messages"
    prompt_completion = "prompt-completion"


def _function_tasks(tasks_path: Path, patterns: list[str], limit: Optional[int]) -> list[Any]:
    from gym_repost.task import FunctionTask

    tasks = [t for t in load_tasks(tasks_path, patterns) if isinstance(t, FunctionTask)]
    if not tasks:
        raise fail(f"{tasks_path}: no function tasks (training data is built from function tasks)")
    return tasks[:limit]


@contextmanager
def _executor(
    kind: str, address: Optional[str], workers: int, sandbox: str, options: dict[str, Any], label: str, total: int
) -> Iterator[tuple[Any, Any]]:
    """The executor of a data command (with its sandboxes) and the progress callback of its results."""
    with open_executor(kind, address, workers, sandbox, options) as executor, progress_bar() as progress:
        bar = progress.add_task(label, total=total)
        yield executor, lambda _result: progress.advance(bar)


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


def _llm_rows(found: Any) -> list[tuple[str, Any]]:
    """Token accounting rows of ``llm_totals(...)`` (none when no model ran)."""
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
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE", help="SFT records to write (JSONL)."),
    fmt: SFTFormat = typer.Option(SFTFormat.messages, "--format", help="The records' shape."),
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
    workers: int = WORKERS,
    sandbox: str = typer.Option("local", help="Sandbox backend (for --debug-failures)."),
    python: Optional[str] = PYTHON,
    env: Optional[str] = ENV,
    executor: ExecutorKind = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
) -> None:
    """SFT data from an evaluation run's passing solutions (RepoST's rejection sampling).

    Example: gym-repost data rejection runs/demo -o sft.jsonl
    """
    from gym_repost.data.records import write_jsonl
    from gym_repost.data.rejection import RepairerSpec, build_rejection, episodes_by_task, load_run

    check_output_file(output, "-o")
    config, episodes, tasks = load_run(run_dir, tasks_path)
    groups = episodes_by_task(episodes, tasks)
    spec = repair_policy or config.policy
    options = parse_policy_args(repair_policy_arg) if repair_policy else dict(config.policy_options)
    if base_url and not debug_failures:
        raise fail("--base-url applies to the repair policy of --debug-failures")
    llm = (
        {"base_url": base_url, "cache_dir": None if "cache_dir" in options else _llm_cache(output)}
        if spec.startswith("llm:")
        else {"base_url": base_url}
    )
    repairer = RepairerSpec(spec, options, repair_steps, llm) if debug_failures else None
    with open_executor(executor, ray_address, workers, sandbox, sandbox_options(workers, python, env, None)) as ex:
        with progress_bar() as progress:
            bar = progress.add_task(
                f"tasks of {run_dir.name}" + (" (debugging failures)" if repairer else ""), total=len(groups)
            )
            records, summary = build_rejection(
                groups,
                None,
                repairer=repairer,
                ground_truth=ground_truth,
                dedupe=not keep_duplicates,
                fmt=fmt.value,
                system=system,
                on_task=lambda _o: progress.advance(bar),
                executor=ex,
            )
    written = write_jsonl(records, output)
    _print_rejection(summary, config, debug_failures, spec)
    if rows := _llm_rows(summary.llm):
        console.print(counts_table(f"repair model ({spec})", rows))
    console.print(f"wrote [bold]{written}[/] SFT records ({fmt.value}) to {output}")


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
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE", help="DPO records to write (JSONL)."),
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
    samples: int = typer.Option(8, "-n", "--samples", min=1, help="J: codes and tests sampled per task."),
    old_samples: Optional[int] = typer.Option(None, "-j", hidden=True, help="Gone: -n/--samples."),
    test_timeout: float = TEST_TIMEOUT,
    task: list[str] = TASK,
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
    workers: int = WORKERS,
    sandbox: str = SANDBOX,
    python: Optional[str] = PYTHON,
    env: Optional[str] = ENV,
    executor: ExecutorKind = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
) -> None:
    """DSTC preference pairs: J codes x J tests per task, minimax selection.

    Example: gym-repost data dstc tasks/demo.jsonl -o dpo.jsonl --kto kto.jsonl
    """
    from gym_repost.data import dstc
    from gym_repost.data.records import write_jsonl

    for path, option in ((output, "-o"), (kto, "--kto"), (matrices, "--matrices")):
        check_output_file(path, option)

    if old_samples is not None:  # -j means jobs elsewhere; read silently as workers it would change the data
        raise fail(
            f"-j {old_samples}: -j was the number of samples J and is gone; "
            f"give -n {old_samples} (--samples), and -w/--workers for parallel jobs"
        )

    tasks = _function_tasks(tasks_path, task, limit)
    settings = _sampler_settings([sampler], base_url, temperature, output)[sampler]
    options = sandbox_options(workers, python, env, None)
    with _executor(executor, ray_address, workers, sandbox, options, f"DSTC on {tasks_path.name}", len(tasks)) as (
        ex,
        on_result,
    ):
        result = dstc.run(
            tasks,
            None,
            sampler=sampler,
            sampler_settings=settings,
            samples=samples,
            seed=seed,
            test_timeout=test_timeout,
            executor=ex,
            on_result=on_result,
        )
    dpo, kto_records = result.dpo_records(), result.kto_records()
    write_jsonl(dpo, output)
    if kto:
        write_jsonl(kto_records, kto)
    if matrices:
        write_jsonl(result.matrix_records(), matrices)
    t = result.totals()
    console.print(
        counts_table(
            f"DSTC ({sampler}, J={samples})",
            [
                ("tasks", t["tasks"]),
                ("with a chosen pair", t["with_chosen"]),
                ("with a rejected pair", t["with_rejected"]),
                ("DPO records", t["dpo_records"]),
                ("KTO records (desirable / undesirable)", f"{t['kto_desirable']} / {t['kto_undesirable']}"),
                ("cells: pass / fail / error / timeout", " / ".join(str(v) for v in t["cells"].values())),
                ("tests judged outside the code's process", f"{t['judged_outside']} / {t['tests']}"),
                *_llm_rows(result.llm),
            ],
        )
    )
    console.print(
        f"wrote {len(dpo)} DPO records to {output}" + (f", {len(kto_records)} KTO records to {kto}" if kto else "")
    )


@data_app.command("acecoder")
def data_acecoder(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Task file (JSONL)."),
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE", help="DPO pair records to write (JSONL)."),
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
    test_timeout: float = TEST_TIMEOUT,
    task: list[str] = TASK,
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
    workers: int = WORKERS,
    sandbox: str = SANDBOX,
    python: Optional[str] = PYTHON,
    env: Optional[str] = ENV,
    executor: ExecutorKind = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
) -> None:
    """AceCoder pairs: synthesized tests filtered by a proxy, pass rates, pair rule.

    Example: gym-repost data acecoder tasks/demo.jsonl -o pairs.jsonl
    """
    from gym_repost.data import acecoder
    from gym_repost.data.records import write_jsonl

    check_output_file(output, "-o")
    check_output_file(tests_output, "--tests-output")
    tasks = _function_tasks(tasks_path, task, limit)
    code_specs = sampler + ([] if proxy == "ground-truth" else [proxy])
    settings = _sampler_settings([test_sampler, *code_specs], base_url, temperature, output)
    options = sandbox_options(workers, python, env, None)
    label = f"AceCoder on {tasks_path.name}"
    with _executor(executor, ray_address, workers, sandbox, options, label, len(tasks)) as (ex, on_result):
        result = acecoder.run(
            tasks,
            None,
            test_sampler=test_sampler,
            samplers=sampler,
            proxy=proxy,
            sampler_settings=settings,
            n_tests=n_tests,
            samples=samples,
            min_tests=min_tests,
            strict=not non_strict,
            seed=seed,
            test_timeout=test_timeout,
            executor=ex,
            on_result=on_result,
        )
    pairs = result.pair_records()
    write_jsonl(pairs, output)
    if tests_output:
        write_jsonl(result.tests_records(), tests_output)
    t = result.totals()
    console.print(
        counts_table(
            f"AceCoder ({'non-strict' if non_strict else 'strict'} rule)",
            [
                ("questions", t["questions"]),
                (f"dropped (< {min_tests} tests after filtering)", t["dropped"]),
                ("tests proposed / kept", f"{t['tests_proposed']} / {t['tests_kept']}"),
                (
                    "tests removed by the proxy, by label",
                    ", ".join(f"{k}: {v}" for k, v in t["removed_by_label"].items()) or "-",
                ),
                ("programs (deduplicated, kept questions)", t["programs"]),
                ("questions with >= 1 pair", t["with_pairs"]),
                ("preference pairs", len(pairs)),
                *_llm_rows(result.llm),
            ],
        )
    )
    console.print(f"wrote {len(pairs)} pair records to {output}")


@data_app.command("testgen")
def data_testgen(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Test-file task file (JSONL, --kind testfile)."),
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE", help="Records to write (JSONL)."),
    generator: str = typer.Option(
        ...,
        help='llm:PROVIDER/MODEL | scripted:FILE (JSONL of {"text": reply}, each task served them from the first).',
    ),
    rounds: int = typer.Option(3, "--rounds", min=0, help="Guided repair rounds at most, per task."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="LLM endpoint (a proxy, vLLM, Ollama)."),
    temperature: Optional[float] = typer.Option(None, min=0.0, help="Sampling temperature of the model."),
    task: list[str] = TASK,
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
    workers: int = WORKERS,
    sandbox: str = SANDBOX,
    python: Optional[str] = PYTHON,
    env: Optional[str] = ENV,
    executor: ExecutorKind = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
) -> None:
    """Test-generation data (Repo-Smith): generate a test file, repair its weakest metric, compress the reasoning.

    Example: gym-repost data testgen tiny-tests.jsonl --generator scripted:replies.jsonl -o testgen.jsonl
    """
    from gym_repost.data import repo_smith
    from gym_repost.data.llm_samplers import add_llm_totals
    from gym_repost.data.records import write_jsonl

    check_output_file(output, "-o")
    tasks = [t for t in load_tasks(tasks_path, task) if t.kind == "testfile"][:limit]
    if not tasks:
        raise fail(f"{tasks_path}: no test-file tasks (build them with `gym-repost build SOURCE --kind testfile`)")
    settings = (
        {}
        if generator.startswith("scripted:")
        else {"base_url": base_url, "temperature": temperature, "cache_dir": _llm_cache(output)}
    )
    options = sandbox_options(workers, python, env, ["pytest", "coverage"])
    label = f"test generation on {tasks_path.name}"
    with _executor(executor, ray_address, workers, sandbox, options, label, len(tasks)) as (ex, on_result):
        results = repo_smith.run(
            tasks,
            None,
            generator=generator,
            generator_settings=settings,
            max_rounds=rounds,
            seed=seed,
            executor=ex,
            on_result=on_result,
        )
    write_jsonl([r.record() for r in results], output)
    t = repo_smith.testgen_totals(results)
    console.print(
        counts_table(
            f"test generation ({generator}, up to {rounds} repair rounds)",
            [
                ("tasks", t["tasks"]),
                ("passing after generation / at the end", f"{t['passing_first']} / {t['passing_final']}"),
                (
                    "mean reward after generation / at the end",
                    f"{t['mean_reward_first']:.3f} / {t['mean_reward_final']:.3f}",
                ),
                ("repair rounds (accepted)", f"{t['repair_rounds']} ({t['repairs_accepted']})"),
                ("repairs by target", ", ".join(f"{k}: {v}" for k, v in t["repairs_by_target"].items()) or "-"),
                *_llm_rows(add_llm_totals(r.llm for r in results)),
            ],
        )
    )
    console.print(f"wrote {len(results)} records to {output}")
