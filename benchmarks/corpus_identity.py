"""Two builds give the same tasks: the repositories of a finished corpus build, built again
and compared task by task.

Reads the state of a first build (``OUTPUT.corpus-state``, written by ``corpus_pypi.py`` or
``gym-repost build LIST -o OUTPUT``), builds each of its repositories again (or a sample,
``--packages``) with this checkout and the settings given here (those of the first build),
and compares each task's JSON with the first build's. Appends to
``benchmarks/results/corpus_identity.jsonl`` the machine and its load (a rebuild may run
beside other work: what is built must not depend on it), the repositories compared, and
those whose tasks differ, with the names of the differing tasks.

With ``--second STATE``, nothing is built: two corpus builds (the second made by another
run of the same command, into another output, with a ``HOME`` of its own so that it starts
from an empty package cache as a fresh machine does) are compared repository by repository
(those the first holds so far), and their task files (tasks, train, eval) byte for byte once
either is finished.

With ``--record FILE`` (a ``corpus_pypi.jsonl``), nothing is built either: the build of
``--state``, made on any machine at any time, is compared with the latest record of FILE
that holds digests (``tasks_sha256`` per repository, ``files_sha256`` of the task files),
repository by repository (those the state holds so far; ``--packages`` for some) and, once
it is finished, file by file. The two builds need not share a disk.

Usage::

    python benchmarks/corpus_identity.py --state /tmp/corpus/tasks.corpus-state \\
        --max-candidates 0 --max-false-accept 0 [--packages NAME,...] [--workers 2] [--no-record]
    python benchmarks/corpus_identity.py --state /tmp/a/tasks.corpus-state \\
        --second /tmp/b/tasks.corpus-state --max-candidates 0 --max-false-accept 0
    python benchmarks/corpus_identity.py --state /tmp/b/tasks.corpus-state \\
        --record benchmarks/results/corpus_pypi.jsonl --max-candidates 0 --max-false-accept 0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, checkout, machine, now
from gym_repost.construct.corpus import RepositoryWork, corpus_paths, state_repositories, tasks_digest
from gym_repost.construct.execution import read_constraints
from gym_repost.construct.pipeline import BuildSettings
from gym_repost.sandbox import get_sandbox


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", type=Path, required=True, help="the first build's OUTPUT.corpus-state")
    parser.add_argument("--max-candidates", type=int, default=0)
    parser.add_argument("--max-false-accept", type=float, default=None)
    parser.add_argument("--packages", default="", help="comma-separated names: only these repositories")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--constraints",
        type=Path,
        default=Path(__file__).resolve().parent / "corpus_pypi.constraints.txt",
        help="the first build's pip constraints (default: corpus_pypi.constraints.txt; '' for none)",
    )
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument(
        "--second", type=Path, help="a second build's state: compare, build nothing (task files once both are finished)"
    )
    parser.add_argument("--record", type=Path, help="a corpus_pypi.jsonl: compare with its digests, build nothing")
    args = parser.parse_args()
    names = {n.strip().lower() for n in args.packages.split(",") if n.strip()}
    if args.record is not None:
        before, started = machine(), time.perf_counter()
        compared, same_files, dated = compare_with_record(args.state, args.record, names)
        report(args, before, started, compared, same_files, {"record": str(args.record), "record_date": dated})
        return
    records = first_build(args.state, names)
    if not records:
        raise SystemExit(f"{args.state}: no repository built whole (a split one, or none of --packages)")
    settings = BuildSettings(
        max_candidates=args.max_candidates,
        workers=args.workers,
        max_false_accept=args.max_false_accept,
        constraints=read_constraints(args.constraints) if str(args.constraints) not in ("", ".") else (),
    )
    before, started = machine(), time.perf_counter()
    rows: list[dict[str, Any]] = []
    files: dict[str, bool] = {}
    if args.second is not None:
        rows, files = compare_builds(records, args.state, args.second)
    else:
        with get_sandbox("local", workers=args.workers) as sandbox:
            for record in records:
                again = RepositoryWork(settings)(record["source"], sandbox)
                rows.append(compare(record, [t.model_dump(mode="json") for t in again.tasks], again.error))
                print(f"{rows[-1]['repository']}: {'identical' if rows[-1]['identical'] else 'DIFFERENT'}", flush=True)
    report(args, before, started, rows, files, {"second": str(args.second) if args.second is not None else None})


def report(
    args: argparse.Namespace,
    before: dict[str, Any],
    started: float,
    rows: list[dict[str, Any]],
    files: dict[str, bool],
    against: dict[str, Any],
) -> None:
    """Print the comparison and append its record (unless ``--no-record``)."""
    different = [r for r in rows if not r["identical"]]
    record = {
        "benchmark": "corpus_identity",
        "date": now(),
        "machine": before,
        "checkout": checkout(),
        "load_after": machine()["load_average"],
        "state": str(args.state),
        **against,
        "files_identical": files,
        "max_candidates": args.max_candidates,
        "max_false_accept": args.max_false_accept,
        "repositories": len(rows),
        "identical": len(rows) - len(different),
        "tasks_compared": sum(r["tasks"] for r in rows),
        "different": different,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(f"{record['identical']} of {len(rows)} repositories identical ({record['tasks_compared']} tasks)")
    if files:
        print("task files identical: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in files.items()))
    else:
        print("task files not compared: a build is not finished")
    if not args.no_record:
        print(f"recorded in {append_record('corpus_identity', record)}")


def compare_builds(
    records: list[dict[str, Any]], state: Path, second: Path
) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    """Each repository of the first build against the second's record of it (a repository
    the second lacks differs), and the two builds' task files byte for byte."""
    others = {r["source"]: r for r in first_build(second, set())}
    rows = []
    for record in records:
        other = others.get(record["source"])
        if other is None:
            row = compare(record, [], "not built by the second build")
        else:
            row = compare(record, other["tasks"], other.get("error"))
        rows.append(row)
        print(f"{row['repository']}: {'identical' if row['identical'] else 'DIFFERENT'}", flush=True)
    files: dict[str, bool] = {}
    finished = [corpus_paths(_output(s))["tasks"].is_file() for s in (state, second)]
    if not any(finished):  # both unfinished: their units compared, no files yet
        return rows, files
    for kind in ("tasks", "train", "eval"):
        a, b = (corpus_paths(_output(s))[kind] for s in (state, second))
        files[kind] = a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()
    return rows, files


