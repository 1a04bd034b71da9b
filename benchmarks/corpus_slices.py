"""The corpus from the records of its slices: builds of parts of the source list
(``corpus_pypi.py --packages A,B,... --max-false-accept 0 --audit``), made on any machines
at any times with the same code and settings, combined into the table one build of the
whole list gives.

A build of every candidate of the 173 packages takes more CPU-hours than one machine of
ours keeps its disk; built in slices, each slice's record (``corpus_pypi.jsonl``: each
repository's digest of its tasks, its drop reasons and, per task, where its target is and
what Table 2 counts of it; no code) is what is kept. This script takes the records of one
settings digest (the code that builds and the settings: ``--digest``, by default the
newest slice record's), in record order:

- the first record holding a repository gives its build; a later record holding it again
  is another build of it, compared digest for digest (two builds, the same tasks);
- near-duplicates are found again over every repository in list order, as one build of
  the whole list finds them (the targets' sources are read back from the pinned sdists:
  a record holds no code), and the split is made over the repositories with tasks;
- Table 2's totals, the drop reasons, the held-out audit of what is kept and the cost
  (tasks per CPU-hour, peak memory, the projection to RepoST-Train's 824 repositories)
  are added up;
- the packages of the list that no record holds yet are listed: until none is left the
  table says it is partial.

Writes ``benchmarks/results/corpus_pypi.stats.md`` and appends to
``benchmarks/results/corpus_slices.jsonl``.

Usage::

    python benchmarks/corpus_pypi.py --packages toolz,boltons --max-false-accept 0 --audit  # a slice
    python benchmarks/corpus_slices.py [--records benchmarks/results/corpus_pypi.jsonl]
        [--sources benchmarks/corpus_pypi.txt] [--digest D] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS_DIR, append_record, checkout, machine, now
from benchmarks.corpus_pypi import projection
from gym_repost.construct.corpus import near_duplicates, read_sources, split_repositories
from gym_repost.construct.extract import extract_candidates
from gym_repost.construct.ingest import ingest
from gym_repost.errors import ConfigError

EVAL_FRACTION, DUPLICATE_THRESHOLD, SEED = 0.2, 0.9, 0
"""What ``build_corpus`` splits and removes near-duplicates with (its defaults)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=Path, default=RESULTS_DIR / "corpus_pypi.jsonl")
    parser.add_argument("--sources", type=Path, default=Path(__file__).resolve().parent / "corpus_pypi.txt")
    parser.add_argument("--digest", default="", help="the settings digest to combine (default: the newest slice's)")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    try:
        corpus = combine(read_slices(args.records, args.sources.name, args.digest), read_sources(args.sources))
    except ConfigError as exc:
        raise SystemExit(str(exc)) from exc
    markdown = corpus.markdown(args.sources.name)
    print(markdown)
    if args.no_record:
        return
    (RESULTS_DIR / f"{args.sources.stem}.stats.md").write_text(markdown, encoding="utf-8")
    record = {"benchmark": "corpus_slices", "date": now(), "machine": machine(), "checkout": checkout()}
    record.update(corpus.record(args.sources.name))
    print(f"recorded in {append_record('corpus_slices', record)}")


def read_slices(path: Path, sources_name: str, digest: str = "") -> list[dict[str, Any]]:
    """The slice records of ``path`` (``corpus_pypi.py`` records of the list ``sources_name``
    holding per-repository facts) made with settings digest ``digest`` (default: the newest
    slice record's), in record order.

    Raises:
        ConfigError: no such record.
    """
    slices = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not a JSON record ({exc.msg})") from exc
        if record.get("sources") == sources_name and record.get("facts") and record.get("settings_digest"):
            slices.append(record)
    if not slices:
        raise ConfigError(f"{path}: no record of {sources_name} holds the facts of its repositories (a slice)")
    digest = digest or slices[-1]["settings_digest"]
    chosen = [r for r in slices if r["settings_digest"] == digest]
    if not chosen:
        known = ", ".join(dict.fromkeys(r["settings_digest"] for r in slices))
        raise ConfigError(f"{path}: no slice record has settings digest {digest} (those there: {known})")
    return chosen


