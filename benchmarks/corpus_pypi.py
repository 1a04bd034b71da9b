"""A corpus build of the PyPI packages of ``benchmarks/corpus_pypi.txt`` (173 packages, each
pinned to its sdist's sha256: a lock file), every candidate of each: per-package yield,
coverage, kill rate and time, and the totals in the shape of RepoST's Table 2.
Issue 33's measurements use the 33 packages of ``benchmarks/corpus_pypi33.txt`` with
``--max-candidates 10``.

The build is the command line's (``gym-repost build benchmarks/corpus_pypi.txt -o OUT``)
through :func:`gym_repost.construct.build_corpus`; it resumes at the repository level, so
pointing ``--output`` at a build made with the same settings records it without building
again (the per-repository seconds are those of the build that made each repository).
Writes ``benchmarks/results/corpus_pypi.stats.md`` (the table) and appends the machine,
the load, the rows and the totals to ``benchmarks/results/corpus_pypi.jsonl``.

With ``--audit`` (issue 33) the build audits its tasks against each package's own tests
(``--max-false-accept 1``: the ``build`` half of the mutants, nothing dropped), then every
kept task is audited again with the ``held-out`` half, mutants no build-time filter saw;
the record and ``corpus_pypi.audit.md`` give, per threshold X of ``build
--max-false-accept X`` (none, 0.1, 0), the tasks it keeps, the yield, and the held-out
false-accept figures of what it keeps, per package and in total.

Usage::

    python benchmarks/corpus_pypi.py [--output /tmp/corpus/tasks.jsonl] [--sources LIST]
        [--max-candidates 0] [--workers 2] [--executor local|ray] [--audit] [--no-record]
    python benchmarks/corpus_pypi.py --sources benchmarks/corpus_pypi33.txt --max-candidates 10 --audit
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS_DIR, append_record, machine, now
from gym_repost.construct.audit import audit_tasks
from gym_repost.construct.corpus import CorpusResult, build_corpus, corpus_paths, read_sources
from gym_repost.construct.ingest import ingest
from gym_repost.construct.pipeline import BuildSettings
from gym_repost.executor import get_executor
from gym_repost.sandbox import get_sandbox, sandbox_config

SOURCES = Path(__file__).resolve().parent / "corpus_pypi.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=Path("/tmp/corpus/tasks.jsonl"))
    parser.add_argument("--max-candidates", type=int, default=0, help="per package (default 0: every candidate)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--executor", default="local")
    parser.add_argument("--sources", type=Path, default=SOURCES, help="source list (default: corpus_pypi.txt)")
    parser.add_argument("--audit", action="store_true", help="audit the tasks (build half, then held-out half)")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    sources = read_sources(args.sources)
    settings = BuildSettings(
        max_candidates=args.max_candidates, workers=args.workers, max_false_accept=1.0 if args.audit else None
    )
    before = machine()
    started = time.perf_counter()
    sandbox = sandbox_config("local", workers=args.workers)
    with get_executor(args.executor, workers=args.workers, sandbox=sandbox) as executor:
        result = build_corpus(sources, args.output, settings, executor)
    totals = result.totals()
    for key, value in totals.items():
        print(f"{key}: {value}")
    audit = held_out_audit(result, args.output, args.workers) if args.audit else None
    if audit is not None:
        (RESULTS_DIR / "corpus_pypi.audit.md").write_text(audit["markdown"], encoding="utf-8")
        print(audit["markdown"])
    if args.no_record:
        return
    shutil.copyfile(corpus_paths(args.output)["stats_md"], RESULTS_DIR / "corpus_pypi.stats.md")
    record = {
        "benchmark": "corpus_pypi",
        "date": now(),
        "machine": before,
        "sources": str(args.sources.name),
        "max_candidates": args.max_candidates,
        "workers": args.workers,
        "executor": args.executor,
        "resumed_repositories": result.resumed,
        "wall_s_of_this_call": round(time.perf_counter() - started, 1),
        "totals": totals,
        "repositories": result.rows(),
    }
    if audit is not None:
        record["audit"] = {k: v for k, v in audit.items() if k != "markdown"}
    print(f"recorded in {append_record('corpus_pypi', record)}")


THRESHOLDS = (None, 0.1, 0.0)
"""Thresholds of ``build --max-false-accept`` the audit table compares (None: no filter)."""


def held_out_audit(result: CorpusResult, output: Path, workers: int) -> dict[str, Any]:
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
                audits = audit_tasks(box, kept, ingest(build.source, licenses="any"), workers=workers, part="held-out")
                held = {a.task_id: a.record() for a in audits}
                path.write_text(json.dumps(held), encoding="utf-8")
            filtered = build.statistics.get("audited") or {}
            for task in kept:
                rows.append(
                    {
                        "repository": build.name,
                        "task": task.name,
                        "build": filtered.get(task.id),
                        "held_out": held[task.id],
                    }
                )
    candidates = result.totals()["candidate functions"]
    by_threshold = [_kept_figures(rows, threshold, candidates) for threshold in THRESHOLDS]
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
