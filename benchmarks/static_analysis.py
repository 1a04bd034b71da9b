"""Static analysis of a large real code base: extraction and dependency slicing.

The workload is a temporary copy of packages of the running interpreter's standard
library (``email``, ``json``, ``http``, ``xml``, ``logging``, ``asyncio`` by default: about
45,000 lines, offline and the same on every machine with the same Python), read into a
:class:`SourceRepository`. Timed, in one run:

* ``baseline``: plain :func:`ast.parse` of every file (what any static analysis pays);
* ``index``: :func:`build_index` (``ast`` parse, units, bindings, import order);
* ``extract``: :func:`extract_candidates` without a cap, given the index (tree-sitter
  parse, queries, filters; the index's ``ast`` parse serves as the syntax check);
* ``slices``: :func:`slice_dependencies` for every candidate, the loop inside one
  ``garbage_collector_paused()`` block (``slices_without_batch_pause``: one run without
  it, each call pausing the collector only for itself).

The baseline runs with the garbage collector on, as plain code would;
``baseline_ast_parse_gc_paused`` shows what pausing it alone is worth.

The target is extraction plus dependency analysis (extract + index + slices) within 5 s.
Each stage runs ``--repeat`` times; the record holds the median and the minimum of each,
wall clock and CPU time (the machine is shared: the minimum shows the cost without
interference, the CPU time the work done). ``--survey DIR...`` also builds the sandboxed
modules of other source trees (unpacked sdists) and, with ``--sandbox``, runs each one
in the local sandbox, counting what fails and why.

Usage::

    python benchmarks/static_analysis.py [--repeat 5] [--packages email json ...]
        [--survey /tmp/sdx/* [--sandbox]] [--no-record]
"""

from __future__ import annotations

import argparse
import ast
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, machine, now
from gym_repost.construct.dependencies import build_index, slice_dependencies
from gym_repost.construct.extract import extract_candidates, garbage_collector_paused
from gym_repost.construct.sandboxing import sandbox_script
from gym_repost.construct.stages import DependencySlice, Drop, SourceRepository

PACKAGES = ("email", "json", "http", "xml", "logging", "asyncio")
BUDGET_SECONDS = 5.0


def read_tree(root: Path, name: str) -> SourceRepository:
    """Every ``.py`` file under ``root`` as a repository."""
    files = {
        str(p.relative_to(root)): p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.rglob("*.py"))
    }
    return SourceRepository(name=name, version=None, source=str(root), root=root, files=files)


def stdlib_copy(packages: tuple[str, ...], into: Path) -> SourceRepository:
    """A copy of standard library packages (tests and test data left out)."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    for package in packages:
        shutil.copytree(lib / package, into / package, ignore=shutil.ignore_patterns("__pycache__", "test*"))
    return read_tree(into, f"stdlib-{sys.version.split()[0]}:{'+'.join(packages)}")


def _summary(wall: list[float], cpu: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(wall), "min_s": min(wall), "cpu_median_s": statistics.median(cpu)}


def timed(step: Callable[[], Any], repeat: int) -> tuple[Any, dict[str, float]]:
    """The step's last result, and the median and minimum of its wall-clock and CPU seconds."""
    wall, cpu, result = [], [], None
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = step()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return result, _summary(wall, cpu)


def pipeline(repo: SourceRepository, repeat: int) -> tuple[Any, list[DependencySlice | Drop], dict[str, Any]]:
    """Index, extract (given the index) and slice, ``repeat`` times from scratch (a fresh
    index each time: its caches are part of the work); the last results and the times."""
    stages = ("index", "extract", "slices")
    wall: dict[str, list[float]] = {s: [] for s in stages}
    cpu: dict[str, list[float]] = {s: [] for s in stages}
    extracted: Any = None
    results: list[DependencySlice | Drop] = []
    for _ in range(repeat):
        marks = [(time.perf_counter(), time.process_time())]
        index = build_index(repo)
        marks.append((time.perf_counter(), time.process_time()))
        extracted = extract_candidates(repo, max_candidates=1_000_000, index=index)
        marks.append((time.perf_counter(), time.process_time()))
        with garbage_collector_paused():  # once for the batch, as the docstring recommends
            results = [slice_dependencies(index, c) for c in extracted[0]]
        marks.append((time.perf_counter(), time.process_time()))
        for i, stage in enumerate(stages):
            wall[stage].append(marks[i + 1][0] - marks[i][0])
            cpu[stage].append(marks[i + 1][1] - marks[i][1])
    totals = [sum(wall[s][i] for s in stages) for i in range(repeat)]
    total_cpu = [sum(cpu[s][i] for s in stages) for i in range(repeat)]
    times = {s: _summary(wall[s], cpu[s]) for s in stages} | {"total": _summary(totals, total_cpu)}
    return extracted, results, times


