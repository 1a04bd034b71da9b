"""Starting, resuming and stopping a run (issue 34): a policy checked before any work, its
fingerprint on resume, ``--overwrite``, ``--fail-fast``, exit statuses, a failed start that
leaves nothing behind, damaged records, and a test-file run's report written whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from testfile_tasks import tiny_testfile_task  # noqa: F401 - a fixture

from gym_repost.errors import PolicyError, RunDirError
from gym_repost.evaluate import Episode, RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import RunStart, tasks_digest
from gym_repost.evaluate.viewer import write_report
from gym_repost.policy import load_policy
from gym_repost.policy.loader import policy_fingerprint
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, TestFileTask, load_tasks, save_tasks

ROOT = Path(__file__).resolve().parents[2]

RAISER = textwrap.dedent("""\
    class Raiser:
        def reset(self, task, observation, info, *, seed):
            self.name = info["task_name"]

        def act(self, observation, info):
            raise ValueError(f"cannot act on {self.name}")
    """)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def _config(tasks: list[Any], policy: str = "oracle", **kw: Any) -> RunConfig:
    return RunConfig(tasks="mem", tasks_digest=tasks_digest(tasks), policy=policy, **kw)


@pytest.fixture
def four(tmp_path: Path) -> Path:
    """Four demo tasks."""
    tasks = list(load_tasks(ROOT / "tasks" / "demo.jsonl"))[:4]
    save_tasks(tasks, tmp_path / "tasks.jsonl")
    return tmp_path / "tasks.jsonl"


# ------------------------------------------------------------------ the policy, before any work


def test_a_policy_that_cannot_be_built_fails_at_load_time() -> None:
    with pytest.raises(PolicyError, match="policy 'oracle' could not be created: TypeError"):
        load_policy("oracle", temperature=0.2)


def test_the_fingerprint_holds_the_policy_files_sha256(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(RAISER)
    spec = f"{agent}:Raiser"
    before = policy_fingerprint(spec, {"k": 1})
    import hashlib

    assert before.spec == spec and before.options == {"k": 1}
    assert before.files == {str(agent): hashlib.sha256(agent.read_bytes()).hexdigest()}
    assert policy_fingerprint("oracle").files == {} and policy_fingerprint("llm:openai/gpt-4o").files == {}
    script = tmp_path / "s.jsonl"
    script.write_text("{}\n")
    assert list(policy_fingerprint(f"scripted:{script}").files) == [str(script)]
    assert list(policy_fingerprint("gym_repost.policy.oracle:OraclePolicy").files)[0].endswith("oracle.py")
    agent.write_text(RAISER + "# edited\n")
    (change,) = before.file_changes(policy_fingerprint(spec))
    assert change.startswith(f"the policy file {agent} changed since the run started (SHA-256 ")


def test_resuming_after_the_policy_file_changed_is_refused_and_overwrite_starts_afresh(
    tmp_path: Path, four: Path
) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(RAISER)
    run = tmp_path / "run"
    args = ["eval", str(four), "--policy", f"{agent}:Raiser", "-o", str(run), "--limit", "2"]
    first = cli(*args)
    assert first.returncode == 1, first.stderr  # every episode a policy error: above the 5% warning
    config = json.loads((run / "config.json").read_text())
    assert config["policy_fingerprint"]["files"] == {
        str(agent): policy_fingerprint(f"{agent}:Raiser").files[str(agent)]
    }

    again = cli(*args)  # the same policy: resumed, nothing left to run
    assert again.returncode == 1 and "resuming: 2 done, 0 to run" in again.stderr

    agent.write_text(RAISER.replace("cannot act", "still cannot act"))
    refused = cli(*args)
    assert refused.returncode == 2, refused.stderr
    message = " ".join(refused.stderr.split())
    assert f"the policy file {agent} changed since the run started" in message and "--overwrite" in message
    assert len((run / "episodes.jsonl").read_text().splitlines()) == 2  # untouched

    fresh = cli(*args, "--overwrite")
    assert fresh.returncode == 1 and "resuming" not in fresh.stderr
    records = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all("still cannot act" in r["policy_error"]["message"] for r in records)


# ------------------------------------------------------------------ policy errors, fail-fast, exit statuses


def test_policy_errors_are_counted_apart_and_exit_1_above_the_threshold(tmp_path: Path, four: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(RAISER)
    run = tmp_path / "run"
    result = cli("eval", str(four), "--policy", f"{agent}:Raiser", "-o", str(run))
    assert result.returncode == 1, result.stderr
    assert "WARNING: 4 of 4 episodes (100.0%) ended in an error of the policy's own" in " ".join(result.stdout.split())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["policy_errors"] == 4 and summary["infra_errors"] == 0
    assert summary["pass@1"] == 0.0 and summary["with_infra_errors"]["pass@1"] == 0.0  # failures, scored
    record = json.loads((run / "episodes.jsonl").read_text().splitlines()[0])
    assert record["status"] == "failed" and record["infra_error"] is None
    assert record["policy_error"]["type"] == "ValueError"
    assert f'File "{agent}", line 6, in act' in record["policy_error"]["traceback"]


def test_fail_fast_stops_at_the_first_policy_error_and_keeps_it(tmp_path: Path, four: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(RAISER)
    run = tmp_path / "run"
    result = cli("eval", str(four), "--policy", f"{agent}:Raiser", "-o", str(run), "--fail-fast", "-w", "2")
    assert result.returncode == 1, result.stderr
    (line,) = (run / "episodes.jsonl").read_text().splitlines()  # the first; those in flight are not kept
    stopped = json.loads((run / "summary.json").read_text())["stopped_at"]
    assert stopped["task"] == json.loads(line)["task_name"] and stopped["error"].startswith("policy error: cannot act")
    assert "stopped (--fail-fast) at" in " ".join(result.stdout.split())


def test_an_llm_endpoint_that_is_down_stays_an_infrastructure_error_and_exits_1(tmp_path: Path, four: Path) -> None:
    run = tmp_path / "run"
    result = cli(
        "eval", str(four), "--limit", "2", "--policy", "llm:openai-compatible/m", "--base-url",
        "http://127.0.0.1:9/v1", "--policy-arg", "max_retries=0", "-o", str(run),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["infra_errors"] == 2 and summary["policy_errors"] == 0
    assert "rerun the same command to retry them" in " ".join(result.stdout.split())


def test_fail_fast_in_the_library_returns_the_summary_with_where_it_stopped(
    tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(RAISER)
    factory = load_policy(f"{agent}:Raiser")
    starts: list[RunStart] = []
    config = _config([function_task], factory.spec, n=3, workers=1)
    summary = evaluate(
        [function_task], factory, config, RunDir(tmp_path / "run"), sandbox, fail_fast=True, on_start=starts.append
    )
    assert starts == [RunStart(done=0, passed=0, todo=3)]
    assert summary["episodes"] == 1 and summary["stopped_at"]["sample"] == 0
    summary = evaluate([function_task], factory, config, RunDir(tmp_path / "run"), sandbox, on_start=starts.append)
    assert starts[-1] == RunStart(done=1, passed=0, todo=2) and summary["episodes"] == 3
    assert "stopped_at" not in summary


# ------------------------------------------------------------------ nothing left behind


def test_a_run_that_fails_to_start_leaves_nothing_new_behind(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "a" / "b" / "run")
    config = RunConfig(tasks="mem", tasks_digest="x", policy="oracle")
    with pytest.raises(RuntimeError, match="no sandbox"):
        with run.writer_lock():
            run.prepare(config)
            assert (run.path / "config.json").exists() and (run.path / ".lock").exists()
            raise RuntimeError("no sandbox")
    assert not (tmp_path / "a").exists()

    with pytest.raises(KeyboardInterrupt):  # an interrupt before the first episode
        with run.writer_lock():
            run.prepare(config)
            raise KeyboardInterrupt
    assert not (tmp_path / "a").exists()

    with run.writer_lock():  # a run that recorded an episode keeps it, interrupted or not
        run.prepare(config)
        run.append(Episode(task_id="t", task_name="t", sample=0, seed=0, policy="oracle", status="failed"), [])
    with pytest.raises(KeyboardInterrupt):
        with run.writer_lock():
            raise KeyboardInterrupt
    assert sorted(p.name for p in run.path.iterdir()) == [
        ".lock",
        "config.json",
        "episodes.jsonl",
        "trajectories.jsonl",
    ]


def test_a_lock_file_removed_under_its_taker_is_taken_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that failed to start removes the lock file it made, while holding it; a
    process that opened that file meanwhile gets the lock of a file nobody sees, and must
    notice and lock the new one."""
    import fcntl

    run = RunDir(tmp_path / "run")
    real = fcntl.flock
    removed: list[int] = []

    def flock(fd: int, operation: int) -> None:
        real(fd, operation)
        if not removed:  # the first lock taken: its file goes, as if another run failed to start
            removed.append(fd)
            os.unlink(run.path / ".lock")

    monkeypatch.setattr(fcntl, "flock", flock)
    with run.writer_lock():
        assert removed and (run.path / ".lock").read_text().startswith(f"pid {os.getpid()} on ")
        assert os.fstat(run._writer_fd or -1).st_ino == os.stat(run.path / ".lock").st_ino


