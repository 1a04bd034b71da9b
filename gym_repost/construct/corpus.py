"""Corpus builds: many repositories through the executor, one task set out.

A *source list* is a text file with one source per line (``pypi:NAME==VERSION`` or a
path to a directory or archive; blank lines and ``#`` comments are skipped).
:func:`build_corpus` builds every repository as one unit of work (a thread, or a Ray
actor with its own sandbox) or, with ``chunk_size``, a repository of more candidates than
that as several units of that many candidates each (so that a long package does not
hold back the end of the corpus on a cluster), then, in this process alone:

1. keeps each finished unit's build in ``STATE/repos/`` as it comes back, so an
   interrupted build resumes at the unit level (a unit is built again only when its
   record is missing or was made with other settings or other code), and puts a split
   repository's units back together, in candidate order;
2. removes near-duplicate tasks across and within repositories (:func:`near_duplicates`:
   token 5-gram Jaccard similarity of the target's normalised source); the repository
   that comes first in the list, and within one the candidate that comes first, keeps its task;
3. splits train/eval *by repository* (:func:`split_repositories`): every task of a
   repository goes to the same split, so no repository is in both;
4. writes one task file (``OUTPUT``), the two splits beside it (``OUTPUT`` with
   ``.train.jsonl`` and ``.eval.jsonl``), and the per-repository statistics
   (``.stats.json``, ``.stats.md``).

What is kept never depends on which worker built what, or in what order: records are
assembled in the order of the list.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import math
import time
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gym_repost.construct.pipeline import BuildSettings, BuildWork, count_candidates
from gym_repost.construct.pypi import split_pin
from gym_repost.construct.stats import single_statement, table2
from gym_repost.errors import BuildError, ConfigError, InfrastructureError, SourceUnreachableError
from gym_repost.executor import Executor
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask, save_tasks

logger = logging.getLogger(__name__)

SOURCE_LIST_SUFFIXES = (".txt", ".list")
_RECORD_VERSION = 1


def is_source_list(source: str) -> bool:
    """``source`` names a source list (an existing ``.txt`` or ``.list`` file)."""
    path = Path(source)
    return path.suffix in SOURCE_LIST_SUFFIXES and path.is_file()


def read_sources(path: str | Path) -> list[str]:
    """The sources of a source list, in order; relative paths resolve from the list's folder.

    A line ``pypi:NAME==VERSION --hash=sha256:HEX`` pins the sdist's digest: a list of
    pinned lines is a lock file (the build uses those archives and no others).

    Raises:
        ConfigError: a line that is neither ``pypi:NAME[==VERSION]`` (maybe pinned) nor an
            existing path (with the file and line number), a source listed twice, or no
            source at all.
    """
    path = Path(path)
    sources: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        source = _source_of(line, path.parent)
        if source is None:
            raise ConfigError(
                f"{path}:{number}: {line!r} is neither pypi:NAME==VERSION [--hash=sha256:HEX] nor an existing path"
            )
        if split_pin(source)[0] in {split_pin(s)[0] for s in sources}:
            raise ConfigError(f"{path}:{number}: {line!r} is listed twice")
        sources.append(source)
    if not sources:
        raise ConfigError(f"{path}: no sources (one pypi:NAME==VERSION or path per line)")
    return sources


def _source_of(line: str, base: Path) -> str | None:
    if line.startswith("pypi:"):
        try:
            spec, digest = split_pin(line)
        except BuildError:
            return None
        name = spec.removeprefix("pypi:").split("==", 1)[0]
        if not name or " " in spec:
            return None
        return spec if digest is None else f"{spec} --hash=sha256:{digest}"
    for candidate in (Path(line), base / line):
        if candidate.exists():
            return str(candidate.resolve())
    return None


@dataclass
class RepositoryBuild:
    """What one repository of a corpus contributed (picklable: it comes back from a worker)."""

    source: str
    name: str = ""
    version: str | None = None
    license: str | None = None
    tasks: list[FunctionTask] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    """Why the repository gave nothing (a refused license, an unusable source, a sandbox failure)."""
    infrastructure: bool = False
    """The error was the infrastructure's: not kept, so a resumed build tries again."""
    chunk: tuple[int, int] | None = None
    """``(index, size)`` of a unit of a split repository (:class:`Unit`); None: the whole."""

    def to_json(self, settings_digest: str) -> dict[str, Any]:
        """The record kept in ``STATE/repos/``."""
        record = {k: v for k, v in asdict(self).items() if k != "tasks"}
        return {
            "record_version": _RECORD_VERSION,
            "settings": settings_digest,
            **record,
            "tasks": [t.model_dump(mode="json") for t in self.tasks],
        }

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> RepositoryBuild:
        """A record read back from ``STATE/repos/``."""
        fields = {k: v for k, v in record.items() if k not in ("record_version", "settings", "tasks")}
        if fields.get("chunk") is not None:
            fields["chunk"] = tuple(fields["chunk"])
        return cls(**fields, tasks=[FunctionTask.model_validate(t) for t in record["tasks"]])