def measure(repo: SourceRepository, repeat: int) -> dict[str, Any]:
    """Time the baseline and the three stages on ``repo``."""
    texts = [repo.files[p] for p in repo.python_files]
    _, baseline = timed(lambda: len([ast.parse(t) for t in texts]), repeat)  # trees not kept
    (candidates, drops, stats), results, times = pipeline(repo, repeat)
    total = times["total"]
    index = build_index(repo)
    _, one_by_one = timed(lambda: len([slice_dependencies(index, c) for c in candidates]), 1)
    with garbage_collector_paused():
        _, baseline_paused = timed(lambda: len([ast.parse(t) for t in texts]), repeat)
    built = [r for r in results if isinstance(r, DependencySlice)]
    return {
        "lines": sum(t.count("\n") for t in texts),
        "files": len(texts),
        "functions_seen": stats.functions_seen,
        "candidates": len(candidates),
        "extract_drops": dict(Counter(d.reason for d in drops)),
        "slices": len(built),
        "slice_drops": dict(Counter(r.reason for r in results if isinstance(r, Drop))),
        "slices_with_renames": sum(bool(s.renamed) for s in built),
        "standalone": sum(s.standalone for s in built),
        "mean_fragments": statistics.fmean(len(s.fragments) for s in built) if built else 0.0,
        "baseline_ast_parse": baseline,
        "baseline_ast_parse_gc_paused": baseline_paused,
        "slices_without_batch_pause": one_by_one,
        "index": times["index"],
        "extract": times["extract"],
        "slices_time": times["slices"],
        "total": total,
        "ratio_total_vs_ast_parse": total["median_s"] / baseline["median_s"],
        "ratio_total_vs_ast_parse_min": total["min_s"] / baseline["min_s"],
        "within_budget": total["min_s"] <= BUDGET_SECONDS,
    }


def survey(directories: list[Path], run: bool) -> dict[str, Any]:
    """Candidates, drops, slices, clashes and (with ``run``) sandbox runs per source tree."""
    sandbox = None
    if run:
        from gym_repost.sandbox import get_sandbox

        sandbox = get_sandbox("local", workers=2)
        sandbox.start()
    try:
        return {d.name: _survey_one(read_tree(d, d.name), sandbox) for d in directories}
    finally:
        if sandbox is not None:
            sandbox.close()


def _survey_one(repo: SourceRepository, sandbox: Any) -> dict[str, Any]:
    candidates, drops, stats = extract_candidates(repo, max_candidates=1_000_000)
    index = build_index(repo)
    reasons: Counter[str] = Counter(d.reason for d in drops)
    scripts, renames = [], 0
    for candidate in candidates:
        result = slice_dependencies(index, candidate)
        script = sandbox_script(result) if isinstance(result, DependencySlice) else result
        if isinstance(script, Drop):
            reasons[f"{script.stage}: {script.reason}"] += 1
            continue
        renames += bool(result.renamed)  # type: ignore[union-attr]
        scripts.append(script)
    runs: Counter[str] = Counter()
    missing: Counter[str] = Counter()
    for script in scripts if sandbox is not None else []:
        done = sandbox.run(files={"m.py": script.module}, command=["python3", "m.py"], timeout=30)
        last = (done.stderr.strip().splitlines() or [""])[-1]
        if done.returncode == 0:
            runs["ok"] += 1
        elif last.startswith("ModuleNotFoundError"):
            runs["missing third-party module"] += 1
            missing[last.split("'")[1] if "'" in last else last] += 1
        else:
            runs["error"] += 1
    return {
        "functions_seen": stats.functions_seen,
        "candidates": len(candidates),
        "scripts": len(scripts),
        "slices_with_renames": renames,
        "drops": dict(reasons),
        "runs": dict(runs),
        "missing_modules": dict(missing),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--packages", nargs="+", default=list(PACKAGES))
    parser.add_argument("--survey", nargs="*", type=Path, default=[])
    parser.add_argument("--sandbox", action="store_true", help="run the surveyed modules in the sandbox")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        repo = stdlib_copy(tuple(args.packages), Path(directory))
        figures = measure(repo, args.repeat)
    record: dict[str, Any] = {
        "benchmark": "static_analysis",
        "date": now(),
        "machine": machine(),
        "workload": repo.name,
        "repeat": args.repeat,
        **figures,
    }
    if args.survey:
        record["survey"] = survey(args.survey, args.sandbox)
    total, base = figures["total"], figures["baseline_ast_parse"]
    print(
        f"{figures['lines']} lines, {figures['files']} files: {figures['candidates']} candidates, "
        f"{figures['slices']} slices"
    )
    for stage in (
        "baseline_ast_parse",
        "baseline_ast_parse_gc_paused",
        "index",
        "extract",
        "slices_time",
        "slices_without_batch_pause",
        "total",
    ):
        t = figures[stage]
        print(f"  {stage:20s} median {t['median_s']:.2f} s  min {t['min_s']:.2f} s  cpu {t['cpu_median_s']:.2f} s")
    print(
        f"  extract + dependencies: {total['min_s']:.2f} s at best (budget {BUDGET_SECONDS} s), "
        f"{figures['ratio_total_vs_ast_parse_min']:.1f}x plain ast.parse ({base['min_s']:.2f} s)"
    )
    for name, row in record.get("survey", {}).items():
        print(f"  {name}: {row}")
    if not args.no_record:
        print("recorded in", append_record("static_analysis", record))


if __name__ == "__main__":
    main()
