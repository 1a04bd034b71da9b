"""Corpus builds: source lists, near-duplicates across repositories, the split by
repository, and resuming at the repository level."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from pathlib import Path

import pytest

from gym_repost.construct import corpus as corpus_module
from gym_repost.construct.corpus import (
    CorpusResult,
    RepositoryBuild,
    Unit,
    build_corpus,
    corpus_paths,
    merge_units,
    near_duplicates,
    plan_units,
    read_sources,
    split_repositories,
    state_repositories,
    statistics_markdown,
    tasks_digest,
)
from gym_repost.construct.pipeline import BuildResult, BuildSettings, _tracing_limits
from gym_repost.construct.stages import SourceRepository
from gym_repost.construct.testgen.trace import TraceResult
from gym_repost.errors import ConfigError
from gym_repost.executor import LocalExecutor
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, load_tasks

ROOT = Path(__file__).resolve().parents[2]
MIT = (ROOT / "tasks" / "demo" / "repo" / "LICENSE").read_text()

WORDS = textwrap.dedent('''\
    def count_vowels(text):
        """Vowels in text."""
        total = 0
        for ch in text.lower():
            if ch in "aeiou":
                total += 1
        return total


    def initials(name):
        """First letters of each word, upper-cased."""
        parts = [p for p in name.split() if p]
        if not parts:
            return ""
        return "".join(p[0].upper() for p in parts)
    ''')

NUMBERS = textwrap.dedent('''\
    def clamp(value, low, high):
        """value limited to [low, high]."""
        if value < low:
            return low
        if value > high:
            return high
        return value
    ''')


def _repo(tmp_path: Path, name: str, modules: dict[str, str]) -> Path:
    root = tmp_path / name
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    for module, text in modules.items():
        (root / name / f"{module}.py").write_text(text)
    (root / "LICENSE").write_text(MIT)
    return root


def test_a_source_list_is_read_in_order_and_bad_lines_say_where(tmp_path: Path) -> None:
    (tmp_path / "here").mkdir()
    listing = tmp_path / "sources.txt"
    listing.write_text("# a corpus\n\npypi:toolz==1.2.0\nhere  # a folder beside the list\npypi:semver\n")
    assert read_sources(listing) == ["pypi:toolz==1.2.0", str((tmp_path / "here").resolve()), "pypi:semver"]
    listing.write_text("pypi:toolz==1.2.0\nmissing/folder\n")
    with pytest.raises(ConfigError, match=r"sources\.txt:2: 'missing/folder' is neither"):
        read_sources(listing)
    pin = "a" * 64
    listing.write_text(f"pypi:toolz==1.2.0   --hash=sha256:{pin.upper()}  # pinned\n")
    assert read_sources(listing) == [f"pypi:toolz==1.2.0 --hash=sha256:{pin}"]
    listing.write_text("pypi:toolz==1.2.0 --hash=sha256:12\n")
    with pytest.raises(ConfigError, match=r"sources\.txt:1: .* is neither pypi:NAME==VERSION \[--hash=sha256:HEX\]"):
        read_sources(listing)
    listing.write_text(f"pypi:toolz==1.2.0\npypi:toolz==1.2.0 --hash=sha256:{pin}\n")
    with pytest.raises(ConfigError, match=r"sources\.txt:2: .* is listed twice"):
        read_sources(listing)
    listing.write_text("pypi:toolz==1.2.0\npypi:toolz==1.2.0\n")
    with pytest.raises(ConfigError, match=r"sources\.txt:2: .* is listed twice"):
        read_sources(listing)
    listing.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no sources"):
        read_sources(listing)


def _task(base: FunctionTask, name: str, source: str) -> FunctionTask:
    task = base.model_copy(deep=True)
    task.name, task.target.source = name, source
    return task.with_id()


def test_near_duplicates_are_removed_across_and_within_repositories(function_task: FunctionTask) -> None:
    first = function_task.target.source
    renamed = first.replace("total", "acc")  # the same code, one local renamed: not a near-duplicate
    reformatted = first.replace("    ", "        ") + "\n# a comment\n"  # layout and comments only
    a, b = _task(function_task, "a", first), _task(function_task, "b", reformatted)
    c, d = _task(function_task, "c", renamed), _task(function_task, "d", first)
    assert near_duplicates([[a, d], [b, c]]) == {d.id: a.id, b.id: a.id}  # within one repository too
    assert near_duplicates([[b], [a]]) == {a.id: b.id}  # the earlier repository keeps its task
    assert near_duplicates([[a], [c]], threshold=0.3) == {c.id: a.id}


def test_the_split_is_by_repository_seeded_and_never_empties_train() -> None:
    names = [f"repo{i}" for i in range(10)]
    split = split_repositories(names, 0.2, seed=0)
    assert sorted(split) == names and sum(v == "eval" for v in split.values()) == 2
    assert split == split_repositories(list(reversed(names)), 0.2, seed=0)  # order of the list does not matter
    assert split != split_repositories(names, 0.2, seed=1)
    assert set(split_repositories(["only"], 0.5).values()) == {"train"}
    assert sum(v == "eval" for v in split_repositories(names[:3], 0.9).values()) == 2
    assert set(split_repositories(names, 0.0).values()) == {"train"}
    with pytest.raises(ConfigError, match="eval fraction 1.0"):
        split_repositories(names, 1.0)


def test_drop_reasons_are_counted_over_every_repository() -> None:
    drops = [["extract", "test code", 3, "a"], ["quality", "too few inputs", 1, "b"]]
    result = CorpusResult(
        [
            RepositoryBuild("pypi:a==1", statistics={"drops": drops}),
            RepositoryBuild("pypi:b==1", statistics={"drops": [["extract", "test code", 2, "c"]]}),
            RepositoryBuild("pypi:c==1", error="c is licensed GPL-3.0 (copyleft); pass --licenses any"),
            RepositoryBuild("pypi:d==1", error="SandboxError: gone", infrastructure=True),
        ],
        duplicates={},
        split={},
    )
    assert result.drop_reasons() == [
        ("extract", "test code", 5),
        ("quality", "too few inputs", 1),
        ("repository", "c is licensed GPL-3.0 (copyleft)", 1),
        ("repository", "infrastructure failure", 1),
    ]
    assert "| extract | test code | 5 |" in statistics_markdown(result)


def test_a_repository_whose_suite_a_limit_cut_short_is_reported_not_fatal(tmp_path: Path) -> None:
    """A package whose upstream tests explode: the tracer's CPU budget stops them, the build
    goes on with the calls recorded until then, and the corpus table says so. The limits are
    the build's own record, never picked out of its notes by their words."""
    traced = TraceResult(calls={}, tests_run=7, budget_limited=True)
    budget = _tracing_limits(traced)[0]
    assert budget.startswith("tracing: the call budget (150,000,000 calls) stopped the repository's tests after 7")
    repo = SourceRepository(name="a", version="1", source="a", root=tmp_path, files={})
    built = BuildResult(
        repo=repo,
        tasks=[],
        drops=[],
        candidates=0,
        timings={},
        notes=["tracing: installed providers of yaml (missing: yaml)", "a note that names a CPU budget", budget],
        limits=[budget, budget],
    )
    assert built.all_limits() == [budget]
    units = [
        RepositoryBuild("pypi:a==1", name="a", statistics={"limits": [budget]}, chunk=(0, 5)),
        RepositoryBuild("pypi:a==1", name="a", statistics={"limits": [budget]}, chunk=(1, 5)),
    ]
    whole = merge_units(units)
    assert whole.statistics["limits"] == [budget] and whole.statistics["units"] == 2
    result = CorpusResult([whole, RepositoryBuild("pypi:b==1", name="b")], duplicates={}, split={})
    assert [row["limits"] for row in result.rows()] == [1, 0]
    assert result.totals()["repositories a limit cut short"] == 1
    assert f"| a | {budget} |" in statistics_markdown(result)


