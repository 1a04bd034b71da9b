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
from an empty package cache as a fresh machine does) are compared unit by unit (a
repository, or each ``--chunk`` of a split one; those both hold so far, the rest counted as
pending), and their task files (tasks, train, eval) byte for byte once either is finished.
A task only one build kept is shown with what each build's audit found for it (known-wrong
mutants, false accepts, mutants not run within the CPU budget): the first thing to look at
when builds differ.

With ``--record FILE`` (a ``corpus_pypi.jsonl``), nothing is built either: the build of
``--state``, made on any machine at any time, is compared with the latest record of FILE
that holds digests (``tasks_sha256`` per repository, ``files_sha256`` of the task files),
repository by repository (those the state holds so far; ``--packages`` for some; each
against the latest record holding it, so the records of slices of the list, ``corpus_pypi.py
--packages``, serve together) and, once it is finished, file by file. The two builds need not share a disk.

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

from benchmarks.common import append_record, checkout, machine, now, read_jsonl
from gym_repost.construct.corpus import (
    RepositoryBuild,
    RepositoryWork,
    corpus_paths,
    state_repositories,
    tasks_digest,
)
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
    if args.second is not None:
        before, started = machine(), time.perf_counter()
        rows, files, pending = compare_builds(args.state, args.second, names)
        if not rows and not pending:
            raise SystemExit(f"{args.state}: no unit built (or none of --packages)")
        report(args, before, started, rows, files, {"second": str(args.second), "pending_units": pending})
        return
    records = first_build(args.state, names)
    if not records:
        raise SystemExit(f"{args.state}: no repository built whole (or none of --packages)")
    settings = BuildSettings(
        max_candidates=args.max_candidates,
        workers=args.workers,
        max_false_accept=args.max_false_accept,
        constraints=read_constraints(args.constraints) if str(args.constraints) not in ("", ".") else (),
    )
    before, started = machine(), time.perf_counter()
    rows: list[dict[str, Any]] = []
    with get_sandbox("local", workers=args.workers) as sandbox:
        for record in records:
            again = RepositoryWork(settings)(record["source"], sandbox)
            rows.append(compare(record, _record(again)))
            print(_said(rows[-1]), flush=True)
    report(args, before, started, rows, {}, {"second": None})