def test_a_damaged_episodes_file_names_its_line(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.prepare(RunConfig(tasks="mem", tasks_digest="x", policy="oracle"))
    run.append(Episode(task_id="t", task_name="t", sample=0, seed=0, policy="oracle", status="failed"), [])
    with open(tmp_path / "episodes.jsonl", "ab") as fh:
        fh.write(b'{"task_id": "caf\xe9"}\n')
    with pytest.raises(RunDirError, match=r"episodes.jsonl:2: not UTF-8 text \(byte 0xe9 at column 17\)"):
        run.episodes()
    with pytest.raises(RunDirError, match="episodes.jsonl:2"):
        run.check(RunConfig(tasks="mem", tasks_digest="x", policy="oracle"))


# ------------------------------------------------------------------ the report of a test-file run


def test_a_test_file_runs_report_renders_and_is_written_whole(
    tmp_path: Path,
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks = [tiny_testfile_task]
    run = tmp_path / "run"
    evaluate(tasks, load_policy("mutant"), _config(tasks, "mutant"), RunDir(run), sandbox)
    index = write_report([run], run / "report")
    page = (run / "report" / "episodes" / "0.html").read_text()
    assert index.is_file() and "write_tests" in page and "reward 0." in page
    before = sorted(p.relative_to(run) for p in run.rglob("*"))

    import gym_repost.evaluate.viewer as viewer

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the disk filled up")

    monkeypatch.setattr(viewer, "_write_run", broken)
    with pytest.raises(RuntimeError, match="the disk filled up"):
        write_report([run], run / "report")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # the earlier report stays whole
    with pytest.raises(RuntimeError):
        write_report([run], tmp_path / "new" / "report")
    assert not (tmp_path / "new").exists()


def test_report_of_a_test_file_run_from_the_command_line(
    tmp_path: Path,
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
) -> None:
    tasks = [tiny_testfile_task]
    run = tmp_path / "run"
    evaluate(tasks, load_policy("oracle"), _config(tasks, "oracle"), RunDir(run), sandbox)
    result = cli("report", str(run))
    assert result.returncode == 0, result.stderr
    assert (run / "report" / "episodes" / "0.html").is_file() and (run / "report.html").is_file()
