"""Test-file tasks from the command line: build --kind testfile, eval, data testgen (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from testfile_tasks import FILES, GROUND_TRUTH, TEST_PATH

from gym_repost.task import TestFileTask, load_tasks

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``gym-repost build DIR --kind testfile`` on a tiny repository with two test files."""
    base = tmp_path_factory.mktemp("testfile-cli")
    repo = base / "tinypkg-1.0"
    files = {
        **FILES,
        TEST_PATH: GROUND_TRUTH,
        "tests/test_nothing.py": "def test_x():\n    assert True\n",
        "LICENSE": "MIT License\n\nPermission is hereby granted, free of charge, to any person\n",
        "pyproject.toml": '[project]\nname = "tinypkg"\nversion = "1.0"\nlicense = {text = "MIT"}\n',
    }
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    out, stats = base / "tiny-tests.jsonl", base / "stats.json"
    result = cli("build", str(repo), "--kind", "testfile", "-o", str(out), "--stats", str(stats), "--max-mutants", "20")
    assert result.returncode == 0, result.stderr
    assert "2 test files, 1 paired with a focal file, 1 measured, 1 kept" in result.stdout
    assert "no focal file" in result.stdout and "wrote 1 test-file tasks" in result.stdout
    summary = json.loads(stats.read_text())
    assert summary["kept"] == 1 and summary["references"]["tinypkg/tests/test_core.py"]["pass_rate"] == 1.0
    return out


def test_build_writes_test_file_tasks(built: Path) -> None:
    (task,) = load_tasks(built, strict=True)
    assert isinstance(task, TestFileTask) and task.evaluation.max_mutants == 20
    assert task.reference.tests == 4 and task.reference.mutants_total == 20
    assert TEST_PATH not in task.repository.files


def test_eval_oracle_and_mutant(built: Path, tmp_path: Path) -> None:
    result = cli("eval", str(built), "--policy", "oracle", "-o", str(tmp_path / "oracle"), "-w", "1")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "oracle" / "summary.json").read_text())["pass@1"] == 1.0
    result = cli("eval", str(built), "--policy", "mutant", "-o", str(tmp_path / "mutant"), "-w", "1")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "mutant" / "summary.json").read_text())
    assert summary["pass@1"] == 0.0 and summary["infra_errors"] == 0


def test_data_testgen_with_a_scripted_generator(built: Path, tmp_path: Path) -> None:
    weak = "from tinypkg.core import clamp\n\n\ndef test_clamp():\n    assert clamp(5) == 5\n"
    replies = tmp_path / "replies.jsonl"
    replies.write_text(
        "\n".join(
            json.dumps({"text": t})
            for t in [
                f"<reasoning>clamp only.</reasoning>\n```python\n{weak}```",
                f"<reasoning>All four functions.</reasoning>\n```python\n{GROUND_TRUTH}```",
                "<reasoning>Exact values for clamp, fib, check and total.</reasoning>",
            ]
        )
        + "\n"
    )
    out = tmp_path / "testgen.jsonl"
    result = cli(
        "data", "testgen", str(built), "-o", str(out), "--generator", f"scripted:{replies}", "--rounds", "2", "-w", "1"
    )
    assert result.returncode == 0, result.stderr
    assert "wrote 1 records" in result.stdout and "coverage: 1" in result.stdout
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["test_file"] == GROUND_TRUTH and record["reasoning"].startswith("Exact values")
    assert [r["kind"] for r in record["rounds"]] == ["generate", "repair:coverage"]


def test_validate_skips_test_file_tasks(built: Path) -> None:
    result = cli("validate", str(built))
    assert result.returncode == 0 and "skipped 1 test-file task" in result.stderr


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    result = cli("build", "humaneval", "--kind", "testfile", "-o", str(tmp_path / "x.jsonl"))
    assert result.returncode != 0 and "needs a repository" in result.stderr
    result = cli("build", "tasks/demo/repo", "--kind", "tests", "-o", str(tmp_path / "x.jsonl"))
    assert result.returncode == 2 and "'tests' is not one of 'function', 'testfile'" in result.stderr
    result = cli("data", "testgen", "tasks/demo.jsonl", "-o", str(tmp_path / "y.jsonl"), "--generator", "x")
    assert result.returncode != 0 and "no test-file tasks" in result.stderr
