"""The audit's mutant runs: swapped into tests collected once, and judged in batches, vs one run each.

``gym-repost audit`` (and ``build --max-false-accept``, which the corpus uses) runs each
target's mutants against the repository's own covering tests, then submits those the tests
reject to the task. Two ways, in the same run of this script, on the same tasks:

* **swap** (what the audit does): a session child collects the covering tests once; each
  mutant runs in a child forked from it after collection, the target's code objects
  swapped for the mutant's (the first two that survive checked against runs of their own);
  the known-wrong mutants of a task are judged in one batch (``run_host_made``);
* **own runs** (what it did before, ``audit_tasks(one_run_each=True)``): each mutant's
  child runs pytest from the start, collecting the test files with the mutant on disk, and
  each known-wrong mutant is submitted in a run of its own.

Both must give the same verdict for every mutant (the repository's tests' verdict, the
test that killed it, and whether the task rewarded it). The packages' tasks are built first
(``build`` without the audit, every candidate), the suite's coverage run is made once
before timing (its installs are the same work in both), then each way audits every task
with the build half of the mutants. CPU seconds of this process and every process it
starts (a cgroup: the sandbox's workers included) are measured beside the wall clock.

Usage: ``python benchmarks/audit_speed.py [--packages inflection,pastel,cachetools,toml] [--no-record]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, checkout, machine, now
from benchmarks.corpus_pypi import CONSTRAINTS, SOURCES, CpuMeter
from gym_repost.construct import audit as audit_module
from gym_repost.construct.corpus import read_sources
from gym_repost.construct.execution import PackageInstaller, own_packages, read_constraints
from gym_repost.construct.pipeline import BuildSettings, build_function_tasks
from gym_repost.construct.testgen.trace import local_modules
from gym_repost.sandbox import get_sandbox

DEFAULT_PACKAGES = "inflection,pastel,cachetools,toml"


def _verdicts(audits: list[audit_module.TaskAudit]) -> list[Any]:
    return [
        [a.status, [(m.line, m.replacement, m.upstream, m.killed_by, m.accepted) for m in a.mutants]] for a in audits
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--packages", default=DEFAULT_PACKAGES, help="names in benchmarks/corpus_pypi.txt")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    wanted = [n.strip().lower() for n in args.packages.split(",") if n.strip()]
    pinned = {s.removeprefix("pypi:").split("==", 1)[0].lower(): s for s in read_sources(SOURCES)}
    missing = [n for n in wanted if n not in pinned]
    if missing:
        raise SystemExit(f"--packages: not in {SOURCES.name}: {', '.join(missing)}")
    pins = read_constraints(CONSTRAINTS)
    before, meter = machine(), CpuMeter()
    rows, totals = [], {"swap": [0.0, 0.0], "own runs": [0.0, 0.0]}
    with get_sandbox("local", workers=2) as sandbox:
        for name in wanted:
            built = build_function_tasks(pinned[name], BuildSettings(max_candidates=0, constraints=pins), sandbox)
            with own_packages(sandbox) as (box, _shared):
                installer = PackageInstaller(box, refuse=frozenset(local_modules(built.repo)), constraints=pins)
                audit_module.audit_tasks(box, built.tasks[:1], built.repo, part="build", install=installer.provide)
                row: dict[str, Any] = {"package": name, "tasks": len(built.tasks)}
                found = {}
                for way, one_run_each in (("own runs", True), ("swap", False)):
                    cpu, wall = meter.used(), time.perf_counter()
                    audits = audit_module.audit_tasks(
                        box, built.tasks, built.repo, part="build", install=installer.provide, one_run_each=one_run_each
                    )
                    cpu, wall = meter.used() - cpu, time.perf_counter() - wall
                    totals[way][0] += cpu
                    totals[way][1] += wall
                    found[way] = _verdicts(audits)
                    row[way] = {"cpu_s": round(cpu, 1), "wall_s": round(wall, 1)}
                    if not one_run_each:
                        row["mutants"] = sum(len(a.mutants) for a in audits)
                        row["swapped"] = sum(a.swapped for a in audits)
                        row["fallbacks"] = sorted({a.swap_fallback for a in audits if a.swap_fallback})
                row["same_verdicts"] = found["swap"] == found["own runs"]
                row["cpu_ratio"] = round(row["own runs"]["cpu_s"] / max(row["swap"]["cpu_s"], 0.1), 2)
            rows.append(row)
            print(row, flush=True)
    meter.close()
    summary = {
        "packages": len(rows),
        "tasks": sum(r["tasks"] for r in rows),
        "mutants": sum(r["mutants"] for r in rows),
        "swapped": sum(r["swapped"] for r in rows),
        "same_verdicts": all(r["same_verdicts"] for r in rows),
        "own_runs_cpu_s": round(totals["own runs"][0], 1),
        "swap_cpu_s": round(totals["swap"][0], 1),
        "cpu_ratio": round(totals["own runs"][0] / max(totals["swap"][0], 0.1), 2),
        "wall_ratio": round(totals["own runs"][1] / max(totals["swap"][1], 0.1), 2),
        "cpu_measured_by": meter.source,
    }
    print(summary)
    if not args.no_record:
        record: dict[str, Any] = {"benchmark": "audit_speed", "date": now(), "machine": before, "checkout": checkout()}
        record.update({"load_after": machine()["load_average"], "summary": summary, "rows": rows})
        print(f"recorded in {append_record('audit_speed', record)}")
    if not summary["same_verdicts"]:
        raise SystemExit("the two ways gave different verdicts")


if __name__ == "__main__":
    main()
