"""``gym-repost serve``'s bad input, and the install hint when the extra is missing."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gym_repost.errors import ConfigError, MissingExtraError
from gym_repost.serve import ServeConfig, read_token, require_serve_extra, running

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "tasks" / "demo.jsonl")


def cli(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """``gym-repost ARGS`` in a fresh interpreter, after ``prelude`` ran there (stderr's
    lines, which rich wraps, joined)."""
    code = f"import sys\n{prelude}\nsys.argv = ['gym-repost', *sys.argv[1:]]\nfrom gym_repost.cli import main\nmain()"
    result = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    result.stderr = " ".join(result.stderr.split())
    return result


def test_missing_extra_names_the_install_command() -> None:
    result = cli("serve", DEMO, prelude="sys.modules['openenv'] = None  # as if openenv-core were not installed")
    assert result.returncode == 2
    assert 'pip install "gym-repost[serve]"' in result.stderr, result.stderr  # not eaten as rich markup
    assert "openenv-core" in result.stderr


def test_missing_extra_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    with pytest.raises(MissingExtraError, match=r"'uvicorn' package.*pip install \"gym-repost\[serve\]\""):
        require_serve_extra()


def test_token_file_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n  \n")
    with pytest.raises(ConfigError, match="the file is empty"):
        read_token(empty)
    with pytest.raises(ConfigError, match="cannot read it"):
        read_token(tmp_path / "missing")
    spaced = tmp_path / "spaced"
    spaced.write_text("two words\n")
    with pytest.raises(ConfigError, match="one word"):
        read_token(spaced)
    good = tmp_path / "good"
    good.write_text("  tok-123  \nignored\n")
    assert read_token(good) == "tok-123"


def test_a_port_in_use_is_a_clear_error(demo_tasks: list[Any], sandbox: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            with running(demo_tasks, sandbox, ServeConfig(port=port)):
                pass