def report(
    args: argparse.Namespace,
    before: dict[str, Any],
    started: float,
    rows: list[dict[str, Any]],
    files: dict[str, bool],
    against: dict[str, Any],
) -> None:
    """Print the comparison and append its record (unless ``--no-record``). A repository no
    record holds (``in_record`` False) is listed apart, not counted as compared."""
    unrecorded = [r["repository"] for r in rows if not r.get("in_record", True)]
    rows = [r for r in rows if r.get("in_record", True)]
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
        "in_no_record": unrecorded,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    for row in different:
        if "audits" not in row:  # against a record: digests only
            continue
        print(
            f"{row['repository']}: only in the first {row['only_first']}, only in the second "
            f"{row['only_second']}, changed {row['changed']}"
        )
        for name, audit in row["audits"].items():
            print(f"  {name}: audit of the first build {audit['first']}, of the second {audit['second']}")
    print(f"{record['identical']} of {len(rows)} compared identical ({record['tasks_compared']} tasks)")
    if unrecorded:
        print(f"{len(unrecorded)} built here that no record holds, not compared: {', '.join(unrecorded)}")
    if against.get("pending_units"):
        print(f"{against['pending_units']} units built by one of the builds only, so far")
    if files:
        print("task files identical: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in files.items()))
    else:
        print("task files not compared: a build is not finished")
    if not args.no_record:
        print(f"recorded in {append_record('corpus_identity', record)}")


def compare_builds(
    state: Path,
    second: Path,
    names: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[list[dict[str, Any]], dict[str, bool], int]:
    """Each unit both builds hold (of ``names``, when given) compared, the units only one
    holds so far (pending), and the two builds' task files byte for byte once either is
    finished (a unit only one build made then shows as files that differ)."""
    firsts, others = _units(state, names or set()), _units(second, names or set())
    rows, pending = [], 0
    for key, record in firsts.items():
        other = others.get(key)
        if other is None:
            pending += 1
            continue
        rows.append(compare(record, other))
        print(_said(rows[-1]), flush=True)
    pending += len(others.keys() - firsts.keys())  # the first build's turn to come (its files say the rest)
    files: dict[str, bool] = {}
    finished = [corpus_paths(_output(s))["tasks"].is_file() for s in (state, second)]
    if not any(finished):  # both unfinished: their units compared, no files yet
        return rows, files, pending
    for kind in ("tasks", "train", "eval"):
        a, b = (corpus_paths(_output(s))[kind] for s in (state, second))
        files[kind] = a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()
    return rows, files, pending


def _units(state: Path, names: set[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """A build's unit records (of ``names``, when given) by source and chunk, in that order."""
    found = {}
    for path in sorted((state / "repos").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if not names or str(record.get("name", "")).lower() in names:
            found[(record["source"], json.dumps(record.get("chunk")))] = record
    return dict(sorted(found.items()))


def compare_with_record(
    state: Path, record_file: Path, names: set[str]
) -> tuple[list[dict[str, Any]], dict[str, bool], str]:
    """Each repository of ``state`` (of ``names``, when given) against the digest the latest
    record of ``record_file`` with digests holds for it; the task files too, when the build
    is finished and the record has theirs; and that record's date."""
    found = None
    recorded: dict[str, dict[str, Any]] = {}  # each repository's digest in the latest record holding it
    for value in read_jsonl(record_file):
        entries = value.get("repositories")
        if isinstance(entries, list) and entries and all(isinstance(r, dict) and "tasks_sha256" in r for r in entries):
            found = value
            recorded.update({r["source"]: r for r in entries})
    if found is None:
        raise SystemExit(f"{record_file}: no record holds the digests of its repositories (tasks_sha256)")
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
        print(_said(rows[-1]), flush=True)
    files = {}
    digests = found.get("files_sha256") or {}
    if len(builds) == len(found["repositories"]) and not names and found.get("packages") is None:
        for kind, digest in digests.items():
            path = corpus_paths(_output(state))[kind]
            files[kind] = path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest
    return rows, files, str(found.get("date"))


def _said(row: dict[str, Any]) -> str:
    """One repository's line of the comparison."""
    if not row.get("in_record", True):
        return f"{row['repository']}: in no record (not compared)"
    return f"{row['repository']}: {'identical' if row['identical'] else 'DIFFERENT'}"


def _output(state: Path) -> Path:
    """The corpus output whose resume state is ``state`` (``X.corpus-state`` -> ``X.jsonl``)."""
    return state.with_name(state.name.removesuffix(".corpus-state") + ".jsonl")


def first_build(state: Path, names: set[str]) -> list[dict[str, Any]]:
    """The first build's repositories (of ``names``, when given), a split one's units put
    back together (:func:`state_repositories`), as records, by source."""
    return [_record(b) for b in state_repositories(state) if not names or b.name.lower() in names]


def compare(record: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """One unit (or repository) in two builds: identical, or the tasks only one build has,
    those both have that differ (with the fields that differ: a task's id is a digest of
    its content, so tasks are paired by name), and what each build's audit found for them."""
    firsts, seconds = _by_name(record["tasks"]), _by_name(other["tasks"])
    audits = [_audited(record), _audited(other)]
    changed = {
        name: sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        for name in sorted(firsts.keys() & seconds.keys())
        if _text(a := firsts[name]) != _text(b := seconds[name])
    }
    differing = sorted((firsts.keys() ^ seconds.keys()) | changed.keys())
    chunk = record.get("chunk")
    return {
        "repository": (record.get("name") or record["source"]) + (f" #{chunk[0]}" if chunk else ""),
        "tasks": len(record["tasks"]),
        "identical": [_text(t) for t in record["tasks"]] == [_text(t) for t in other["tasks"]]
        and other.get("error") == record.get("error"),
        "only_first": sorted(firsts.keys() - seconds.keys()),
        "only_second": sorted(seconds.keys() - firsts.keys()),
        "changed": [f"{name} ({', '.join(fields)})" for name, fields in changed.items()],
        "audits": {  # a task one build dropped: its audit there, by the id the other gives it
            name: {
                "first": audits[0].get((firsts.get(name) or seconds[name])["id"]),
                "second": audits[1].get((seconds.get(name) or firsts[name])["id"]),
            }
            for name in differing
        },
    }


def _by_name(tasks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Tasks by name; by id when two share a name."""
    names = [t["name"] for t in tasks]
    key = "name" if len(set(names)) == len(names) else "id"
    return {t[key]: t for t in tasks}


def _audited(record: dict[str, Any]) -> dict[str, Any]:
    return (record.get("statistics") or {}).get("audited") or {}


def _record(build: RepositoryBuild) -> dict[str, Any]:
    """A build made here, in the shape of a state's record."""
    return {**build.to_json(""), "tasks": [t.model_dump(mode="json") for t in build.tasks]}


def _text(task: dict[str, Any]) -> str:
    return json.dumps(task, sort_keys=True)


if __name__ == "__main__":
    main()
