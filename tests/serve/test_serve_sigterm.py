"""``gym-repost serve`` as a subprocess: SIGTERM with sessions open closes every session,
exits 143, and leaves no process (sandbox workers) or container behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_helpers import write, wrong_body

from gym_repost.errors import MissingExtraError, SandboxUnavailableError
from gym_repost.task import save_tasks

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "tasks" / "demo.jsonl"
STARTUP = 120.0


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def server_process(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``start(*options)``: ``gym-repost serve`` on a free port; returns (process, url)."""
    started: list[subprocess.Popen[str]] = []

    def start(*options: str, tasks: Path = DEMO) -> tuple[subprocess.Popen[str], str]:
        command = [sys.executable, "-m", "gym_repost.cli", "serve", str(tasks), "--port", "0", *options]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        started.append(process)
        line = process.stdout.readline() if process.stdout else ""  # blocks until ready (or exit)
        found = re.search(r"on (http://\S+) ", line)
        assert found, f"no URL in {line!r}; stderr: {process.stderr.read() if process.poll() is not None else ''}"
        return process, found.group(1)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def open_sessions(openenv: Any, url: str, tasks: list[Any]) -> list[Any]:
    """Three clients mid-episode (code written, not submitted)."""
    clients = []
    for task in tasks[:3]:
        client = openenv.GenericEnvClient(base_url=url, message_timeout_s=STARTUP).sync()
        client.reset(task_id=task.id)
        client.step(write(wrong_body(task)))
        clients.append(client)
    return clients


def terminate(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=STARTUP)
    return process.returncode, stderr


def test_sigterm_closes_sessions_and_leaves_no_process(
    server_process: Any, openenv: Any, demo_tasks: list[Any], tmp_path: Path
) -> None:
    """Three sessions mid-episode, one of them in a step whose test run would take a
    minute: the server still stops promptly (its run is killed with the sandbox)."""
    slow_task = demo_tasks[0].model_copy(deep=True)
    slow_task.evaluation.timeout = 120.0
    save_tasks([slow_task.with_id(), *demo_tasks[1:]], tmp_path / "tasks.jsonl")
    process, url = server_process(tasks=tmp_path / "tasks.jsonl")
    clients = open_sessions(openenv, url, [slow_task, *demo_tasks[1:]])
    sleeper = slow_task.target.signature + "\n    import time\n    time.sleep(100)\n"
    clients[0].step(write(sleeper))
    outcome: list[Any] = []

    def run_slow_tests() -> None:
        try:
            outcome.append(clients[0].step({"tool": "run_tests", "args": {}}))
        except Exception as exc:  # the server closed the connection under the step
            outcome.append(exc)

    in_flight = threading.Thread(target=run_slow_tests)
    in_flight.start()
    time.sleep(1.0)  # not a timing assertion: the test holds whether or not the run has started
    below = descendants(process.pid)
    assert below, "the local sandbox's workers should run below the server"
    code, stderr = terminate(process)
    assert code == 143, stderr
    assert "Traceback" not in stderr, stderr
    assert "interrupted" in stderr and "rerun" not in stderr, stderr  # a server has nothing to resume
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in below) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in below if alive(pid)], "sandbox processes outlived the server"
    with pytest.raises(Exception):  # noqa: B017 - the connection is gone: whichever way the client says so
        clients[1].step({"tool": "list_files", "args": {}})
    in_flight.join(STARTUP)
    assert len(outcome) == 1 and isinstance(outcome[0], Exception), outcome
    for client in clients:
        try:
            client.close()
        except Exception:
            pass


@pytest.mark.docker
def test_sigterm_with_the_docker_sandbox_leaves_no_container(
    server_process: Any, openenv: Any, demo_tasks: list[Any]
) -> None:
    from gym_repost.sandbox.docker import OWNER_LABEL, connect

    try:
        docker = connect()
    except (SandboxUnavailableError, MissingExtraError) as exc:
        if os.environ.get("GYM_REPOST_REQUIRE_DOCKER") == "1" or os.environ.get("CI"):
            pytest.fail(f"the Docker tests must run here, but: {exc}")
        pytest.skip(f"no Docker engine ({exc}); set GYM_REPOST_REQUIRE_DOCKER=1 to fail instead")

    def containers_of(pid: int) -> list[str]:
        found = docker.api.containers(all=True, filters={"label": "gym-repost=1"})
        return [c["Names"][0] for c in found if f":{pid}:" in (c.get("Labels") or {}).get(OWNER_LABEL, "")]

    process, url = server_process("--sandbox", "docker", "--workers", "1")
    clients = open_sessions(openenv, url, demo_tasks)
    assert containers_of(process.pid), "the server's sandbox container should be running"
    code, stderr = terminate(process)
    assert code == 143, stderr
    assert containers_of(process.pid) == []
    for client in clients:
        try:
            client.close()
        except Exception:
            pass
