"""A corpus build of the PyPI packages of ``benchmarks/corpus_pypi.txt`` (173 packages, each
pinned to its sdist's sha256: a lock file), every candidate of each: per-package yield,
coverage, kill rate and time, and the totals in the shape of RepoST's Table 2.
Issue 33's measurements use the 33 packages of ``benchmarks/corpus_pypi33.txt`` with
``--max-candidates 10``.

The build is the command line's (``gym-repost build benchmarks/corpus_pypi.txt -o OUT``)
through :func:`gym_repost.construct.build_corpus`; it resumes at the repository level, so
pointing ``--output`` at a build made with the same settings records it without building
again (the per-repository seconds are those of the build that made each repository).
It prints a line per unit of work as it comes back (the unit, its tasks and candidates,
and the CPU-hours and hours of the build so far, earlier calls of a resumed build included:
``STATE/cost.json``).
Writes ``benchmarks/results/LIST.stats.md`` (the table; LIST: the source list's name,
``corpus_pypi`` or ``corpus_pypi33``) and appends the machine,
the load, the rows and the totals to ``benchmarks/results/corpus_pypi.jsonl``.

``--max-false-accept X`` builds as ``build --max-false-accept X`` does (the corpus command
of the README uses 0: tasks that reward no known-wrong mutant of the build half); with
``--audit`` its kept tasks are audited again with the held-out half (the table: that
threshold only). Without it, ``--audit`` (issue 33) makes the build audit its tasks
against each package's own tests
(``--max-false-accept 1``: the ``build`` half of the mutants, nothing dropped), then every
kept task is audited again with the ``held-out`` half, mutants no build-time filter saw;
the record and ``LIST.audit.md`` give, per threshold X of ``build
--max-false-accept X`` (none, 0.1, 0), the tasks it keeps, the yield, and the held-out
false-accept figures of what it keeps, per package and in total.

Every install of the builds and of the audit is held to the pins of
``benchmarks/corpus_pypi.constraints.txt`` (``--constraints``): the versions of the
repositories' test dependencies, as the lock file pins the repositories.

Usage::

    python benchmarks/corpus_pypi.py [--output /tmp/corpus/tasks.jsonl] [--sources LIST]
        [--max-candidates 0] [--packages NAME,...] [--workers 2] [--executor local|ray] [--audit]
        [--max-false-accept X] [--chunk N] [--no-record]
    python benchmarks/corpus_pypi.py --max-false-accept 0 --audit   # the corpus, with its held-out audit
    python benchmarks/corpus_pypi.py --sources benchmarks/corpus_pypi33.txt --max-candidates 10 --audit
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS_DIR, append_record, checkout, machine, now, read_jsonl
from gym_repost.construct.audit import audit_tasks
from gym_repost.construct.corpus import (
    CorpusResult,
    CorpusState,
    RepositoryBuild,
    Unit,
    build_corpus,
    code_digest,
    corpus_paths,
    read_sources,
    settings_digest,
)
from gym_repost.construct.execution import PackageInstaller, own_packages, read_constraints
from gym_repost.construct.ingest import ingest
from gym_repost.construct.pipeline import BuildSettings
from gym_repost.construct.stats import single_statement
from gym_repost.construct.testgen.trace import local_modules
from gym_repost.executor import get_executor
from gym_repost.sandbox import get_sandbox, sandbox_config

SOURCES = Path(__file__).resolve().parent / "corpus_pypi.txt"
CONSTRAINTS = Path(__file__).resolve().parent / "corpus_pypi.constraints.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=Path("/tmp/corpus/tasks.jsonl"))
    parser.add_argument("--max-candidates", type=int, default=0, help="per package (default 0: every candidate)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--executor", default="local")
    parser.add_argument("--sources", type=Path, default=SOURCES, help="source list (default: corpus_pypi.txt)")
    parser.add_argument(
        "--packages", default="", help="comma-separated names: build only these packages of the list (a sample)"
    )
    parser.add_argument("--audit", action="store_true", help="audit the tasks (build half, then held-out half)")
    parser.add_argument(
        "--max-false-accept",
        type=float,
        default=None,
        help="build's filter, as the command line's (the corpus of README: 0); with --audit the "
        "held-out table gives this threshold only",
    )
    parser.add_argument(
        "--chunk",
        type=int,
        default=100,
        help="build a package of more candidates than this as units of that many (default 100: a killed "
        "build loses at most the units under way, and a long package does not hold back the others; 0: a "
        "package per unit)",
    )
    parser.add_argument(
        "--constraints",
        type=Path,
        default=CONSTRAINTS,
        help="pip constraints of what the builds install (default: corpus_pypi.constraints.txt; '' for none)",
    )
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    sources = read_sources(args.sources)
    if args.packages:
        wanted = {name.strip().lower() for name in args.packages.split(",") if name.strip()}
        sources = [s for s in sources if s.removeprefix("pypi:").split("==", 1)[0].lower() in wanted]
        if len(sources) != len(wanted):
            raise SystemExit(f"--packages: {len(wanted) - len(sources)} of the names are not in {args.sources}")
    threshold = args.max_false_accept
    pins = read_constraints(args.constraints) if str(args.constraints) not in ("", ".") else ()
    settings = BuildSettings(
        max_candidates=args.max_candidates,
        workers=args.workers,
        max_false_accept=threshold if threshold is not None else 1.0 if args.audit else None,
        constraints=pins,
    )
    before = machine()
    started, meter = time.perf_counter(), CpuMeter()
    ledger = CostLedger(corpus_paths(args.output)["state"] / "cost.json", settings_digest(settings), meter, started)
    sandbox = sandbox_config("local", workers=args.workers)
    progress = Progress(ledger, CorpusState(corpus_paths(args.output)["state"], settings))
    with get_executor(args.executor, workers=args.workers, sandbox=sandbox) as executor:
        result = build_corpus(
            sources,
            args.output,
            settings,
            executor,
            chunk_size=args.chunk,
            on_units=progress.plan,
            on_repository=progress.unit,
        )
    ledger.save()
    spent = ledger.totals()
    cost = _cost(result, ledger, args, spent) if ledger.complete(result.resumed) else None
    meter.close()
    totals = result.totals()
    for key, value in totals.items():
        print(f"{key}: {value}")
    thresholds = THRESHOLDS if threshold is None else (threshold,)
    audit = held_out_audit(result, args.output, args.workers, thresholds, pins) if args.audit else None
    if audit is not None:
        if not args.packages:  # a slice's audit is in its record; corpus_slices.py adds them up
            (RESULTS_DIR / f"{args.sources.stem}.audit.md").write_text(audit["markdown"], encoding="utf-8")
        print(audit["markdown"])
    if args.no_record:
        return
    installed = result.installed()
    if not args.packages:  # a sample's table stays beside its tasks; its record has the rows
        shutil.copyfile(corpus_paths(args.output)["stats_md"], RESULTS_DIR / f"{args.sources.stem}.stats.md")
        (RESULTS_DIR / f"{args.sources.stem}.installed.txt").write_text(
            "".join(f"{line}\n" for line in installed), encoding="utf-8"
        )
    record = {
        "benchmark": "corpus_pypi",
        "date": now(),
        "machine": before,
        "checkout": checkout(),
        "sources": str(args.sources.name),
        "packages": [s.removeprefix("pypi:").split(" ", 1)[0] for s in sources] if args.packages else None,
        "max_candidates": args.max_candidates,
        "max_false_accept": threshold,
        "settings_digest": settings_digest(settings),
        "code_digest": code_digest(),
        "chunk": args.chunk,
        "constraints": len(pins),
        "workers": args.workers,
        "executor": args.executor,
        "resumed_repositories": result.resumed,
        "wall_s_of_this_call": round(time.perf_counter() - started, 1),
        "totals": totals,
        "drop_reasons": result.drop_reasons(),
        "installed": installed,
        "repositories": result.rows(),
        "facts": repository_facts(result, audit),
        "second_build": second_build(RESULTS_DIR / "corpus_pypi.jsonl", settings_digest(settings), sources),
        "files_sha256": {
            kind: hashlib.sha256(corpus_paths(args.output)[kind].read_bytes()).hexdigest()
            for kind in ("tasks", "train", "eval")
        },
    }
    if cost is not None:
        record["cost"] = cost
        print(json.dumps(cost, indent=1))
    if audit is not None:
        record["audit"] = {k: v for k, v in audit.items() if k != "markdown"}
    print(f"recorded in {append_record('corpus_pypi', record)}")
    if cost is not None:
        ledger.mark_recorded(spent)


REPOST_TRAIN_REPOSITORIES = 824
"""RepoST-Train's repositories: the cost is projected to a corpus of that many."""
PROJECTED_NODES = (1, 8, 32, 128)