def test_a_corpus_builds_dedupes_splits_and_resumes_per_repository(
    tmp_path: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    alpha = _repo(tmp_path, "alpha", {"words": WORDS})
    beta = _repo(tmp_path, "beta", {"words": WORDS, "numbers": NUMBERS})  # copies alpha's functions
    sources, output = [str(alpha), str(beta)], tmp_path / "out" / "corpus.jsonl"
    output.parent.mkdir()
    settings = BuildSettings(max_candidates=5, test_executions=200, trace=False)
    built: list[str] = []
    result = build_corpus(
        sources,
        output,
        settings,
        LocalExecutor(2, sandbox),
        eval_fraction=0.5,
        on_repository=lambda r: built.append(r.source),
    )
    assert sorted(built) == sorted(sources) and result.resumed == 0
    names = {r.name: [t.target.qualname for t in r.tasks] for r in result.repositories}
    assert {"count_vowels", "initials"} <= set(names["alpha"]) and "clamp" in names["beta"]
    kept = [t.target.qualname for t in result.tasks()]
    assert sorted(kept) == sorted(names["alpha"] + ["clamp"])  # beta's copies of alpha's functions removed
    assert len(result.duplicates) == len(names["beta"]) - 1
    paths = corpus_paths(output)
    train, evaluation = list(load_tasks(paths["train"])), list(load_tasks(paths["eval"]))
    assert len(train) + len(evaluation) == len(load_tasks(output)) == len(kept)
    repos = {split: {t.provenance.source for t in tasks} for split, tasks in (("t", train), ("e", evaluation))}
    assert repos["t"] and repos["e"] and not repos["t"] & repos["e"]  # no repository in both
    stats = json.loads(paths["stats_json"].read_text())
    assert stats["totals"]["tasks"] == len(kept) and stats["totals"]["near-duplicates removed"] == len(
        result.duplicates
    )
    assert [row["repository"] for row in stats["repositories"]] == ["alpha", "beta"]
    table = paths["stats_md"].read_text()
    assert "| alpha |" in table
    # Table 2's shares and the drop reasons, counted over every repository
    assert 0 <= stats["totals"]["docstring share"] <= 1 and "methods share" in stats["totals"]
    assert "| stage | drop reason | candidates |" in table

    built.clear()  # a second run builds nothing: both repositories are on disk
    again = build_corpus(
        sources,
        output,
        settings,
        LocalExecutor(2, sandbox),
        eval_fraction=0.5,
        on_repository=lambda r: built.append(r.source),
    )
    assert built == [] and again.resumed == 2 and [t.id for t in again.tasks()] == [t.id for t in result.tasks()]
    for record in (paths["state"] / "repos").iterdir():  # an interrupted build: one repository missing
        if json.loads(record.read_text())["source"] == str(beta):
            record.unlink()
    resumed = build_corpus(
        sources,
        output,
        settings,
        LocalExecutor(2, sandbox),
        eval_fraction=0.5,
        on_repository=lambda r: built.append(r.source),
    )
    assert built == [str(beta)] and resumed.resumed == 1
    assert [t.id for t in resumed.tasks()] == [t.id for t in result.tasks()]
    with monkeypatch.context() as patch:  # other code (a changed tracer, builder or program): built again
        patch.setattr(corpus_module, "code_digest", lambda: "another-version")
        assert build_corpus(sources, output, settings, LocalExecutor(2, sandbox), eval_fraction=0.5).resumed == 0
    other = BuildSettings(max_candidates=1, test_executions=200, trace=False)  # other settings: built again
    assert build_corpus(sources, output, other, LocalExecutor(2, sandbox), eval_fraction=0.5).resumed == 0


def test_a_repository_split_into_units_gives_the_same_corpus_and_resumes_per_unit(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """``chunk_size``: a repository of more candidates than that is built as units of that
    many, on any worker; put back together they are the repository's build."""
    alpha = _repo(tmp_path, "alpha", {"words": WORDS, "numbers": NUMBERS})
    beta = _repo(tmp_path, "beta", {"numbers": NUMBERS.replace("clamp", "limit")})
    sources = [str(alpha), str(beta)]
    settings = BuildSettings(max_candidates=0, test_executions=200, trace=False)
    assert plan_units(sources, settings, 0) == [Unit(str(alpha)), Unit(str(beta))]
    units = plan_units(sources, settings, 2)  # alpha's 3 candidates: two units; beta's 1: whole
    assert units == [Unit(str(alpha), (0, 2)), Unit(str(alpha), (1, 2)), Unit(str(beta))]

    whole, split = tmp_path / "whole" / "corpus.jsonl", tmp_path / "split" / "corpus.jsonl"
    for output in (whole, split):
        output.parent.mkdir()
    reference = build_corpus(sources, whole, settings, LocalExecutor(2, sandbox), eval_fraction=0.5)
    built: list[RepositoryBuild] = []
    planned: list[list[Unit]] = []
    result = build_corpus(
        sources,
        split,
        settings,
        LocalExecutor(2, sandbox),
        eval_fraction=0.5,
        chunk_size=2,
        on_repository=built.append,
        on_units=planned.append,
    )
    assert planned == [units] and sorted(b.chunk or (9, 9) for b in built) == [(0, 2), (1, 2), (9, 9)]
    assert [len(b.tasks) for b in built if b.chunk] in ([2, 1], [1, 2])  # the units share alpha's tasks
    assert corpus_paths(split)["tasks"].read_bytes() == corpus_paths(whole)["tasks"].read_bytes()
    for mine, theirs in zip(result.rows(), reference.rows()):
        assert {k: v for k, v in mine.items() if k != "seconds"} == {k: v for k, v in theirs.items() if k != "seconds"}
    timeless = "build seconds (sum over repositories)"
    assert {k: v for k, v in result.totals().items() if k != timeless} == {
        k: v for k, v in reference.totals().items() if k != timeless
    }
    assert result.drop_reasons() == reference.drop_reasons()

    second = next(p for p in (corpus_paths(split)["state"] / "repos").iterdir() if '"chunk": [1, 2]' in p.read_text())
    second.unlink()  # an interrupted build: alpha's second unit missing
    built.clear()
    again = build_corpus(
        sources, split, settings, LocalExecutor(2, sandbox), eval_fraction=0.5, chunk_size=2, on_repository=built.append
    )
    assert [b.chunk for b in built] == [(1, 2)] and again.resumed == 2
    assert corpus_paths(split)["tasks"].read_bytes() == corpus_paths(whole)["tasks"].read_bytes()
    with pytest.raises(ConfigError, match="chunk size -1"):
        build_corpus(sources, split, settings, LocalExecutor(2, sandbox), chunk_size=-1)
    _check_against_a_record(tmp_path, reference, whole, split)
    _check_slices_combined(tmp_path, reference, sources, settings, sandbox)


def _check_against_a_record(tmp_path: Path, reference: CorpusResult, whole: Path, split: Path) -> None:
    """A build checked against the digests a record of another build holds, with no disk
    shared: each repository's tasks (a split one's units put back together) and the files."""
    from benchmarks.corpus_identity import compare_with_record

    record = {"date": "then", "repositories": reference.rows()}
    record["files_sha256"] = {
        kind: hashlib.sha256(corpus_paths(whole)[kind].read_bytes()).hexdigest() for kind in ("tasks", "train", "eval")
    }
    records = tmp_path / "corpus_pypi.jsonl"
    records.write_text(json.dumps({"an older record": "without digests"}) + "\n" + json.dumps(record) + "\n")
    state = corpus_paths(split)["state"]
    assert [tasks_digest(b.tasks) for b in state_repositories(state)] == [
        row["tasks_sha256"] for row in sorted(reference.rows(), key=lambda row: row["source"])
    ]
    rows, files, dated = compare_with_record(state, records, set())
    assert [row["identical"] for row in rows] == [True, True] and dated == "then"
    assert files == {"tasks": True, "train": True, "eval": True}
    # a repository whose tasks changed is told apart, by name
    first = next(p for p in (state / "repos").iterdir() if json.loads(p.read_text())["chunk"] is None)
    changed = json.loads(first.read_text())
    changed["tasks"][0]["name"] += "-changed"
    first.write_text(json.dumps(changed))
    rows, _, _ = compare_with_record(state, records, set())
    assert sum(row["identical"] for row in rows) == 1 and all(row["in_record"] for row in rows)
    # a repository no record holds is not compared (nor counted as different)
    record["repositories"] = [r for r in record["repositories"] if r["source"] != changed["source"]]
    records.write_text(json.dumps(record) + "\n")
    rows, _, _ = compare_with_record(state, records, set())
    assert sorted((row["identical"], row["in_record"]) for row in rows) == [(False, False), (True, True)]


HELD = {"known_wrong": 4, "false_accepts": 1}


def _check_slices_combined(
    tmp_path: Path, reference: CorpusResult, sources: list[str], settings: BuildSettings, sandbox: Sandbox
) -> None:
    """The list built in slices (a repository each, as on machines that never share a disk),
    their records combined: the totals, the near-duplicates and the split of one build of the
    whole list; a repository built again is compared by digest."""
    from benchmarks.corpus_pypi import repository_facts
    from benchmarks.corpus_slices import combine, read_slices, target_sources

    def record(source: str, where: str) -> dict[str, object]:
        output = tmp_path / where / "corpus.jsonl"
        output.parent.mkdir()
        result = build_corpus([source], output, settings, LocalExecutor(2, sandbox), eval_fraction=0.5)
        return {
            "sources": "list.txt",
            "packages": [source],
            "settings_digest": "d1",
            "repositories": result.rows(),
            "facts": repository_facts(result, None),
            "cost": {"cpu_s": 36.0, "wall_s": 20.0, "peak_rss_mib_driver": 100.0, "peak_rss_mib_largest_worker": 90.0},
        }

    slices = [record(sources[1], "slice-beta"), record(sources[0], "slice-alpha")]  # any order of slices
    again = record(sources[1], "slice-beta-again")
    records = tmp_path / "records.jsonl"
    other = {**again, "settings_digest": "d0"}  # other code: never combined with d1
    records.write_text("".join(json.dumps(r) + "\n" for r in (other, *slices, again)))
    chosen = read_slices(records, "list.txt")
    assert [r["packages"] for r in chosen] == [[sources[1]], [sources[0]], [sources[1]]]

    corpus = combine(chosen, sources, eval_fraction=0.5)
    ids = [t.id for t in reference.tasks()]
    assert [t["id"] for r in corpus.repositories for t in r.facts["tasks"]] == ids
    assert corpus.duplicates == reference.duplicates == {}
    assert corpus.split == reference.split and not corpus.pending
    mine, theirs = corpus.totals(), reference.totals()
    same = [k for k in theirs if k in mine and k != "build seconds (sum over repositories)"]
    assert len(same) == 18 and {k: mine[k] for k in same} == {k: theirs[k] for k in same}
    assert corpus.drop_reasons() == reference.drop_reasons()
    assert corpus.identity() == {"compared": 1, "identical": 1, "tasks_compared": 1, "different": []}
    assert corpus.cost()["cpu_s"] == 72.0 and corpus.cost()["tasks_per_cpu_hour"] == round(mine["tasks"] / 0.02, 1)
    audited = repository_facts(reference, {"tasks": [{"id": copied_id, "held_out": HELD} for copied_id in ids]})
    assert [t["held_out"] for f in audited.values() for t in f["tasks"]] == [HELD] * len(ids)
    page = corpus.markdown("list.txt")
    assert "2 of 2 packages built; complete" in page and "| 2 (identical) |" in page

    # a slice whose repository copies another's functions: its tasks are near-duplicates of
    # the earlier slice's, found from the targets' sources read back (no record holds code)
    beta = slices[0]
    copy = {
        "sources": "list.txt",
        "settings_digest": "d1",
        "repositories": [{**beta["repositories"][0], "source": "gamma", "repository": "gamma"}],
        "facts": {
            "gamma": {"drops": [], "tasks": [{**t, "id": "g" + t["id"]} for t in beta["facts"][sources[1]]["tasks"]]}
        },
    }
    corpus = combine(
        [*slices, copy],
        [*sources, "gamma"],
        lambda source, tasks: target_sources(sources[1] if source == "gamma" else source, tasks),
        eval_fraction=0.5,
    )
    copied = [t["id"] for t in beta["facts"][sources[1]]["tasks"]]
    assert corpus.duplicates == {"g" + i: i for i in copied} and len(copied) == 1
    assert corpus.totals()["tasks"] == theirs["tasks"] and "gamma" not in corpus.split

    # a repository whose second build differs is named; one slice alone is partial
    changed = {**again, "repositories": [{**again["repositories"][0], "tasks_sha256": "0" * 64}]}
    corpus = combine([*slices, changed], sources, eval_fraction=0.5)
    assert corpus.identity()["different"] == [reference.rows()[1]["repository"]]
    partial = combine(slices[:1], sources, eval_fraction=0.5)
    assert partial.pending == [sources[0]] and "**partial**: 1 pending" in partial.markdown("list.txt")
    with pytest.raises(ConfigError, match="not on the list"):
        combine(slices, sources[:1])
    with pytest.raises(ConfigError, match="no slice record has settings digest d9"):
        read_slices(records, "list.txt", "d9")


def test_the_command_line_builds_a_source_list_and_says_which_line_is_bad(tmp_path: Path) -> None:
    import subprocess
    import sys

    _repo(tmp_path, "alpha", {"numbers": NUMBERS})
    listing = tmp_path / "sources.txt"
    listing.write_text("alpha\n")
    output = tmp_path / "corpus.jsonl"

    def build(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "gym_repost.cli", "build", str(listing), "-o", str(output), *extra]
        env = {**os.environ, "COLUMNS": "400"}  # error lines unwrapped
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)

    result = build("--max-candidates", "1", "--test-executions", "200", "--no-trace")
    assert result.returncode == 0, result.stderr
    assert "corpus totals" in result.stdout and [t.target.qualname for t in load_tasks(output)] == ["clamp"]
    assert (
        "1 repositories were already built"
        in build("--max-candidates", "1", "--test-executions", "200", "--no-trace").stdout
    )
    _repo(tmp_path, "gamma", {"words": WORDS, "numbers": NUMBERS})  # three candidates: three units
    chunked = ["--max-candidates", "0", "--test-executions", "200", "--no-trace", "--chunk", "1"]
    listing.write_text("gamma\n")
    result = build(*chunked)
    assert result.returncode == 0, result.stderr
    assert sorted(t.target.qualname for t in load_tasks(output)) == ["clamp", "count_vowels", "initials"]
    assert "3 units of work were already built" in build(*chunked).stdout
    listing.write_text("alpha\nnot/here\n")
    result = build()
    assert result.returncode == 2 and "sources.txt:2: 'not/here' is neither" in result.stderr
