"""The command line as a user meets it: real subprocesses, real sandbox, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gym_repost.sandbox.conformance import CHECK_NAMES
from gym_repost.task import FunctionTask, load_tasks, save_tasks

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def demo_subset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three of the shipped demo tasks (a function, a method, one with files)."""
    tasks = load_tasks(ROOT / "tasks" / "demo.jsonl")
    picked = [
        t
        for t in tasks
        if t.name in ("demo/pricing.apply_discount", "demo/inventory.Inventory.reserve", "demo/config.load_settings")
    ]
    out = tmp_path_factory.mktemp("cli") / "tasks.jsonl"
    save_tasks(picked, out)
    return out


def test_build_from_a_manifest_reproduces_the_shipped_demo(tmp_path: Path) -> None:
    result = cli("build", "tasks/demo/manifest.toml", "-o", str(tmp_path / "demo.jsonl"))
    assert result.returncode == 0, result.stderr
    assert "wrote 15 tasks" in result.stdout
    assert (tmp_path / "demo.jsonl").read_bytes() == (ROOT / "tasks" / "demo.jsonl").read_bytes()


def test_build_refuses_the_old_seconds_budget_and_names_its_replacement(tmp_path: Path) -> None:
    result = cli("build", "tasks/demo/repo", "-o", str(tmp_path / "t.jsonl"), "--test-budget", "3")
    assert result.returncode == 2 and "--test-executions" in result.stderr
    assert not (tmp_path / "t.jsonl").exists()


def test_validate_prints_per_task_and_totals(demo_subset: Path, tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    result = cli("validate", str(demo_subset), "--mutants", "4", "--coverage", "--json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ground truth passes: 3/3" in result.stdout
    assert "tests that accept a trivial candidate (None, the first argument, self, a constant, an exception): 0" in (
        result.stdout
    )
    data = json.loads(out.read_text())
    assert data["totals"]["mutants_total"] == 12 and data["totals"]["mean_branch_coverage"] == 1.0
    assert {t["task"] for t in data["tasks"]} == {
        "demo/pricing.apply_discount",
        "demo/inventory.Inventory.reserve",
        "demo/config.load_settings",
    }


def test_validate_exits_1_and_names_the_cause_when_a_ground_truth_fails(
    tmp_path: Path, function_task: FunctionTask
) -> None:
    broken = function_task.model_copy(deep=True)
    broken.evaluation.script = "import no_such_module_xyz\n" + broken.evaluation.script
    broken.evaluation.insert_line += 1
    save_tasks([broken], tmp_path / "t.jsonl")
    result = cli("validate", str(tmp_path / "t.jsonl"))
    assert result.returncode == 1
    assert "missing package no_such_module_xyz" in result.stdout


def test_eval_then_report(demo_subset: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = cli("eval", str(demo_subset), "--policy", "mutant", "-n", "2", "--repairs", "2", "-o", str(run))
    assert result.returncode == 0, result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary) >= {"pass@1", "pass@2", "self_repair", "infra_errors"}
    assert list(summary["self_repair"]) == ["0", "1", "2"]
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir() if p.is_file()}
    report = cli("report", str(run))
    assert report.returncode == 0 and "pass@2" in report.stdout
    after = {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir() if p.name != "report.html" and p.is_file()
    }
    assert after == before  # the run's own files are read, never written (an eval may still be writing them)
    html = (run / "report" / "index.html").read_text()
    assert "<svg" in html and "pass@2" in html
    assert "report/index.html" in (run / "report.html").read_text()  # RUN_DIR/report.html leads to it


def test_a_malformed_task_line_is_skipped_with_its_location(demo_subset: Path, tmp_path: Path) -> None:
    lines = demo_subset.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["evaluation"]["timeout"] = "soon"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    result = cli("eval", str(tasks), "--policy", "oracle", "-o", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert f"{tasks}:2: field 'evaluation.timeout'" in result.stderr.replace("\n", "")
    assert result.stderr.replace("\n", "").count("evaluation.timeout") == 1  # once, not also as a log line
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["episodes"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "absent.jsonl", "--policy", "oracle", "-o", "x"], "no such task file"),
        (["eval", "tasks/demo.jsonl", "--policy", "gpt", "-o", "x"], "unknown policy 'gpt'"),
        (["eval", "tasks/demo.jsonl", "--policy", "oracle", "--policy-arg", "oops", "-o", "x"], "KEY=VALUE"),
        (["eval", "tasks/demo.jsonl", "--policy", "oracle", "--env", "nowhere", "-o", "x"], "is not installed"),
        (["build", "svn://x", "-o", "x.jsonl"], "no such directory, archive or PyPI"),
        (["build", "repost-eval:/nonexistent", "-o", "x.jsonl"], "not found"),
        (["report", "."], "not a run directory"),
        (["build", "tasks/demo/repo", "-o", "x.jsonl", "--constraints", "README.md"], "README.md:3:"),
        (["build", "tasks/demo/repo", "-o", "x.jsonl", "--constraints", "absent.txt"], "cannot read the constraints"),
        (
            ["build", "tasks/demo/repo", "--kind", "testfile", "-o", "x.jsonl", "--constraints", "README.md"],
            "README.md:3:",
        ),
        (
            ["build", "repost-eval:/x", "-o", "x.jsonl", "--constraints", "benchmarks/corpus_pypi.constraints.txt"],
            "build of a repository",
        ),
        (["audit", "tasks/demo.jsonl", "--upstream", "tasks/demo/repo", "--constraints", "README.md"], "README.md:3:"),
    ],
)
def test_bad_input_gives_a_clear_error(args: list[str], message: str, tmp_path: Path) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert message in result.stderr.replace("\n", " ") and "Traceback" not in result.stderr


def test_sandbox_check_passes(tmp_path: Path) -> None:
    result = cli("sandbox", "check", "--output", str(tmp_path / "checks.json"))
    assert result.returncode == 0, result.stdout
    assert "checks passed" in result.stdout and "FAIL" not in result.stdout
    written = json.loads((tmp_path / "checks.json").read_text("utf-8"))
    assert written["sandbox"] == "local" and [c["name"] for c in written["checks"]] == list(CHECK_NAMES)
    assert all(c["passed"] for c in written["checks"])


def test_sandbox_check_refuses_an_output_it_could_not_write_before_it_runs(tmp_path: Path) -> None:
    result = cli("sandbox", "check", "--output", str(tmp_path / "missing" / "checks.json"))
    assert result.returncode == 2 and "checks passed" not in result.stdout
    expected = f"the directory {tmp_path / 'missing'} does not exist"
    assert "".join(expected.split()) in "".join(result.stderr.split())  # as the console wrapped it


def test_sandbox_cleanup_runs() -> None:
    result = cli("sandbox", "cleanup")
    assert result.returncode == 0 and "removed" in result.stdout
