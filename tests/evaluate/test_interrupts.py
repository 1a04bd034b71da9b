"""Stopping a run and sharing its directory: SIGINT and SIGTERM stop `gym-repost eval`
within seconds even while a step hangs, lose no finished episode and record none in flight;
one writer per RUN_DIR."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gym_repost.errors import RunDirBusyError
from gym_repost.evaluate import RunDir
from gym_repost.sandbox import worker as protocol
from gym_repost.task import load_tasks, save_tasks

ROOT = Path(__file__).resolve().parents[2]
HANG = "demo/pricing.apply_discount/1"
STOP_WITHIN = 5.0  # seconds from the signal to the exit (issue 11)

# Solves every task from the solutions it is handed, except episode `hang` while the file
# `armed` exists: there it touches `marker`, then hangs in the host (mode=sleep: a policy
# stuck in a call) or in the sandbox (mode=sandbox: a candidate that never returns, tested
# again and again, so that a worker thread is inside a sandbox call).
HANG_POLICY = textwrap.dedent("""\
    import json, os, time

    class Hang:
        def __init__(self, solutions, hang, armed, marker, mode):
            with open(solutions) as fh:
                self.solutions = json.load(fh)
            self.hang, self.armed, self.marker, self.mode = hang, armed, marker, mode

        def reset(self, task, observation, info, *, seed):
            self.name, self.written = info["task_name"], False
            key = f"{info['task_name']}/{info['sample']}"
            self.hanging = key == self.hang and os.path.exists(self.armed)

        def act(self, observation, info):
            if self.hanging and self.mode == "sleep":
                open(self.marker, "a").close()
                time.sleep(3600)
            if self.hanging and self.written:
                open(self.marker, "a").close()
                return {"tool": "run_tests"}
            if self.hanging:
                self.written = True
                code = "def apply_discount(*args, **kwargs):\\n    while True:\\n        pass\\n"
                return {"tool": "write_code", "args": {"code": code}}
            if self.written:
                return {"tool": "submit"}
            self.written = True
            return {"tool": "write_code", "args": {"code": self.solutions[self.name]}}
    """)


class Run:
    """One `gym-repost eval` command line over two demo tasks, 3 samples each."""

    def __init__(self, tmp: Path, mode: str) -> None:
        self.tmp, self.dir = tmp, tmp / "run"
        self.armed, self.marker = tmp / "armed", tmp / "hanging"
        self.cmd = [
            sys.executable,
            "-m",
            "gym_repost.cli",
            "eval",
            str(tmp / "tasks.jsonl"),
            "--policy",
            f"{tmp / 'hang.py'}:Hang",
            "-n",
            "3",
            "--workers",
            "2",
            "--max-steps",
            "1000",
            "-o",
            str(self.dir),
        ]
        for key, value in (
            ("solutions", tmp / "solutions.json"),
            ("hang", HANG),
            ("armed", self.armed),
            ("marker", self.marker),
            ("mode", mode),
        ):
            self.cmd += ["--policy-arg", f"{key}={value}"]

    def start(self) -> subprocess.Popen[str]:
        """Start the command with the hang armed; return once the hang has begun and the
        other five episodes are on disk."""
        self.armed.touch()
        self.marker.unlink(missing_ok=True)
        proc = subprocess.Popen(
            self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        deadline = time.monotonic() + 300
        while not (self.marker.exists() and len(self.episodes()) == 5):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run did not reach its hanging episode"
            time.sleep(0.05)
        time.sleep(1.0)  # the hung step is under way (a test run takes the task's 5 s timeout)
        return proc

    def episodes(self) -> list[dict[str, object]]:
        file = self.dir / "episodes.jsonl"
        return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []

    def rerun(self) -> subprocess.CompletedProcess[str]:
        self.armed.unlink(missing_ok=True)
        return subprocess.run(self.cmd, capture_output=True, text=True, timeout=600)


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """Two shipped demo tasks, their solutions and the hanging policy."""
    names = ("demo/pricing.apply_discount", "demo/money.parse_money")
    tasks = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if t.name in names]
    save_tasks(tasks, tmp_path / "tasks.jsonl")
    (tmp_path / "solutions.json").write_text(json.dumps({t.name: t.ground_truth for t in tasks}))
    (tmp_path / "hang.py").write_text(HANG_POLICY)
    return tmp_path


@pytest.fixture
def killed() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test started; whatever is still running at the end is killed."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _workers_of(pid: int) -> list[int]:
    """Live sandbox worker processes started by host process ``pid``."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if (
            protocol.MARKER.encode() in args
            and any(a.startswith(f"--host={pid}:".encode()) for a in args)
            and state != b"Z"
        ):
            found.append(int(name))
    return found


def _busy_looping(pid: int) -> bool:
    """Whether a process under host ``pid``'s sandbox workers is running on a CPU (the
    candidate's busy loop; idle runs wait in S state). Sampled for up to a second."""
    for _ in range(20):
        stats: dict[int, tuple[int, bytes]] = {}
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
                stats[int(name)] = (int(fields[1]), fields[0])
            except (OSError, IndexError, ValueError):
                continue
        workers = set(_workers_of(pid))
        pid1s = {p for p, (parent, _) in stats.items() if parent in workers}
        if any(parent in pid1s and state == b"R" for parent, state in stats.values()):
            return True
        time.sleep(0.05)
    return False


