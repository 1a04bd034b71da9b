"""A corpus build of the PyPI packages of ``benchmarks/corpus_pypi.txt``: per-package yield,
coverage, kill rate and time, and the totals in the shape of RepoST's Table 2.

The build is the command line's (``gym-repost build benchmarks/corpus_pypi.txt -o OUT``)
through :func:`gym_repost.construct.build_corpus`; it resumes at the repository level, so
pointing ``--output`` at a build made with the same settings records it without building
again (the per-repository seconds are those of the build that made each repository).
Writes ``benchmarks/results/corpus_pypi.stats.md`` (the table) and appends the machine,
the load, the rows and the totals to ``benchmarks/results/corpus_pypi.jsonl``.

Usage::

    python benchmarks/corpus_pypi.py [--output /tmp/corpus30/tasks.jsonl] [--max-candidates 10]
        [--workers 2] [--executor local|ray] [--no-record]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS_DIR, append_record, machine, now
from gym_repost.construct.corpus import build_corpus, corpus_paths, read_sources
from gym_repost.construct.pipeline import BuildSettings
from gym_repost.executor import get_executor
from gym_repost.sandbox import sandbox_config

SOURCES = Path(__file__).resolve().parent / "corpus_pypi.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=Path("/tmp/corpus30/tasks.jsonl"))
    parser.add_argument("--max-candidates", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--executor", default="local")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    sources = read_sources(SOURCES)
    settings = BuildSettings(max_candidates=args.max_candidates, workers=args.workers)
    before = machine()
    started = time.perf_counter()
    sandbox = sandbox_config("local", workers=args.workers)
    with get_executor(args.executor, workers=args.workers, sandbox=sandbox) as executor:
        result = build_corpus(sources, args.output, settings, executor)
    totals = result.totals()
    for key, value in totals.items():
        print(f"{key}: {value}")
    if args.no_record:
        return
    shutil.copyfile(corpus_paths(args.output)["stats_md"], RESULTS_DIR / "corpus_pypi.stats.md")
    record = {
        "benchmark": "corpus_pypi",
        "date": now(),
        "machine": before,
        "sources": str(SOURCES.name),
        "max_candidates": args.max_candidates,
        "workers": args.workers,
        "executor": args.executor,
        "resumed_repositories": result.resumed,
        "wall_s_of_this_call": round(time.perf_counter() - started, 1),
        "totals": totals,
        "repositories": result.rows(),
    }
    print(f"recorded in {append_record('corpus_pypi', record)}")


if __name__ == "__main__":
    main()
