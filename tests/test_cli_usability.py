"""The command line's help and common options (issue 34): help without Python types and
with an example per command, ``--version``, ``-v`` after the command, choice lists,
``--limit`` and ``--task`` on eval and validate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gym_repost import __version__
from gym_repost.errors import ConfigError, json_error_text
from gym_repost.task import load_tasks, select_tasks

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = [
    "build",
    "validate",
    "eval",
    "report",
    "serve",
    "sandbox check",
    "sandbox cleanup",
    "sandbox build-image",
    "env install",
    "data rejection",
    "data dstc",
    "data acecoder",
    "data testgen",
]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.parametrize("command", ["", "sandbox", "env", "data", *COMMANDS])
def test_help_names_values_not_python_types(command: str) -> None:
    result = cli(*command.split(), "--help")
    assert result.returncode == 0, result.stderr
    types = re.findall(r"<[a-z][a-z \[\]|]*>", result.stdout)
    assert types == [], f"{command} --help shows {types}"
    assert "Usage: gym-repost" in result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_shows_an_example(command: str) -> None:
    text = " ".join(cli(*command.split(), "--help").stdout.split())
    assert f"Example: gym-repost {command}" in text


def test_choices_are_listed_in_help() -> None:
    text = cli("eval", "--help").stdout
    assert "[binary|shaped]" in text and "[local|ray]" in text


def test_version() -> None:
    result = cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"gym-repost {__version__}"


def test_verbose_before_or_after_the_command(tmp_path: Path) -> None:
    def run(name: str, before: list[str], after: list[str]) -> subprocess.CompletedProcess[str]:
        args = ["tasks/demo.jsonl", "--policy", "oracle", "--limit", "1", "-o", str(tmp_path / name)]
        return cli(*before, "eval", *args, *after)

    for name, before, after in (("a", ["-v"], []), ("b", [], ["-v"]), ("c", [], ["--verbose"])):
        result = run(name, before, after)
        assert result.returncode == 0, result.stderr
        assert "1 episodes to run (0 already finished)" in result.stderr
    assert "episodes to run" not in run("d", [], []).stderr


def test_eval_takes_limit_and_task(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = cli("eval", "tasks/demo.jsonl", "--policy", "oracle", "--task", "demo/pricing.*", "--task", "*.parse_*")
    assert result.returncode == 2 and "Missing option '-o'" in result.stderr
    result = cli(
        "eval", "tasks/demo.jsonl", "--policy", "oracle", "--task", "demo/pricing.*", "--task", "*.parse_*",
        "--limit", "3", "-o", str(run),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    names = [json.loads(line)["task_name"] for line in (run / "episodes.jsonl").read_text().splitlines()]
    # in file order: pricing.apply_discount, money.parse_money, coupons.parse_coupon (pricing.BulkDiscount: 4th)
    assert sorted(names) == ["demo/coupons.parse_coupon", "demo/money.parse_money", "demo/pricing.apply_discount"]


def test_validate_takes_limit_and_task(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "v.json"
    result = cli("validate", "tasks/demo.jsonl", "--task", "demo/orders.*", "--limit", "1", "--json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ground truth passes: 1/1" in result.stdout
    assert [t["task"] for t in json.loads(out.read_text())["tasks"]] == ["demo/orders.iter_invoice_lines"]


def test_select_tasks_by_name_or_id_then_limit() -> None:
    tasks = list(load_tasks(ROOT / "tasks" / "demo.jsonl"))
    assert [t.name for t in select_tasks(tasks, ["demo/shipping.*"])] == [
        "demo/shipping.split_into_parcels",
        "demo/shipping.estimate_shipping",
    ]
    assert select_tasks(tasks, [tasks[3].id]) == [tasks[3]]
    assert select_tasks(tasks, (), 2) == tasks[:2] and select_tasks(tasks) == tasks
    with pytest.raises(ConfigError, match=r"no task matches --task 'x\*' among 15 \(names look like demo/pricing"):
        select_tasks(tasks, ["x*"])
    with pytest.raises(ConfigError, match="--limit 0"):
        select_tasks(tasks, (), 0)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": "b', "Unterminated string starting at column 7"),
        ('{"a": }', "Expecting value at column 7"),
        ('{"a": 1}}', "Extra data at column 9"),
    ],
)
def test_json_errors_read_once_with_their_column(text: str, said: str) -> None:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        assert json_error_text(exc) == said
    else:  # pragma: no cover
        raise AssertionError(text)