def _worker_dirs_of(pid: int) -> list[str]:
    return [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"gym-repost-sbx-{pid}-")]


def _one_line(text: str) -> str:
    return " ".join(text.split())  # rich wraps long messages


@pytest.mark.parametrize(
    ("signum", "code", "mode"),
    [(signal.SIGINT, 130, "sandbox"), (signal.SIGTERM, 143, "sandbox"), (signal.SIGTERM, 143, "sleep")],
)
def test_a_signal_stops_eval_promptly_and_a_rerun_completes_without_duplicates(
    demo: Path, killed: list[subprocess.Popen[str]], signum: int, code: int, mode: str
) -> None:
    run = Run(demo, mode)
    proc = run.start()
    killed.append(proc)
    assert _workers_of(proc.pid), "the run's sandbox workers should be running"
    if mode == "sandbox":
        assert _busy_looping(proc.pid), "a step should be hanging inside the sandbox"

    sent = time.monotonic()
    os.kill(proc.pid, signum)
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        took = time.monotonic() - sent
    assert took <= STOP_WITHIN, f"eval took {took:.1f} s to stop after {signal.Signals(signum).name}"
    assert proc.returncode == code, stderr
    said = "interrupted; every finished episode is saved (rerun the same command to continue)"
    assert said in stderr.replace("\n", "")

    deadline = time.monotonic() + 5
    while _workers_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _workers_of(proc.pid) == [] and _worker_dirs_of(proc.pid) == []

    # finished episodes are on disk as complete lines; the one in flight is not
    for name in ("episodes.jsonl", "trajectories.jsonl"):
        text = (run.dir / name).read_text()
        assert text.endswith("\n") and len([json.loads(line) for line in text.splitlines()]) == 5
    recorded = {(e["task_name"], e["sample"]) for e in run.episodes()}
    assert ("demo/pricing.apply_discount", 1) not in recorded and len(recorded) == 5
    assert (run.dir / ".lock").read_text() == ""

    result = run.rerun()
    assert result.returncode == 0, result.stderr
    keys = [(e["task_id"], e["sample"]) for e in run.episodes()]
    assert len(keys) == len(set(keys)) == 6
    summary = json.loads((run.dir / "summary.json").read_text())
    assert summary["episodes"] == 6 and summary["pass@3"] == 1.0 and summary["infra_errors"] == 0


def test_a_second_eval_into_the_same_run_dir_is_refused_with_the_holders_pid(
    demo: Path, killed: list[subprocess.Popen[str]]
) -> None:
    run = Run(demo, "sleep")
    proc = run.start()
    killed.append(proc)
    assert (run.dir / ".lock").read_text().startswith(f"pid {proc.pid} on ")

    second = subprocess.run(run.cmd, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2
    assert f"is in use: pid {proc.pid} on " in _one_line(second.stderr), second.stderr
    assert len(run.episodes()) == 5  # the refused run wrote nothing

    os.kill(proc.pid, signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130


def test_the_lock_of_a_killed_eval_is_taken_over(demo: Path, killed: list[subprocess.Popen[str]]) -> None:
    run = Run(demo, "sleep")
    proc = run.start()
    killed.append(proc)
    os.killpg(proc.pid, signal.SIGKILL)  # no clean-up at all
    proc.wait()
    stale = (run.dir / ".lock").read_text()
    assert stale.startswith(f"pid {proc.pid} on ")
    try:
        result = run.rerun()
        assert result.returncode == 0, result.stderr
        assert f"taking over the lock of {stale.strip()}" in _one_line(result.stderr)
        assert (run.dir / ".lock").read_text() == ""  # released by the run that finished
        assert len(run.episodes()) == 6
    finally:  # the killed host could not remove its workers' directories
        for name in _worker_dirs_of(proc.pid):
            subprocess.run(["rm", "-rf", os.path.join(tempfile.gettempdir(), name)], check=False)


HOLD_LOCK = textwrap.dedent("""\
    import sys, time
    from gym_repost.evaluate import RunDir
    with RunDir(sys.argv[1]).writer_lock():
        print("held", flush=True)
        time.sleep(600)
    """)


def test_run_dir_writer_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(RunDirBusyError, match=f"pid {holder.pid} on "):
            with RunDir(tmp_path).writer_lock():
                pass
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / ".lock").read_text().startswith(f"pid {holder.pid} on ")  # left by the dead

    rd = RunDir(tmp_path)
    with rd.writer_lock():
        assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()} on ")
        with rd.writer_lock():  # re-entrant for its holder
            pass
        with pytest.raises(RunDirBusyError, match=f"pid {os.getpid()} on "):
            with RunDir(tmp_path).writer_lock():  # another writer, even in this process
                pass
        assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()} on ")
    assert (tmp_path / ".lock").read_text() == ""
    with RunDir(tmp_path).writer_lock():  # free again
        pass
