"""Episode transcripts: what the runner records of every policy (the task prompt, actions,
observations, seconds) and of a policy that keeps a conversation (an LLM's prompts, replies
with tool calls, tool results, tokens), bounded; and what the episode page shows of them.

LLM transcripts come from the real ``openai`` and ``anthropic`` SDKs talking to the
scripted server on loopback, through the real runner and sandbox."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gym_repost.evaluate import Episode, RunConfig, RunDir, evaluate
from gym_repost.evaluate.run_dir import Trajectory
from gym_repost.evaluate.runner import make_env, run_episode, tasks_digest
from gym_repost.evaluate.transcript import MAX_OBSERVATION, MAX_STEP_CHARS, MAX_TEXT, bounded_text
from gym_repost.evaluate.viewer import write_report
from gym_repost.llm.scripted_server import Reply, ScriptedLLMServer
from gym_repost.policy import load_policy
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask

WRONG = "def score(values, cap=100):\n    return sum(values)\n"


def _block(code: str, before: str = "Here it is.") -> str:
    return f"{before}\n```python\n{code}```\n"


def _llm_run(
    tmp_path: Path, server: ScriptedLLMServer, task: FunctionTask, sandbox: Sandbox, api: str, **options: Any
) -> tuple[Episode, Trajectory, Path]:
    """One LLM episode through :func:`evaluate` into a run directory, and its report."""
    url = server.anthropic_base_url if api == "anthropic" else server.openai_base_url
    spec = f"llm:{api}/test-model"
    factory = load_policy(spec, base_url=url, timeout=2.0, **options)
    config = RunConfig(tasks="mem", tasks_digest=tasks_digest([task]), policy=spec, repairs=1)
    run = RunDir(tmp_path / "run")
    evaluate([task], factory, config, run, sandbox)
    (episode,) = run.episodes()
    write_report([run.path], tmp_path / "report")
    return episode, run.trajectories()[episode.key], tmp_path / "report" / "episodes" / "0.html"


def _step_html(page: str, number: int) -> str:
    return page.split(f'id="step-{number}"', 1)[1].split("</li>", 1)[0]


@pytest.mark.usefixtures("llm_keys")
@pytest.mark.parametrize("api", ["openai-compatible", "anthropic"])
def test_an_agentic_transcript_lands_in_the_episode_and_its_page(
    api: str, tmp_path: Path, server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    write = Reply.calling("write_code", {"code": function_task.ground_truth}).tool_calls[0]
    test = Reply.calling("run_tests").tool_calls[0]
    server.push(
        Reply.calling("read_file", {"path": "tiny/util.py"}, text="Let me read the helper."),
        Reply(text="Now the code, then the tests.", tool_calls=(write, test)),
        Reply.calling("submit", text="All green: submitting."),
    )
    episode, trajectory, page_file = _llm_run(tmp_path, server, function_task, sandbox, api, mode="agentic")
    assert episode.status == "passed"

    # step 0: the task prompt, the system prompt, and the first user turn (the prompt itself: a pointer)
    assert trajectory.reset is not None and trajectory.reset["observation"].startswith("# Task: write `score`")
    system, user = trajectory.reset["messages"]
    assert system["role"] == "system" and "tool" in system["content"]
    assert user == {"role": "user", "content": "", "observation_of_step": 0}
    assert set(trajectory.reset["seconds"]) == {"env", "policy"}

    # each step: the messages added while choosing its action; a tool result points at its step
    messages = [step["messages"] for step in trajectory]
    (read,) = messages[0]
    assert read["role"] == "assistant" and read["content"] == "Let me read the helper."
    assert [(c["name"], json.loads(c["arguments"])) for c in read["tool_calls"]] == [
        ("read_file", {"path": "tiny/util.py"})
    ]
    assert read["tokens_in"] > 0 and read["tokens_out"] > 0 and isinstance(read["seconds"], float)
    result, reply = messages[1]
    assert result["role"] == "tool" and result["observation_of_step"] == 1 and result["content"] == ""
    assert result["tool_call_id"] == read["tool_calls"][0]["id"]
    assert reply["content"] == "Now the code, then the tests."
    assert [c["name"] for c in reply["tool_calls"]] == ["write_code", "run_tests"]
    # the second call of that reply: the first call's result, and no model call in this step
    assert [(m["role"], m.get("observation_of_step")) for m in messages[2]] == [("tool", 2)]
    assert [m.get("observation_of_step") for m in messages[3]] == [3, None]
    assert messages[3][1]["tool_calls"][0]["name"] == "submit"
    replies = [m for step in messages for m in step if m["role"] == "assistant"]
    assert sum(m["tokens_in"] for m in replies) == episode.stats["input_tokens"]
    assert sum(m["tokens_out"] for m in replies) == episode.stats["output_tokens"]
    assert all(set(step["seconds"]) == {"policy", "env"} for step in trajectory)
    assert "def clamp" in trajectory[0]["observation"]  # the tool result itself, kept once

    page = page_file.read_text()
    assert "task prompt" in _step_html(page, 0) and "# Task: write `score`" in _step_html(page, 0)
    assert "Let me read the helper." in _step_html(page, 1) and "read_file" in _step_html(page, 1)
    assert re.search(r"[\d,]+ in / [\d,]+ out tokens · \d+\.\d\d s", _step_html(page, 1))
    assert 'href="#step-1"' in _step_html(page, 2) and "Now the code, then the tests." in _step_html(page, 2)
    assert " in / " not in _step_html(page, 3)  # no "0 in / 0 out": step 3 made no model call
    assert "All green: submitting." in _step_html(page, 4) and "policy " in _step_html(page, 4)


@pytest.mark.usefixtures("llm_keys")
def test_generate_and_repair_records_the_prompt_and_the_repair_request(
    tmp_path: Path, server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    server.push(Reply(_block(WRONG, "A first try.")), Reply(_block(function_task.ground_truth, "Fixed.")))
    episode, trajectory, page_file = _llm_run(tmp_path, server, function_task, sandbox, "openai-compatible")
    assert episode.status == "passed" and [s["tool"] for s in trajectory] == ["write_code", "submit"] * 2
    assert trajectory.reset is not None
    system, prompt = trajectory.reset["messages"]
    assert system["role"] == "system" and prompt["role"] == "user"
    assert "def score(values, cap=100):" in prompt["content"] and "observation_of_step" not in prompt
    (answer,) = trajectory[0]["messages"]
    assert answer["role"] == "assistant" and answer["content"].startswith("A first try.")
    assert trajectory[1]["messages"] == []  # the submit: no model call
    repair, fixed = trajectory[2]["messages"]
    assert repair["role"] == "user" and "Your function failed the tests" in repair["content"]
    assert fixed["content"].startswith("Fixed.")
    page = page_file.read_text()
    assert "Your function failed the tests" in _step_html(page, 3) and "A first try." in _step_html(page, 1)


def test_every_policy_gets_its_prompt_actions_observations_and_seconds(
    tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    config = RunConfig(tasks="mem", tasks_digest=tasks_digest([function_task]), policy="oracle")
    evaluate([function_task], load_policy("oracle"), config, RunDir(tmp_path / "run"), sandbox)
    record = json.loads((tmp_path / "run" / "trajectories.jsonl").read_text())
    assert record["reset"]["observation"].startswith("# Task: write `score`")
    assert "messages" not in record["reset"]  # the oracle keeps no conversation
    assert [s["tool"] for s in record["steps"]] == ["write_code", "submit"]
    assert all("messages" not in s and set(s["seconds"]) == {"policy", "env"} for s in record["steps"])
    assert record["steps"][0]["action"]["args"]["code"] == function_task.ground_truth
    # wall-clock timings stay out of the environment's info: seeded steps are reproducible
    env = make_env(function_task, sandbox, config)
    _, info = env.reset(seed=0)
    infos = [info] + [env.step(a)[4] for a in ({"tool": "list_files", "args": {}}, {"tool": "run_tests", "args": {}})]
    env.close()
    assert not [k for i in infos for k in i if "second" in k or "time" in k or "duration" in k]


class _Chatty:
    """A policy whose transcript is too long, holds junk, or breaks."""

    def __init__(self, mode: str = "long") -> None:
        self.mode = mode
        self.messages: list[Any] = []

    def reset(self, task: Any, observation: str, info: dict[str, Any], *, seed: int) -> None:
        self.messages = [{"role": "user", "content": observation}]

    def act(self, observation: str, info: dict[str, Any]) -> dict[str, Any]:
        huge = "x" * (MAX_TEXT + 5000)
        self.messages += [
            {"role": "tool", "content": observation, "tool_call_id": "c1"},
            {"role": "assistant", "content": huge, "tool_calls": [{"id": "c2", "name": "submit", "arguments": huge}]},
            "not a message",
            {"role": "assistant", "content": "a lone surrogate: \ud800", "seconds": float("nan")},
            *({"role": "assistant", "content": "y" * 20_000} for _ in range(12)),
        ]
        if self.mode == "raise" and len(self.messages) > 20:
            raise RuntimeError("the policy's own bug")
        return {"tool": "list_files", "args": {}}

    def transcript(self) -> list[Any]:
        if self.mode == "broken":
            raise ValueError("no transcript today")
        return self.messages


def test_transcripts_are_bounded_and_never_break_an_episode(
    tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    config = RunConfig(tasks="mem", tasks_digest=tasks_digest([function_task]), policy="chatty", max_steps=2)
    episode, trajectory = run_episode(function_task, 0, _Chatty, sandbox, config)
    run = RunDir(tmp_path / "run")
    run.prepare(config)
    run.append(episode, trajectory)  # the record can be written
    assert run.trajectories()[episode.key] == trajectory
    assert episode.status == "failed" and episode.truncated and len(trajectory) == 2
    first, second = trajectory[0]["messages"], trajectory[1]["messages"]
    assert first[0] == {"role": "tool", "content": "", "tool_call_id": "c1", "observation_of_step": 0}
    cut = "5,000 more characters not recorded]"
    assert len(first[1]["content"]) < MAX_TEXT + 100 and first[1]["content"].endswith(cut)
    assert first[1]["tool_calls"][0]["arguments"].endswith(cut)
    assert first[2]["content"] == "(not a message: 'not a message')"
    assert first[3] == {"role": "assistant", "content": "a lone surrogate: ?", "seconds": 0.0}
    assert "more messages of this step not recorded" in first[-1]["content"]
    assert sum(len(m["content"]) for m in first) < MAX_STEP_CHARS + 1000
    assert second[0]["observation_of_step"] == 1  # the tool result of step 1
    assert bounded_text("abc", 2) == "ab\n… [truncated: 1 more characters not recorded]"
    assert all(len(s["observation"]) <= MAX_OBSERVATION + 100 for s in trajectory)

    episode, trajectory = run_episode(function_task, 0, lambda: _Chatty("broken"), sandbox, config)
    assert episode.status == "failed" and all("messages" not in s for s in trajectory)


def test_the_step_a_policy_error_stopped_keeps_what_the_policy_said(
    tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    config = RunConfig(tasks="mem", tasks_digest=tasks_digest([function_task]), policy="chatty")
    episode, trajectory = run_episode(function_task, 0, lambda: _Chatty("raise"), sandbox, config)
    assert episode.status != "passed" and "the policy's own bug" in (episode.infra_error or str(episode))
    assert len(trajectory) == 1 and trajectory.interrupted is not None
    assert "action" not in trajectory.interrupted and set(trajectory.interrupted["seconds"]) == {"policy"}
    assert trajectory.interrupted["messages"][0]["observation_of_step"] == 1

    # the record as the other half of the runner writes it: the policy's error with its traceback
    traceback = 'Traceback (most recent call last):\n  File "agent.py", line 12, in act\nRuntimeError: own bug'
    error = {"type": "RuntimeError", "message": "the policy's own bug", "traceback": traceback}
    recorded = Episode(**{**episode.model_dump(), "policy_error": error})
    run = RunDir(tmp_path / "run")
    run.prepare(config)
    run.append(recorded, trajectory)
    write_report([run.path], tmp_path / "report")
    page = html.unescape((tmp_path / "report" / "episodes" / "0.html").read_text())
    assert "Policy error" in page and 'File "agent.py", line 12, in act' in page
    assert "the episode stopped during step 2" in page and "The policy raised RuntimeError" in page