@dataclass
class Repository:
    """One repository of the list: its first build (a row and facts of a record) and the
    digests of the later builds of it."""

    source: str
    row: dict[str, Any]
    facts: dict[str, Any]
    record: int
    """Index of the slice record that built it first."""
    again: list[tuple[int, bool]] = field(default_factory=list)
    """``(record index, identical)`` of each later build."""


@dataclass
class Corpus:
    """The slices combined: the repositories built, those pending, duplicates and split."""

    slices: list[dict[str, Any]]
    repositories: list[Repository]
    pending: list[str]
    duplicates: dict[str, str]
    split: dict[str, str]

    def kept(self, repository: Repository) -> list[dict[str, Any]]:
        return [t for t in repository.facts["tasks"] if t["id"] not in self.duplicates]

    def totals(self) -> dict[str, Any]:
        """The totals of one build of the list (``CorpusResult.totals``'s figures)."""
        tasks = [t for r in self.repositories for t in self.kept(r)]
        by_split = {
            s: sum(len(self.kept(r)) for r in self.repositories if self.split.get(_name(r)) == s)
            for s in ("train", "eval")
        }
        coverages = [t["branch_coverage"] for t in tasks if t["branch_coverage"] is not None]
        kills = [t["kill_rate"] for t in tasks if t["kill_rate"] is not None]
        candidates = sum(r.row.get("candidates") or 0 for r in self.repositories)
        measured = [t for t in tasks if t["held_out"] and t["held_out"]["known_wrong"]]
        wrong = sum(t["held_out"]["known_wrong"] for t in measured)
        accepted = sum(t["held_out"]["false_accepts"] for t in measured)
        return {
            "repositories": len(self.repositories),
            "repositories with tasks": sum(bool(self.kept(r)) for r in self.repositories),
            "repositories failed": sum(r.row.get("error") is not None for r in self.repositories),
            "tasks": len(tasks),
            "train tasks": by_split["train"],
            "eval tasks": by_split["eval"],
            "near-duplicates removed": len(self.duplicates),
            "avg tests per task": _mean([t["tests"] for t in tasks]),
            "avg asserts per task": _mean([t["asserts"] for t in tasks]),
            "avg branch coverage": _mean(coverages),
            "median mutant kill rate": statistics.median(kills) if kills else None,
            "branch coverage n/a (under 3 arcs)": len(tasks) - len(coverages),
            "kill rate n/a (under 3 mutants)": len(tasks) - len(kills),
            "single-statement share": _mean([float(t["single_statement"]) for t in tasks]),
            "docstring share": _mean([float(t["docstring"]) for t in tasks]),
            "methods share": _mean([float(t["method"]) for t in tasks]),
            "held-out: tasks audited": sum(t["held_out"] is not None for t in tasks),
            "held-out: tasks measured (a mutant the repository's tests reject)": len(measured),
            "held-out: known-wrong mutants": wrong,
            "held-out: false accepts": accepted,
            "held-out: false-accept rate": accepted / wrong if wrong else None,
            "held-out: tasks rewarding any": sum(t["held_out"]["false_accepts"] > 0 for t in measured),
            "candidate functions": candidates,
            "yield": len(tasks) / candidates if candidates else None,
            "build seconds (sum over repositories)": round(
                sum(r.row.get("seconds") or 0 for r in self.repositories), 1
            ),
        }

    def drop_reasons(self) -> list[tuple[str, str, int]]:
        """``(stage, reason, count)`` over the repositories, most frequent first."""
        counts: dict[tuple[str, str], int] = {}
        for r in self.repositories:
            if r.row.get("error") is not None:
                key = ("repository", str(r.row["error"]).split(";")[0][:60])
                counts[key] = counts.get(key, 0) + 1
            for stage, reason, n, *_ in r.facts.get("drops") or []:
                counts[(str(stage), str(reason))] = counts.get((str(stage), str(reason)), 0) + int(n)
        return [(s, reason, n) for (s, reason), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]

    def identity(self) -> dict[str, Any]:
        """The repositories built more than once: identical of compared, and those that differ."""
        again = [(r, ok) for r in self.repositories for _, ok in r.again]
        return {
            "compared": len(again),
            "identical": sum(ok for _, ok in again),
            "tasks_compared": sum(r.row.get("built") or 0 for r, _ in again),
            "different": sorted({_name(r) for r, ok in again if not ok}),
        }

    def cost(self) -> dict[str, Any]:
        """CPU and wall time of the slices that built the repositories first (each slice's
        ledger: its build, resumed calls included), the peak memory of any, and the
        projection; slices without a ledger's cost are counted apart."""
        first = sorted({r.record for r in self.repositories})
        costed = [self.slices[i]["cost"] for i in first if self.slices[i].get("cost")]
        cpu = sum(c["cpu_s"] for c in costed)
        tasks = self.totals()["tasks"]
        return {
            "slices": len(first),
            "slices_without_cost": len(first) - len(costed),
            "cpu_s": round(cpu, 1),
            "wall_s": round(sum(c["wall_s"] for c in costed), 1),
            "tasks_per_cpu_hour": round(tasks / (cpu / 3600), 1) if cpu and len(costed) == len(first) else None,
            "cpu_s_per_repository": round(cpu / len(self.repositories), 1) if self.repositories else None,
            "peak_rss_mib_driver": max((c["peak_rss_mib_driver"] for c in costed), default=None),
            "peak_rss_mib_largest_worker": max((c["peak_rss_mib_largest_worker"] for c in costed), default=None),
            "projection": projection(cpu, len(self.repositories), tasks) if len(costed) == len(first) else None,
        }

    def record(self, sources_name: str) -> dict[str, Any]:
        return {
            "sources": sources_name,
            "settings_digest": self.slices[0]["settings_digest"],
            "code_digest": self.slices[0].get("code_digest"),
            "slices": [
                {"date": s.get("date"), "commit": (s.get("checkout") or {}).get("commit"), "packages": len(s["facts"])}
                for s in self.slices
            ],
            "packages": len(self.repositories) + len(self.pending),
            "built": len(self.repositories),
            "pending": self.pending,
            "complete": not self.pending,
            "totals": self.totals(),
            "drop_reasons": self.drop_reasons(),
            "identity": self.identity(),
            "cost": self.cost(),
        }

    def markdown(self, sources_name: str) -> str:
        total = len(self.repositories) + len(self.pending)
        lines = [
            f"# The corpus of {sources_name}, combined from {len(self.slices)} slice build(s)",
            "",
            f"Settings digest {self.slices[0]['settings_digest']} (code {self.slices[0].get('code_digest')}); "
            f"{len(self.repositories)} of {total} packages built"
            + (f"; **partial**: {len(self.pending)} pending" if self.pending else "; complete")
            + ".",
            "",
            "| figure | value |",
            "|---|---|",
        ]
        lines += [f"| {k} | {_cell(v, k)} |" for k, v in self.totals().items()]
        identity = self.identity()
        lines += [
            f"| repositories built twice: identical of compared | {identity['identical']} of {identity['compared']} |",
            f"| repositories whose builds differ | {', '.join(identity['different']) or 'none'} |",
        ]
        cost = self.cost()
        if cost["tasks_per_cpu_hour"] is not None:
            lines += [
                f"| CPU time of the builds | {cost['cpu_s'] / 3600:.2f} h "
                f"({cost['cpu_s_per_repository']} s a repository) |",
                f"| tasks per CPU-hour | {cost['tasks_per_cpu_hour']} |",
                f"| peak memory: driver, largest sandbox worker (MiB) | {cost['peak_rss_mib_driver']}, "
                f"{cost['peak_rss_mib_largest_worker']} |",
            ]
        lines += ["", "## Drop reasons", "", "| stage | reason | count |", "|---|---|---|"]
        lines += [f"| {stage} | {reason} | {n} |" for stage, reason, n in self.drop_reasons()]
        lines += [
            "",
            "## Repositories",
            "",
            "| repository | split | candidates | tasks | near-duplicates | held-out known wrong | false accepts "
            "| builds |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in self.repositories:
            kept = self.kept(r)
            held = [t["held_out"] for t in kept if t["held_out"]]
            builds = 1 + len(r.again)
            same = "" if not r.again else (" (identical)" if all(ok for _, ok in r.again) else " (DIFFERENT)")
            lines.append(
                f"| {_name(r)} | {self.split.get(_name(r)) or '-'} | {r.row.get('candidates')} | {len(kept)} | "
                f"{len(r.facts['tasks']) - len(kept)} | {sum(h['known_wrong'] for h in held)} | "
                f"{sum(h['false_accepts'] for h in held)} | {builds}{same} |"
            )
        if self.pending:
            lines += ["", "## Pending", "", ", ".join(s.removeprefix("pypi:").split(" ", 1)[0] for s in self.pending)]
        return "\n".join(lines) + "\n"


def combine(
    slices: list[dict[str, Any]], sources: list[str], read_targets: Any = None, eval_fraction: float = EVAL_FRACTION
) -> Corpus:
    """The slices of one settings digest combined over the list ``sources``: see the module's
    docstring. ``read_targets(source, tasks)`` gives each task's target source by id
    (default: read back from the source, :func:`target_sources`); ``eval_fraction`` is the
    build's (``build_corpus``'s default).

    Raises:
        ConfigError: a record holds a repository without its facts, or one not on the list.
    """
    read_targets = read_targets or target_sources
    found: dict[str, Repository] = {}
    for index, record in enumerate(slices):
        for row in record.get("repositories") or []:
            source = row["source"]
            if source not in record["facts"]:
                raise ConfigError(f"slice record {index + 1} ({record.get('date')}): {source} has a row but no facts")
            if source in found:
                first = found[source].row
                same = first["tasks_sha256"] == row["tasks_sha256"] and first.get("error") == row.get("error")
                found[source].again.append((index, same))
            else:
                found[source] = Repository(source, row, record["facts"][source], index)
    unknown = sorted(found.keys() - set(sources))
    if unknown:
        raise ConfigError(f"slice records hold repositories not on the list: {', '.join(unknown)}")
    repositories = [found[s] for s in sources if s in found]
    pending = [s for s in sources if s not in found]
    groups = []
    for repository in repositories:
        texts = read_targets(repository.source, repository.facts["tasks"]) if repository.facts["tasks"] else {}
        groups.append(
            [
                SimpleNamespace(id=t["id"], target=SimpleNamespace(source=texts[t["id"]]))
                for t in repository.facts["tasks"]
            ]
        )
    duplicates = near_duplicates(groups, DUPLICATE_THRESHOLD)  # type: ignore[arg-type]
    with_tasks = [_name(r) for r in repositories if any(t["id"] not in duplicates for t in r.facts["tasks"])]
    return Corpus(slices, repositories, pending, duplicates, split_repositories(with_tasks, eval_fraction, SEED))


def target_sources(source: str, tasks: list[dict[str, Any]]) -> dict[str, str]:
    """Each task's target source by id, read back from the repository (the pinned sdist,
    cached): the function extraction finds at the task's file and qualified name, dedented.
    Its token 5-grams, what near-duplicates are found by, are the target's (a method's
    docstring may be indented otherwise; docstrings are not counted).

    Raises:
        ConfigError: a task's target is not found there.
    """
    repo = ingest(source, licenses="any")
    found, _, _ = extract_candidates(repo, max_candidates=1_000_000, keywords={})  # every function, none excluded
    by_place = {(c.file, c.qualname): textwrap.dedent(c.source) for c in found}
    texts = {}
    for task in tasks:
        text = by_place.get((task["file"], task["qualname"]))
        if text is None:
            raise ConfigError(f"{source}: no candidate {task['file']}::{task['qualname']} (task {task['name']})")
        texts[task["id"]] = text
    return texts


def _name(repository: Repository) -> str:
    """The repository's name in the split, as ``build_corpus`` names it."""
    row = repository.row
    return str(row.get("repository") or row["source"])


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _cell(value: Any, key: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        percent = key in ("avg branch coverage", "median mutant kill rate", "yield", "held-out: false-accept rate")
        return f"{100 * value:.1f}%" if percent else f"{value:.3g}"
    return str(value)


if __name__ == "__main__":
    main()