@dataclass(frozen=True)
class Unit:
    """One unit of work of a corpus build: a repository, or (``chunk``: ``(index, size)``)
    the candidates ``[index * size, (index + 1) * size)`` of one."""

    source: str
    chunk: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        return self.source if self.chunk is None else f"{self.source} #{self.chunk[0]}/{self.chunk[1]}"


def plan_units(sources: Sequence[str], settings: BuildSettings, chunk_size: int) -> list[Unit]:
    """The units of work of a corpus build, in list order: one per repository, or, for a
    repository of more than ``chunk_size`` candidates (``chunk_size`` > 0), one per
    ``chunk_size`` of them. Counting ingests and extracts each source here (no sandbox); a
    source that cannot be used is one unit, whose build reports why."""
    if chunk_size <= 0:
        return [Unit(s) for s in sources]
    units = []
    for source in sources:
        try:
            count = count_candidates(source, settings)
        except BuildError:
            count = 0
        parts = math.ceil(count / chunk_size)
        units += [Unit(source, (i, chunk_size)) for i in range(parts)] if parts > 1 else [Unit(source)]
    return units


def merge_units(builds: Sequence[RepositoryBuild]) -> RepositoryBuild:
    """A split repository's unit builds (in chunk order) as the build of the whole: tasks in
    candidate order, Table 2 over them, drop reasons and audits added up, seconds summed."""
    if len(builds) == 1 and builds[0].chunk is None:
        return builds[0]
    named = next((b for b in builds if b.name), builds[0])
    tasks = [t for b in builds for t in b.tasks]
    candidates = sum(b.statistics.get("table2", {}).get("candidate functions", 0) for b in builds)
    counts: dict[tuple[str, str], list[Any]] = {}
    for b in builds:
        for stage, reason, n, example in b.statistics.get("drops", []):
            row = counts.setdefault((stage, reason), [stage, reason, 0, example])
            row[2] += n
    drops = sorted(counts.values(), key=lambda row: -row[2])
    audited = {k: v for b in builds for k, v in (b.statistics.get("audited") or {}).items()}
    return RepositoryBuild(
        builds[0].source,
        name=named.name,
        version=named.version,
        license=named.license,
        tasks=tasks,
        statistics={
            "table2": table2(candidates, tasks),
            "drops": [tuple(row) for row in drops],
            "infra_errors": sum(b.statistics.get("infra_errors", 0) for b in builds),
            "audited": audited,
            "limits": list(dict.fromkeys(n for b in builds for n in b.statistics.get("limits") or [])),
            "installed": sorted({n for b in builds for n in b.statistics.get("installed") or []}, key=str.lower),
            "units": len(builds),
        },
        seconds=sum(b.seconds for b in builds),
        error=next((b.error for b in builds if b.error), None),
        infrastructure=any(b.infrastructure for b in builds),
    )