class CpuMeter:
    """CPU seconds of this process and every process it starts, exited ones included.

    Getrusage misses most of it: a sandbox's warm worker reaps its run children itself. So
    the process moves into a cpuacct cgroup of its own (cgroup v1, or a ``cpu.stat`` group
    of v2) that its descendants inherit; where none can be made (no root), the machine's
    busy time from ``/proc/stat`` is counted instead, and ``source`` says so."""

    def __init__(self) -> None:
        self.group: Path | None = None
        self.source = "machine (/proc/stat: every process of the machine)"
        for root, usage in ((Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage"), (Path("/sys/fs/cgroup"), "cpu.stat")):
            group = root / f"gym-repost-benchmark-{os.getpid()}"
            try:
                if not (root / usage).exists():
                    continue
                group.mkdir(exist_ok=True)
                (group / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                continue
            self.group, self.usage_file = group, usage
            self.source = f"cgroup {group} (this process and its descendants)"
            break
        self.start = self.seconds()

    def seconds(self) -> float:
        if self.group is None:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            ticks = sum(int(f) for i, f in enumerate(fields) if i not in (3, 4))  # all but idle, iowait
            return ticks / os.sysconf("SC_CLK_TCK")
        text = (self.group / self.usage_file).read_text()
        if self.usage_file == "cpuacct.usage":
            return int(text) / 1e9
        return int(text.split("usage_usec", 1)[1].split()[0]) / 1e6

    def used(self) -> float:
        return self.seconds() - self.start

    def close(self) -> None:
        """Back to the parent group; the group goes once nothing is left in it."""
        if self.group is not None:
            try:
                (self.group.parent / "cgroup.procs").write_text(str(os.getpid()))
                self.group.rmdir()
            except OSError:
                pass


class CostLedger:
    """The cost of a build that runs in several calls (killed, then resumed): CPU and wall
    seconds, units built and peak memory, added up over the calls in ``STATE/cost.json``
    after each unit. Other settings or code (another digest) start it afresh.

    Slices recorded one after another from one state (``--packages A``, then ``--packages
    B``) each record what was spent since the record before (:meth:`since_recorded`,
    :meth:`mark_recorded`): summed over the records, as ``corpus_slices.py`` does, every
    CPU-second counts once (the whole ledger in each record counted the first slice's CPU
    in every later one). A slice killed part-way and not recorded leaves its CPU to the
    next record of that state."""

    COUNTED = ("cpu_s", "wall_s", "units", "calls")

    def __init__(self, path: Path, digest: str, meter: CpuMeter, started: float) -> None:
        self.path, self.digest, self.meter, self.started = path, digest, meter, started
        try:
            prior = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            prior = {}
        if prior.get("digest") != digest:
            prior = {}
        self.prior = {k: prior.get(k, 0) for k in self.COUNTED}
        self.recorded = {k: (prior.get("recorded") or {}).get(k, 0) for k in self.COUNTED}
        self.prior_rss = (prior.get("peak_rss_mib_driver", 0.0), prior.get("peak_rss_mib_largest_worker", 0.0))
        self.units = 0

    def add_unit(self) -> None:
        self.units += 1
        self.save()

    def totals(self) -> dict[str, Any]:
        driver, worker = _usage()
        return {
            "digest": self.digest,
            "cpu_s": self.prior["cpu_s"] + self.meter.used(),
            "wall_s": self.prior["wall_s"] + time.perf_counter() - self.started,
            "units": self.prior["units"] + self.units,
            "calls": self.prior["calls"] + 1,
            "peak_rss_mib_driver": max(self.prior_rss[0], driver),
            "peak_rss_mib_largest_worker": max(self.prior_rss[1], worker),
            "recorded": dict(self.recorded),
        }

    def since_recorded(self, totals: dict[str, Any]) -> dict[str, Any]:
        """``totals`` (:meth:`totals`) less what the state's earlier records counted (peak
        memory: the build's)."""
        return {**totals, **{k: totals[k] - self.recorded[k] for k in self.COUNTED}}

    def mark_recorded(self, totals: dict[str, Any]) -> None:
        """A record counted ``totals`` (:meth:`totals` when its cost was taken): the next
        record of this state counts from there."""
        self.recorded = {k: totals[k] for k in self.COUNTED}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        saved = json.loads(self.path.read_text("utf-8")) if self.path.exists() else dict(totals)
        saved["recorded"] = dict(self.recorded)
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(saved), encoding="utf-8")
        partial.replace(self.path)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(self.totals()), encoding="utf-8")
        partial.replace(self.path)

    def complete(self, resumed: int) -> bool:
        """Every unit resumed was built by an earlier call this ledger counted."""
        return resumed <= self.prior["units"]


class Progress:
    """A line per unit as it comes back (a build of every candidate runs for hours): which
    unit, what it kept, and the units, CPU and wall clock of the build so far, resumed
    calls included. With ``state`` the units of this plan it already holds count as built
    (a slice of the list, ``--packages``, built into the state of another); without it the
    ledger's units do."""

    def __init__(self, ledger: CostLedger, state: CorpusState | None = None) -> None:
        self.ledger, self.state, self.total, self.done, self.already = ledger, state, 0, 0, 0

    def plan(self, units: list[Unit]) -> None:
        self.total = len(units)
        if self.state is None:
            self.already = self.ledger.prior["units"]
        else:
            self.already = sum(self.state.load(u) is not None for u in units)
        print(f"corpus: {len(units)} units of work ({self.already} built by earlier calls)", flush=True)

    def unit(self, build: RepositoryBuild) -> None:
        self.ledger.add_unit()
        self.done += 1
        totals = self.ledger.totals()
        name = build.source.removeprefix("pypi:").split(" ", 1)[0]
        where = f" #{build.chunk[0]}" if build.chunk is not None else ""
        table = build.statistics.get("table2", {})
        what = (
            f"error: {build.error}"
            if build.error
            else f"{len(build.tasks)} tasks of {table.get('candidate functions', '?')} candidates"
        )
        print(
            f"[{self.already + self.done}/{self.total}] {name}{where}: {what} in {build.seconds:.0f} s"
            f" | build so far: {totals['cpu_s'] / 3600:.2f} CPU-h, {totals['wall_s'] / 3600:.2f} h",
            flush=True,
        )


def _usage() -> tuple[float, float]:
    """This process's peak RSS and its largest reaped child's (a sandbox worker), in MiB."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_maxrss / 1024, children.ru_maxrss / 1024


def _cost(result: CorpusResult, ledger: CostLedger, args: Any, totals: dict[str, Any]) -> dict[str, Any] | None:
    """Tasks per CPU-hour, peak memory, and the projection to RepoST-Train's 824 repositories
    on N nodes of this machine's cores, at the corpus efficiency ``ray_scaling.py`` measured
    for Ray against the local executor (at most 1). Over every call of a build the ledger
    counted (a killed build resumed); on the local executor only: Ray's actors are not this
    process's children."""
    if args.executor != "local":
        return None
    spent = ledger.since_recorded(totals)
    cpu, wall, driver_rss, worker_rss = (
        spent["cpu_s"],
        spent["wall_s"],
        spent["peak_rss_mib_driver"],
        spent["peak_rss_mib_largest_worker"],
    )
    tasks, repositories = result.totals()["tasks"], len(result.repositories)
    per_repository = cpu / repositories if repositories else 0.0
    return {
        "wall_s": round(wall, 1),
        "calls": spent["calls"],
        "cpu_s": round(cpu, 1),
        "cpu_measured_by": ledger.meter.source,
        "cores": os.cpu_count() or 1,
        "tasks": tasks,
        "tasks_per_cpu_hour": round(tasks / (cpu / 3600), 1) if cpu else None,
        "cpu_s_per_repository": round(per_repository, 1),
        "peak_rss_mib_driver": round(driver_rss, 1),
        "peak_rss_mib_largest_worker": round(worker_rss, 1),
        "projection": projection(cpu, repositories, tasks),
    }


def projection(cpu_s: float, repositories: int, tasks: int) -> dict[str, Any]:
    """RepoST-Train's 824 repositories at this per-repository cost: CPU-hours, tasks, and
    the wall hours on N nodes of this machine's cores at the corpus efficiency
    ``ray_scaling.py`` measured for Ray against the local executor (at most 1)."""
    cores = os.cpu_count() or 1
    efficiency, source = 1.0, "none recorded: 1 assumed"
    scaling = RESULTS_DIR / "ray_scaling.jsonl"
    if scaling.exists():
        last = json.loads(scaling.read_text("utf-8").strip().splitlines()[-1])
        measured = (last.get("configs", {}).get("ray-2-nodes") or {}).get("corpus_efficiency")
        if isinstance(measured, (int, float)):
            efficiency, source = min(1.0, float(measured)), f"ray_scaling {last.get('date')}: {measured} (capped at 1)"
    per_repository = cpu_s / repositories if repositories else 0.0
    cpu_hours = REPOST_TRAIN_REPOSITORIES * per_repository / 3600
    return {
        "repositories": REPOST_TRAIN_REPOSITORIES,
        "cpu_hours": round(cpu_hours, 1),
        "tasks": round(REPOST_TRAIN_REPOSITORIES * tasks / repositories) if repositories else 0,
        "ray_efficiency": efficiency,
        "ray_efficiency_source": source,
        "wall_hours_on_nodes": {str(n): round(cpu_hours / (n * cores * efficiency), 2) for n in PROJECTED_NODES},
    }


def repository_facts(result: CorpusResult, audit: dict[str, Any] | None) -> dict[str, Any]:
    """What a record keeps of each repository's build, beyond its row, for combining the
    records of slices of the list into the corpus's table (``corpus_slices.py``): its drop
    reasons, and per task built (near-duplicates included) where its target is, what Table 2
    counts of it and its held-out audit. No code: tasks are not committed."""
    held = {row["id"]: row["held_out"] for row in (audit or {}).get("tasks", [])}
    facts: dict[str, Any] = {}
    for build in result.repositories:
        facts[build.source] = {
            "drops": build.statistics.get("drops") or [],
            "tasks": [
                {
                    "id": task.id,
                    "name": task.name,
                    "file": task.provenance.file,
                    "qualname": task.provenance.qualname,
                    "tests": task.metadata.num_tests,
                    "asserts": task.metadata.num_asserts,
                    "branch_coverage": task.metadata.branch_coverage,
                    "kill_rate": task.metadata.checks.get("mutant_kill_rate"),
                    "single_statement": single_statement(task),
                    "docstring": bool(task.target.docstring),
                    "method": bool(task.target.class_name),
                    "held_out": {k: held[task.id][k] for k in ("known_wrong", "false_accepts")}
                    if task.id in held
                    else None,
                }
                for task in build.tasks
            ],
        }
    return facts


def second_build(records: Path, digest: str, sources: list[str]) -> bool:
    """Whether an earlier record of settings digest ``digest`` holds every repository of
    ``sources``: this call built them again (an identity check, which ``corpus_slices.py``
    compares digest for digest), and ``benchmarks/README.md`` keeps showing the build it
    checks, not this one."""
    built: set[str] = set()
    for record in read_jsonl(records) if records.exists() else []:
        if record.get("settings_digest") == digest:
            built.update(record.get("facts") or {})
    return bool(sources) and all(source in built for source in sources)


THRESHOLDS = (None, 0.1, 0.0)
"""Thresholds of ``build --max-false-accept`` the audit table compares (None: no filter)."""


def held_out_audit(
    result: CorpusResult,
    output: Path,
    workers: int,
    thresholds: tuple[float | None, ...] = THRESHOLDS,
    constraints: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Every kept task audited with the held-out half of the mutants (cached beside ``output``),
    and, per threshold on the build half's false-accept rate, what a filtered build keeps."""
    cache = output.with_name(output.name.removesuffix(".jsonl") + ".held-out")
    cache.mkdir(exist_ok=True)
    rows: list[dict[str, Any]] = []
    with get_sandbox("local", workers=workers) as box:
        for build in result.repositories:
            kept = [t for t in build.tasks if t.id not in result.duplicates]
            if not kept:
                continue
            path = cache / (hashlib.sha256(build.source.encode()).hexdigest()[:16] + ".json")
            if path.exists():
                held = json.loads(path.read_text("utf-8"))
            else:
                repo = ingest(build.source, licenses="any")
                with own_packages(box) as (own, _):  # what the build saw: its own installs
                    installer = PackageInstaller(own, refuse=frozenset(local_modules(repo)), constraints=constraints)
                    audits = audit_tasks(own, kept, repo, workers=workers, part="held-out", install=installer.provide)
                held = {a.task_id: a.record() for a in audits}
                path.write_text(json.dumps(held), encoding="utf-8")
            filtered = build.statistics.get("audited") or {}
            for task in kept:
                rows.append(
                    {
                        "repository": build.name,
                        "task": task.name,
                        "id": task.id,
                        "build": filtered.get(task.id),
                        "held_out": held[task.id],
                    }
                )
    candidates = result.totals()["candidate functions"]
    by_threshold = [_kept_figures(rows, threshold, candidates) for threshold in thresholds]
    return {"tasks": rows, "by_threshold": by_threshold, "markdown": _markdown(rows, by_threshold)}


def _kept(rows: list[dict[str, Any]], threshold: float | None) -> list[dict[str, Any]]:
    """The rows a build with ``--max-false-accept threshold`` keeps (its audit: the build half)."""
    if threshold is None:
        return rows
    out = []
    for row in rows:
        build = row["build"] or {}
        wrong, accepted = build.get("known_wrong", 0), build.get("false_accepts", 0)
        if not wrong or accepted / wrong <= threshold:
            out.append(row)
    return out


def _kept_figures(rows: list[dict[str, Any]], threshold: float | None, candidates: int) -> dict[str, Any]:
    kept = _kept(rows, threshold)
    measured = [r for r in kept if r["held_out"]["known_wrong"]]
    wrong = sum(r["held_out"]["known_wrong"] for r in measured)
    accepted = sum(r["held_out"]["false_accepts"] for r in measured)
    rewarding = sum(r["held_out"]["false_accepts"] > 0 for r in measured)
    return {
        "max_false_accept": threshold,
        "tasks": len(kept),
        "yield": len(kept) / candidates if candidates else None,
        "tasks_measured": len(measured),
        "held_out_known_wrong": wrong,
        "held_out_false_accepts": accepted,
        "held_out_false_accept_rate": accepted / wrong if wrong else None,
        "tasks_rewarding_any": rewarding,
        "share_of_tasks_rewarding_any": rewarding / len(measured) if measured else None,
    }


def _markdown(rows: list[dict[str, Any]], by_threshold: list[dict[str, Any]]) -> str:
    lines = [
        "| build --max-false-accept | tasks | yield | tasks measured | held-out known wrong | false accepts "
        "| false-accept rate | tasks rewarding any |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in by_threshold:
        threshold = "none" if f["max_false_accept"] is None else f"{f['max_false_accept']:g}"
        rate = f["held_out_false_accept_rate"]
        share = f["share_of_tasks_rewarding_any"]
        lines.append(
            f"| {threshold} | {f['tasks']} | {_percent(f['yield'])} | {f['tasks_measured']} | "
            f"{f['held_out_known_wrong']} | {f['held_out_false_accepts']} | {_percent(rate)} | "
            f"{f['tasks_rewarding_any']} ({_percent(share)}) |"
        )
    lines += [
        "",
        "| repository | tasks | held-out known wrong | false accepts | tasks rewarding any |",
        "|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["repository"] for r in rows):
        mine = [r for r in rows if r["repository"] == name]
        wrong = sum(r["held_out"]["known_wrong"] for r in mine)
        accepted = sum(r["held_out"]["false_accepts"] for r in mine)
        lines.append(
            f"| {name} | {len(mine)} | {wrong} | {accepted} | {sum(r['held_out']['false_accepts'] > 0 for r in mine)} |"
        )
    return "\n".join(lines) + "\n"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


if __name__ == "__main__":
    main()