def compare_with_record(
    state: Path, record_file: Path, names: set[str]
) -> tuple[list[dict[str, Any]], dict[str, bool], str]:
    """Each repository of ``state`` (of ``names``, when given) against the digest the latest
    record of ``record_file`` with digests holds for it; the task files too, when the build
    is finished and the record has theirs; and that record's date."""
    found = None
    for line in record_file.read_text(encoding="utf-8").splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        entries = value.get("repositories") if isinstance(value, dict) else None
        if isinstance(entries, list) and entries and all(isinstance(r, dict) and "tasks_sha256" in r for r in entries):
            found = value
    if found is None:
        raise SystemExit(f"{record_file}: no record holds the digests of its repositories (tasks_sha256)")
    recorded = {r["source"]: r for r in found["repositories"]}
    builds = [b for b in state_repositories(state) if not names or b.name.lower() in names]
    if not builds:
        raise SystemExit(f"{state}: no repository built whole (or none of --packages)")
    rows: list[dict[str, Any]] = []
    for build in builds:
        row = recorded.get(build.source)
        digest = tasks_digest(build.tasks)
        rows.append(
            {
                "repository": build.name or build.source,
                "tasks": len(build.tasks),
                "identical": row is not None and row["tasks_sha256"] == digest and row.get("error") == build.error,
                "in_record": row is not None,
                "recorded_tasks": row.get("built") if row is not None else None,
            }
        )
        print(f"{rows[-1]['repository']}: {'identical' if rows[-1]['identical'] else 'DIFFERENT'}", flush=True)
    files = {}
    digests = found.get("files_sha256") or {}
    if len(builds) == len(recorded) and not names:
        for kind, digest in digests.items():
            path = corpus_paths(_output(state))[kind]
            files[kind] = path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest
    return rows, files, str(found.get("date"))


def _output(state: Path) -> Path:
    """The corpus output whose resume state is ``state`` (``X.corpus-state`` -> ``X.jsonl``)."""
    return state.with_name(state.name.removesuffix(".corpus-state") + ".jsonl")


def first_build(state: Path, names: set[str]) -> list[dict[str, Any]]:
    """The first build's records of whole repositories (of ``names``, when given), in file order."""
    records = []
    for path in sorted((state / "repos").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("chunk") is None and (not names or str(record.get("name", "")).lower() in names):
            records.append(record)
    return sorted(records, key=lambda r: r["source"])


def compare(record: dict[str, Any], tasks: list[dict[str, Any]], error: str | None) -> dict[str, Any]:
    """One repository: identical, or the names of the tasks only one build has or that differ."""
    first = {t["id"]: t for t in record["tasks"]}
    second = {t["id"]: t for t in tasks}
    names = {t["id"]: t["name"] for t in [*record["tasks"], *tasks]}
    changed = sorted(names[i] for i in first.keys() & second.keys() if _text(first[i]) != _text(second[i]))
    return {
        "repository": record.get("name") or record["source"],
        "tasks": len(record["tasks"]),
        "identical": [_text(t) for t in record["tasks"]] == [_text(t) for t in tasks] and error == record.get("error"),
        "only_first": sorted(names[i] for i in first.keys() - second.keys()),
        "only_second": sorted(names[i] for i in second.keys() - first.keys()),
        "changed": changed,
    }


def _text(task: dict[str, Any]) -> str:
    return json.dumps(task, sort_keys=True)


if __name__ == "__main__":
    main()