@dataclass(frozen=True)
class RepositoryWork:
    """The unit of work of a corpus build: one repository (a source) or a :class:`Unit`,
    built in the worker's sandbox."""

    settings: BuildSettings

    def __call__(self, item: str | Unit, sandbox: Sandbox | None) -> RepositoryBuild:
        unit = item if isinstance(item, Unit) else Unit(item)
        source, chunk, started = unit.source, unit.chunk, time.perf_counter()
        settings = self.settings if chunk is None else replace(self.settings, chunk=chunk)
        try:
            result = BuildWork(settings)(source, sandbox)
        except SourceUnreachableError as exc:  # before BuildError, its base: not kept, tried again
            logger.error("%s: %s", unit.key, exc)
            return RepositoryBuild(
                source, error=str(exc), infrastructure=True, seconds=time.perf_counter() - started, chunk=chunk
            )
        except BuildError as exc:
            return RepositoryBuild(source, error=str(exc), seconds=time.perf_counter() - started, chunk=chunk)
        except InfrastructureError as exc:
            logger.error("%s: %s: %s", unit.key, type(exc).__name__, exc)
            error = f"{type(exc).__name__}: {exc}"
            return RepositoryBuild(
                source, error=error, infrastructure=True, seconds=time.perf_counter() - started, chunk=chunk
            )
        stats = result.statistics()
        return RepositoryBuild(
            source,
            name=result.repo.name,
            version=result.repo.version,
            license=result.repo.license,
            tasks=list(result.tasks),
            statistics={
                "table2": stats["table2"],
                "drops": stats["drops"],
                "infra_errors": stats["infra_errors"],
                "audited": result.audited,
                "limits": result.all_limits(),
                "installed": result.installed,
            },
            seconds=time.perf_counter() - started,
            chunk=chunk,
        )


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of gym-repost's own code (every module of the package, the programs it ships
    to the sandbox included): a repository built by other code is built again."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def settings_digest(settings: BuildSettings) -> str:
    """What makes two repository builds the same (a resumed build reuses only those): the
    settings and the code that builds (:func:`code_digest`). ``workers`` is left out: it
    changes how fast a build is, never what it keeps."""
    fields = sorted((k, v) for k, v in asdict(settings).items() if k != "workers")
    return hashlib.sha256(repr((fields, code_digest())).encode()).hexdigest()[:16]


class CorpusState:
    """``STATE/repos/<key>.json``: each finished unit (a repository, or a chunk of one),
    written as it comes back."""

    def __init__(self, root: Path, settings: BuildSettings) -> None:
        self.root = root
        self.settings = settings
        self.digest = settings_digest(settings)
        (root / "repos").mkdir(parents=True, exist_ok=True)

    def _path(self, unit: Unit) -> Path:
        return self.root / "repos" / (hashlib.sha256(unit.key.encode()).hexdigest()[:20] + ".json")

    def _digest(self, unit: Unit) -> str:
        return self.digest if unit.chunk is None else settings_digest(replace(self.settings, chunk=unit.chunk))

    def load(self, item: str | Unit) -> RepositoryBuild | None:
        """The kept build of a source (or unit) made with these settings, else None."""
        unit = item if isinstance(item, Unit) else Unit(item)
        path = self._path(unit)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if record.get("record_version") != _RECORD_VERSION or record.get("settings") != self._digest(unit):
            return None
        if record.get("source") != unit.source:
            return None
        return RepositoryBuild.from_json(record)

    def save(self, build: RepositoryBuild) -> None:
        """Keep ``build`` (atomically); infrastructure failures are not kept."""
        if build.infrastructure:
            return
        unit = Unit(build.source, build.chunk)
        path = self._path(unit)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(build.to_json(self._digest(unit))), encoding="utf-8")
        partial.replace(path)


def tasks_digest(tasks: Sequence[FunctionTask]) -> str:
    """The sha256 of ``tasks`` as a task file holds them (a JSON line each, as
    :func:`~gym_repost.task.save_tasks` writes them): a repository's build, near-duplicates
    included, in a form that a record keeps and any later build can be checked against."""
    digest = hashlib.sha256()
    for task in tasks:
        digest.update((task.with_id().model_dump_json() + "\n").encode("utf-8"))
    return digest.hexdigest()


