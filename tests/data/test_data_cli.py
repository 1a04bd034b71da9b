"""``gym-repost data dstc`` and ``data acecoder`` as a user runs them, offline, on
HumanEval and on the shipped demo tasks; every output file loads as a TRL dataset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gym_repost.task import FunctionTask, load_tasks, save_tasks

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", "data", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def humaneval_file(tmp_path: Path, humaneval_tasks: list[FunctionTask]) -> Path:
    save_tasks(humaneval_tasks[:4], tmp_path / "he.jsonl")
    return tmp_path / "he.jsonl"


def test_dstc_writes_dpo_kto_and_matrices(humaneval_file: Path, tmp_path: Path, load_jsonl: Any) -> None:
    out = tmp_path / "out"
    result = cli(
        "dstc",
        str(humaneval_file),
        "-o",
        str(out / "dpo.jsonl"),
        "--kto",
        str(out / "kto.jsonl"),
        "--matrices",
        str(out / "matrices.jsonl"),
        "-n",
        "5",
        "--limit",
        "3",
    )
    assert result.returncode == 0, result.stderr
    assert "DPO records" in result.stdout and "cells: pass / fail / error / timeout" in result.stdout
    dpo, kto = load_jsonl(out / "dpo.jsonl"), load_jsonl(out / "kto.jsonl")
    assert len(dpo) == 3 and {"prompt", "chosen", "rejected", "task_id", "source"} <= set(dpo.column_names)
    assert len(kto) == 6 and {"prompt", "completion", "label", "task_id"} <= set(kto.column_names)
    matrices = [json.loads(line) for line in (out / "matrices.jsonl").read_text().splitlines()]
    assert [len(m["matrix"]) for m in matrices] == [len(m["codes"]) for m in matrices]
    assert all(
        set(cell for row in m["outcomes"] for cell in row) <= {"pass", "fail", "error", "timeout"} for m in matrices
    )


def test_acecoder_on_the_demo_tasks(tmp_path: Path, load_jsonl: Any) -> None:
    demo = load_tasks(ROOT / "tasks" / "demo.jsonl")
    save_tasks(
        [t for t in demo if t.name in ("demo/pricing.apply_discount", "demo/money.parse_money")],
        tmp_path / "demo.jsonl",
    )
    result = cli(
        "acecoder",
        str(tmp_path / "demo.jsonl"),
        "-o",
        str(tmp_path / "pairs.jsonl"),
        "--tests-output",
        str(tmp_path / "tests.jsonl"),
        "--samples",
        "8",
    )
    assert result.returncode == 0, result.stderr
    assert "preference pairs" in result.stdout and "strict rule" in result.stdout
    pairs = load_jsonl(tmp_path / "pairs.jsonl")
    assert len(pairs) > 0 and {"prompt", "chosen", "rejected", "chosen_pass_rate", "model"} <= set(pairs.column_names)
    assert all(
        c > r + 0.4 and c > 0.8 and r > 0
        for c, r in zip(pairs["chosen_pass_rate"], pairs["rejected_pass_rate"], strict=True)
    )
    tests = load_jsonl(tmp_path / "tests.jsonl")
    assert tests["test_style"] == ["equivalence", "equivalence"] and all(k >= 5 for k in tests["kept"])
    loose = cli(
        "acecoder", str(tmp_path / "demo.jsonl"), "-o", str(tmp_path / "loose.jsonl"), "--samples", "8", "--non-strict"
    )
    assert loose.returncode == 0 and "non-strict rule" in loose.stdout
    assert len(load_jsonl(tmp_path / "loose.jsonl")) >= len(pairs)


def test_bad_input_is_a_clear_error(humaneval_file: Path, tmp_path: Path) -> None:
    result = cli("dstc", str(humaneval_file), "-o", str(tmp_path / "x.jsonl"), "--sampler", "gpt:4o-mini")
    assert result.returncode == 2 and "unknown code sampler 'gpt:4o-mini'" in _flat(result.stderr)
    result = cli("acecoder", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "x.jsonl"))
    assert result.returncode == 2 and "no such task file" in _flat(result.stderr)
    assert not (tmp_path / "x.jsonl").exists()
