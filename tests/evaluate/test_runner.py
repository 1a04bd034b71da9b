"""The rollout runner: scoring, infrastructure errors, resuming after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gym_repost.errors import RunDirError
from gym_repost.evaluate import Episode, RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.policy import load_policy
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, save_tasks


def _config(tasks, policy: str = "oracle", **kw) -> RunConfig:
    return RunConfig(tasks="mem", tasks_digest=tasks_digest(tasks), policy=policy, **kw)


def test_oracle_passes_and_mutant_fails(
    tmp_path: Path, function_task: FunctionTask, method_task: FunctionTask, sandbox: Sandbox
) -> None:
    tasks = [function_task, method_task]
    summary = evaluate(
        tasks, load_policy("oracle"), _config(tasks, n=2, workers=2), RunDir(tmp_path / "oracle"), sandbox
    )
    assert summary["pass@1"] == 1.0 and summary["pass@2"] == 1.0 and summary["episodes"] == 4
    summary = evaluate(
        tasks, load_policy("mutant"), _config(tasks, "mutant", repairs=2), RunDir(tmp_path / "mutant"), sandbox
    )
    assert summary["pass@1"] == 0.0 and summary["self_repair"] == {"0": 0.0, "1": 0.0, "2": 0.0}
    episodes = RunDir(tmp_path / "mutant").episodes()
    assert all(e.submissions == [False, False, False] for e in episodes)
    assert (tmp_path / "mutant" / "summary.json").exists()


def test_example_agent_repairs_after_a_failing_test_run(
    tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    factory = load_policy("agents/my_agent.py:MyAgent")
    summary = evaluate([function_task], factory, _config([function_task], factory.spec), RunDir(tmp_path), sandbox)
    assert summary["pass@1"] == 0.0 and summary["infra_errors"] == 0  # its stand-in model only guesses
    steps = json.loads((tmp_path / "trajectories.jsonl").read_text().splitlines()[0])["steps"]
    assert [s["tool"] for s in steps] == [
        "list_files",
        "read_file",
        "write_code",
        "run_tests",
        "write_code",
        "run_tests",
        "submit",
    ]
    assert all(s["ok"] for s in steps)
    # its transcript: the statement (a pointer to step 0) and a guess at each write_code
    record = json.loads((tmp_path / "trajectories.jsonl").read_text().splitlines()[0])
    assert record["reset"]["messages"] == [{"role": "user", "content": "", "observation_of_step": 0}]
    guesses = [[m["content"] for m in s["messages"]] for s in steps if s["tool"] == "write_code"]
    assert guesses == [["A guess: `score` returns None."]] * 2  # no return annotation: no better guess


def test_a_policy_crash_is_a_failed_episode_with_its_traceback_not_an_infrastructure_error(
    tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    agent = tmp_path / "flaky.py"
    agent.write_text(
        textwrap.dedent(f"""\
        import os
        ANSWER = {function_task.ground_truth!r}
        class Flaky:
            def reset(self, task, observation, info, *, seed):
                pass
            def act(self, observation, info):
                if not info["code_written"]:
                    return {{"tool": "write_code", "args": {{"code": ANSWER}}}}
                if not os.path.exists({str(tmp_path / "healed")!r}):
                    raise RuntimeError("the agent's own bug")
                return {{"tool": "submit"}}
        """)
    )
    factory = load_policy(f"{agent}:Flaky")
    config = _config([function_task], factory.spec)
    summary = evaluate([function_task], factory, config, RunDir(tmp_path / "run"), sandbox)
    # one failed episode: pass@1 = 0/1; nothing left out as infrastructure
    assert summary["infra_errors"] == 0 and summary["policy_errors"] == 1 and summary["pass@1"] == 0.0
    assert summary["policy_error_share"] == 1.0 and "ended in an error of the policy's own" in summary["policy_warning"]
    (episode,) = RunDir(tmp_path / "run").episodes()
    assert episode.status == "failed" and episode.infra_error is None and episode.steps == 1
    error = episode.policy_error
    assert error is not None and error["type"] == "RuntimeError" and error["message"] == "the agent's own bug"
    assert f'File "{agent}", line 10, in act' in error["traceback"]
    assert error["traceback"].rstrip().endswith("RuntimeError: the agent's own bug")
    (tmp_path / "healed").touch()  # not rerun: the policy's own error is a result, not a hiccup
    summary = evaluate([function_task], factory, config, RunDir(tmp_path / "run"), sandbox)
    assert summary["policy_errors"] == 1 and summary["episodes"] == 1


def test_a_run_directory_refuses_other_settings(tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox) -> None:
    evaluate([function_task], load_policy("oracle"), _config([function_task]), RunDir(tmp_path), sandbox)
    with pytest.raises(RunDirError, match="n: 1 there, 2 now"):
        RunDir(tmp_path).prepare(_config([function_task], n=2))


def test_partial_last_line_is_dropped_on_resume(tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox) -> None:
    config = _config([function_task], n=2)
    evaluate([function_task], load_policy("oracle"), config, RunDir(tmp_path), sandbox)
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    (tmp_path / "episodes.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    summary = evaluate([function_task], load_policy("oracle"), config, RunDir(tmp_path), sandbox)
    records = [Episode.model_validate_json(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r.sample for r in records) == [0, 1] and summary["episodes"] == 2


SLOW_AGENT = textwrap.dedent("""\
    import time
    ANSWERS = {answers!r}
    class Slow:
        def reset(self, task, observation, info, *, seed):
            self.answer, self.written = ANSWERS[task.name], False
        def act(self, observation, info):
            time.sleep(0.15)
            if self.written:
                return {{"tool": "submit"}}
            self.written = True
            return {{"tool": "write_code", "args": {{"code": self.answer}}}}
    """)


def test_resume_after_kill_loses_nothing_and_duplicates_nothing(
    tmp_path: Path, function_task: FunctionTask, method_task: FunctionTask
) -> None:
    tasks_file = tmp_path / "tasks.jsonl"
    save_tasks([function_task, method_task], tasks_file)
    answers = {t.name: t.ground_truth for t in (function_task, method_task)}  # the test knows them; agents do not
    (tmp_path / "slow.py").write_text(SLOW_AGENT.format(answers=answers))
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "gym_repost.cli",
        "eval",
        str(tasks_file),
        "--policy",
        f"{tmp_path / 'slow.py'}:Slow",
        "-n",
        "6",
        "--workers",
        "2",
        "-o",
        str(run),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        done = run / "episodes.jsonl"
        if done.exists() and len(done.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len((run / "episodes.jsonl").read_text().splitlines())
    assert 3 <= before < 12
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    keys = [(r["task_id"], r["sample"]) for r in records]
    assert len(keys) == len(set(keys)) == 12
    summary = json.loads((run / "summary.json").read_text())
    assert summary["pass@6"] == 1.0 and summary["episodes"] == 12
    config = json.loads((run / "config.json").read_text())
    assert config["sandbox"]["type"] == "local" and config["sandbox"]["workers"] == 2  # the typed sandbox config


def test_a_run_of_an_older_version_with_a_sandbox_name_and_options_still_reads(tmp_path: Path) -> None:
    from gym_repost.evaluate import RunDir

    older = {
        "tasks": "t.jsonl",
        "tasks_digest": "d",
        "policy": "oracle",
        "n": 1,
        "sandbox": "local",
        "sandbox_options": {"env": "repost-eval", "python": "/opt/env/bin/python3", "preload": ["numpy"]},
    }
    (tmp_path / "config.json").write_text(json.dumps(older))
    config = RunDir(tmp_path).read_config()
    assert config is not None and config.sandbox.type == "local"
    assert config.sandbox.python == "/opt/env/bin/python3" and config.sandbox.preload == ["numpy"]
    docker = RunConfig.model_validate({**older, "sandbox": "docker", "sandbox_options": {"env": "repost-eval"}})
    assert docker.sandbox.type == "docker"