def state_repositories(state: Path) -> list[RepositoryBuild]:
    """The builds kept in a corpus state (``OUTPUT.corpus-state``), whatever settings and code
    made them: a split repository's units put back together, sorted by source (a unit
    missing before the last one kept leaves the repository out; a missing last unit cannot
    be told from the state, and gives a build that differs from the whole). For comparing
    two builds, or a build with a record, without building anything."""
    units: dict[str, list[RepositoryBuild]] = {}
    for path in sorted((state / "repos").glob("*.json")):
        try:
            build = RepositoryBuild.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"{path}: not a corpus state's record of a repository ({exc})") from exc
        units.setdefault(build.source, []).append(build)
    found = []
    for source in sorted(units):
        parts = sorted(units[source], key=lambda b: b.chunk or (0, 0))
        size = parts[0].chunk[1] if parts[0].chunk else None
        whole = [b for b in parts if b.chunk is None]
        if whole:
            found.append(whole[0])
        elif size and [b.chunk[0] for b in parts if b.chunk] == list(range(len(parts))):
            found.append(merge_units(parts))
    return found


def _shingles(source: str, size: int = 5) -> frozenset[tuple[str, ...]]:
    """Token ``size``-grams of a function's source, layout, comments and docstrings left out."""
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT, tokenize.ENDMARKER}
    try:
        tokens = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skip]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        tokens = source.split()
    tokens = [t for t in tokens if not (t.startswith(('"""', "'''")))]
    if len(tokens) < size:
        return frozenset({tuple(tokens)})
    return frozenset(tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1))


def _jaccard(a: frozenset[Any], b: frozenset[Any]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def near_duplicates(groups: Sequence[Sequence[FunctionTask]], threshold: float = 0.9) -> dict[str, str]:
    """Tasks whose target is a near-duplicate of an *earlier* task's target: one of an
    earlier group (repository), or an earlier one of its own group.

    Similarity is the Jaccard index of token 5-grams of the targets' sources (comments,
    layout and docstrings left out); ``threshold`` or more is a duplicate. Extraction
    already drops a body found elsewhere in its repository; this removes near copies too.

    Returns:
        ``{removed task id: the id of the task it duplicates}``.
    """
    kept: list[tuple[str, frozenset[Any]]] = []
    removed: dict[str, str] = {}
    for group in groups:
        for task in group:
            shingles = _shingles(task.target.source)
            size = len(shingles)
            match = next(
                (
                    other
                    for other, theirs in kept
                    if min(size, len(theirs)) >= threshold * max(size, len(theirs))
                    and _jaccard(shingles, theirs) >= threshold
                ),
                None,
            )
            if match is None:
                kept.append((task.id, shingles))
            else:
                removed[task.id] = match
    return removed


def split_repositories(names: Sequence[str], eval_fraction: float, seed: int = 0) -> dict[str, str]:
    """``{repository: "train" | "eval"}``: the repositories ranked by a seeded hash of
    their name, the first ``ceil(eval_fraction * n)`` to eval (at least one when there are
    two or more and the fraction is positive, never all of them)."""
    if not 0.0 <= eval_fraction < 1.0:
        raise ConfigError(f"eval fraction {eval_fraction}: choose a value in [0, 1)")
    ranked = sorted(names, key=lambda n: hashlib.sha256(f"{seed}:{n}".encode()).hexdigest())
    count = math.ceil(eval_fraction * len(ranked)) if eval_fraction > 0 and len(ranked) >= 2 else 0
    count = min(count, len(ranked) - 1) if ranked else 0
    return {name: ("eval" if i < count else "train") for i, name in enumerate(ranked)}


@dataclass
class CorpusResult:
    """A corpus build: each repository's build, the removals and the split."""

    repositories: list[RepositoryBuild]
    duplicates: dict[str, str]
    split: dict[str, str]
    resumed: int = 0
    """Units of work (repositories, or chunks of one) taken from an earlier, interrupted build."""

    def tasks(self, split: str | None = None) -> list[FunctionTask]:
        """The kept tasks (of one split), in the order of the source list."""
        return [
            t
            for r in self.repositories
            for t in r.tasks
            if t.id not in self.duplicates and (split is None or self.split.get(_key(r)) == split)
        ]

    def installed(self) -> list[str]:
        """``NAME==VERSION`` of what pip installed for the repositories' builds, each in its
        own package set, sorted: what a constraints file holds the next build to."""
        found = {pin for r in self.repositories for pin in r.statistics.get("installed") or []}
        return sorted(found, key=str.lower)

    def rows(self) -> list[dict[str, Any]]:
        """One statistics row per repository: size, yield, tests, coverage, kill rate, time, split."""
        rows = []
        for r in self.repositories:
            t2 = r.statistics.get("table2", {})
            kept = [t for t in r.tasks if t.id not in self.duplicates]
            rows.append(
                {
                    "repository": _key(r),
                    "source": r.source,
                    "license": r.license,
                    "split": self.split.get(_key(r)) if kept else None,
                    "candidates": t2.get("candidate functions", 0),
                    "built": len(r.tasks),
                    "near_duplicates": len(r.tasks) - len(kept),
                    "tasks": len(kept),
                    "yield": t2.get("yield"),
                    "avg_tests": _mean([t.metadata.num_tests for t in kept]),
                    "avg_asserts": _mean([t.metadata.num_asserts for t in kept]),
                    "avg_branch_coverage": t2.get("avg branch coverage"),
                    "median_kill_rate": t2.get("median mutant kill rate"),
                    "single_statement": _share([single_statement(t) for t in kept]),
                    **_audit_columns(r, kept),
                    "limits": len(r.statistics.get("limits") or []),
                    "seconds": round(r.seconds, 1),
                    "error": r.error,
                    "tasks_sha256": tasks_digest(r.tasks),
                }
            )
        return rows

    def totals(self) -> dict[str, Any]:
        """RepoST's Table 2 totals: tasks, repositories, tests and asserts per task, coverage."""
        tasks = self.tasks()
        candidates = sum(r.statistics.get("table2", {}).get("candidate functions", 0) for r in self.repositories)
        summary = table2(candidates, tasks)
        return {
            "repositories": len(self.repositories),
            "repositories with tasks": sum(
                any(t.id not in self.duplicates for t in r.tasks) for r in self.repositories
            ),
            "repositories failed": sum(r.error is not None for r in self.repositories),
            "tasks": len(tasks),
            "train tasks": len(self.tasks("train")),
            "eval tasks": len(self.tasks("eval")),
            "near-duplicates removed": len(self.duplicates),
            "avg tests per task": _mean([t.metadata.num_tests for t in tasks]),
            "avg asserts per task": summary["avg test cases"],
            "avg branch coverage": summary["avg branch coverage"],
            "median mutant kill rate": summary["median mutant kill rate"],
            "branch coverage n/a (under 3 arcs)": summary["branch coverage n/a (under 3 arcs)"],
            "kill rate n/a (under 3 mutants)": summary["kill rate n/a (under 3 mutants)"],
            "single-statement share": summary["single-statement share"],
            "docstring share": summary["docstring share"],
            "methods share": summary["methods share"],
            **_audit_totals(self.repositories, self.duplicates),
            "candidate functions": candidates,
            "yield": summary["yield"],
            "repositories a limit cut short": sum(bool(r.statistics.get("limits")) for r in self.repositories),
            "build seconds (sum over repositories)": round(sum(r.seconds for r in self.repositories), 1),
        }

    def drop_reasons(self) -> list[tuple[str, str, int]]:
        """``(stage, reason, count)`` over every repository, most frequent first; a
        repository that failed as a whole counts once under ``repository``."""
        counts: dict[tuple[str, str], int] = {}
        for build in self.repositories:
            if build.error is not None:
                reason = "infrastructure failure" if build.infrastructure else build.error.split(";")[0][:60]
                counts[("repository", reason)] = counts.get(("repository", reason), 0) + 1
            for row in build.statistics.get("drops") or []:
                key = (str(row[0]), str(row[1]))
                counts[key] = counts.get(key, 0) + int(row[2])
        return [(stage, reason, n) for (stage, reason), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _audited(build: RepositoryBuild, tasks: Sequence[FunctionTask]) -> list[dict[str, Any]]:
    """The audit records of ``tasks`` (those the build audited, ``--max-false-accept``)."""
    records = build.statistics.get("audited") or {}
    return [records[t.id] for t in tasks if t.id in records]


def _audit_columns(build: RepositoryBuild, kept: Sequence[FunctionTask]) -> dict[str, Any]:
    """A row's audit columns: known-wrong mutants, false accepts, tasks rewarding any."""
    records = _audited(build, kept)
    wrong = sum(a["known_wrong"] for a in records)
    accepted = sum(a["false_accepts"] for a in records)
    return {
        "known_wrong": wrong if records else None,
        "false_accepts": accepted if records else None,
        "false_accept_rate": accepted / wrong if wrong else None,
        "tasks_rewarding_any": sum(a["false_accepts"] > 0 for a in records) if records else None,
    }


def _audit_totals(repositories: Sequence[RepositoryBuild], duplicates: dict[str, str]) -> dict[str, Any]:
    """The audit's totals over the kept tasks (empty when no build was audited)."""
    records = [a for r in repositories for a in _audited(r, [t for t in r.tasks if t.id not in duplicates])]
    if not records:
        return {}
    wrong = sum(a["known_wrong"] for a in records)
    accepted = sum(a["false_accepts"] for a in records)
    with_wrong = [a for a in records if a["known_wrong"]]
    return {
        "audited tasks": len(records),
        "audited tasks with known-wrong mutants": len(with_wrong),
        "known-wrong mutants": wrong,
        "false accepts": accepted,
        "false-accept rate": accepted / wrong if wrong else None,
        "tasks rewarding a known-wrong mutant": sum(a["false_accepts"] > 0 for a in with_wrong),
        "share of tasks rewarding any": (
            sum(a["false_accepts"] > 0 for a in with_wrong) / len(with_wrong) if with_wrong else None
        ),
        "audit mutants left unrun by a task's CPU budget": sum(a.get("not_run", 0) for a in records),
        "kept tasks the audit could not run (kept unaudited)": sum(a.get("status") == "error" for a in records),
        "kept tasks no passing upstream test covers": sum(a.get("status") == "uncovered" for a in records),
    }


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _key(build: RepositoryBuild) -> str:
    """The repository's name in the split (its source when it was never ingested)."""
    return build.name or build.source


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def corpus_paths(output: Path) -> dict[str, Path]:
    """The files a corpus build writes beside ``OUTPUT``, and its resume state."""
    stem = output.name.removesuffix(".jsonl")
    return {
        "tasks": output,
        "train": output.with_name(f"{stem}.train.jsonl"),
        "eval": output.with_name(f"{stem}.eval.jsonl"),
        "stats_json": output.with_name(f"{stem}.stats.json"),
        "stats_md": output.with_name(f"{stem}.stats.md"),
        "state": output.with_name(f"{stem}.corpus-state"),
    }


def build_corpus(
    sources: Sequence[str],
    output: Path,
    settings: BuildSettings,
    executor: Executor,
    *,
    eval_fraction: float = 0.2,
    duplicate_threshold: float = 0.9,
    on_repository: Callable[[RepositoryBuild], None] | None = None,
    chunk_size: int = 0,
    on_units: Callable[[list[Unit]], None] | None = None,
) -> CorpusResult:
    """Build every source on ``executor`` and write the corpus.

    A unit of work is a repository, or with ``chunk_size`` > 0 each ``chunk_size``
    candidates of a repository that has more (:func:`plan_units`). Units already built
    into ``output``'s state with the same settings and code are not built again.
    ``on_units`` is called with the plan (every unit, built or not), ``on_repository``
    with each unit's build as it comes back. Writes ``output``
    (every kept task), the train and eval files, and the statistics (see :func:`corpus_paths`).

    Raises:
        ConfigError: a bad ``eval_fraction`` or ``chunk_size``.
    """
    split_repositories([], eval_fraction)  # checks the fraction before any build
    if chunk_size < 0:
        raise ConfigError(f"chunk size {chunk_size}: choose 0 (a repository per unit) or a number of candidates")
    paths = corpus_paths(output)
    state = CorpusState(paths["state"], settings)
    units = plan_units(sources, settings, chunk_size)
    if on_units is not None:
        on_units(units)
    found = {u: b for u in units if (b := state.load(u)) is not None}
    todo = [u for u in units if u not in found]
    logger.info("corpus: %d units of work to build, %d already built", len(todo), len(found))

    def keep(build: RepositoryBuild) -> None:
        state.save(build)
        if on_repository is not None:
            on_repository(build)

    built = dict(zip(todo, executor.map(RepositoryWork(settings), todo, keep)))
    by_source: dict[str, list[RepositoryBuild]] = {}
    for unit in units:
        by_source.setdefault(unit.source, []).append(found.get(unit) or built[unit])
    repositories = [merge_units(by_source[s]) for s in sources]
    result = assemble(repositories, eval_fraction, duplicate_threshold, settings.seed)
    result.resumed = len(found)
    write_corpus(result, paths)
    return result


def assemble(
    repositories: list[RepositoryBuild], eval_fraction: float, duplicate_threshold: float, seed: int
) -> CorpusResult:
    """Near-duplicates removed and the split made over builds in source-list order."""
    duplicates = near_duplicates([r.tasks for r in repositories], duplicate_threshold)
    with_tasks = [_key(r) for r in repositories if any(t.id not in duplicates for t in r.tasks)]
    return CorpusResult(repositories, duplicates, split_repositories(with_tasks, eval_fraction, seed))


def write_corpus(result: CorpusResult, paths: dict[str, Path]) -> None:
    """The task file, the two splits and the statistics (JSON and a Markdown table)."""
    save_tasks(result.tasks(), paths["tasks"])
    save_tasks(result.tasks("train"), paths["train"])
    save_tasks(result.tasks("eval"), paths["eval"])
    stats = {"totals": result.totals(), "repositories": result.rows(), "duplicates": result.duplicates}
    paths["stats_json"].write_text(json.dumps(stats, indent=2), encoding="utf-8")
    paths["stats_md"].write_text(statistics_markdown(result), encoding="utf-8")


def statistics_markdown(result: CorpusResult) -> str:
    """The per-repository table and the totals as Markdown."""
    columns: tuple[str, ...] = ("repository", "split", "candidates", "tasks", "near_duplicates", "yield")
    columns += ("avg_asserts", "avg_branch_coverage", "median_kill_rate", "single_statement")
    if any(r.statistics.get("audited") for r in result.repositories):
        columns += ("known_wrong", "false_accepts", "false_accept_rate", "tasks_rewarding_any")
    columns += ("limits", "seconds", "error")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in result.rows():
        lines.append("| " + " | ".join(_cell(row[c]) for c in columns) + " |")
    lines += ["", "| total | value |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in result.totals().items()]
    lines += ["", "| stage | drop reason | candidates |", "|---|---|---|"]
    lines += [f"| {stage} | {_cell(reason)} | {n} |" for stage, reason, n in result.drop_reasons()]
    limited = [(_key(r), note) for r in result.repositories for note in r.statistics.get("limits") or []]
    if limited:
        lines += ["", "| repository | a limit that cut its build short |", "|---|---|"]
        lines += [f"| {name} | {note.replace('|', '/')[:240]} |" for name, note in limited]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value).replace("|", "/")[:80]


__all__ = [
    "CorpusResult",
    "RepositoryBuild",
    "RepositoryWork",
    "Unit",
    "build_corpus",
    "corpus_paths",
    "is_source_list",
    "merge_units",
    "near_duplicates",
    "plan_units",
    "read_sources",
    "split_repositories",
    "statistics_markdown",
]
