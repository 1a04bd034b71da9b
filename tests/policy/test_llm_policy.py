"""The LLM policy end to end: scripted model server, real SDKs, real sandbox, real runner."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gym_repost.errors import ConfigError
from gym_repost.evaluate import Episode, RunConfig
from gym_repost.evaluate.runner import run_episode, tasks_digest
from gym_repost.harness import do_nothing_candidate
from gym_repost.llm.scripted_server import Fault, RecordedRequest, Reply, ScriptedLLMServer
from gym_repost.policy import load_policy
from gym_repost.policy.llm import LLMPolicy
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, load_tasks, save_tasks

pytestmark = pytest.mark.usefixtures("llm_keys")

ROOT = Path(__file__).resolve().parents[2]
WRONG = "def score(values, cap=100):\n    return sum(values)\n"


def block(code: str, before: str = "Here it is.") -> str:
    return f"{before}\n```python\n{code}```\n"


def play(
    server: ScriptedLLMServer,
    task: FunctionTask,
    sandbox: Sandbox,
    *,
    api: str = "openai-compatible",
    repairs: int = 0,
    **options: Any,
) -> tuple[Episode, list[dict[str, Any]]]:
    url = server.anthropic_base_url if api == "anthropic" else server.openai_base_url
    spec = f"llm:{api}/test-model"
    settings = {"base_url": url, "timeout": 2.0, "backoff_initial": 0.05, "backoff_max": 0.2, **options}
    factory = load_policy(spec, **settings)
    config = RunConfig(tasks="mem", tasks_digest=tasks_digest([task]), policy=spec, repairs=repairs)
    return run_episode(task, 0, factory, sandbox, config)


@pytest.mark.parametrize("api", ["openai-compatible", "anthropic"])
def test_an_agentic_episode_reads_writes_tests_and_submits(
    api: str, server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    write = Reply.calling("write_code", {"code": function_task.ground_truth}).tool_calls[0]
    test = Reply.calling("run_tests").tool_calls[0]
    server.push(
        Reply.calling("read_file", {"path": "tiny/util.py"}, text="Let me read the helper."),
        Reply(text="Now the code.", tool_calls=(write, test)),
        Reply.calling("submit"),
    )
    episode, trajectory = play(server, function_task, sandbox, api=api, mode="agentic")
    assert episode.status == "passed" and episode.reward == 1.0 and episode.submissions == [True]
    assert [s["tool"] for s in trajectory] == ["read_file", "write_code", "run_tests", "submit"]
    assert "def clamp" in server.requests[1].text() and "All tests passed." in server.requests[2].text()
    assert "tools" in server.requests[0].body and "Task: write `score`" in server.requests[0].text()
    stats = episode.stats
    assert stats["mode"] == "agentic" and stats["llm_calls"] == 3 and stats["model_answers"] == 3
    # each step records the tokens spent on it (the run viewer shows them): the two tool
    # calls of one answer cost one call, charged to the first; together, the episode's
    spent = [step["tokens"] for step in trajectory]
    assert spent[2] == {"input": 0, "output": 0} and all(s["input"] > 0 for s in (spent[0], spent[1], spent[3]))
    assert sum(s["input"] for s in spent) == stats["input_tokens"]
    assert sum(s["output"] for s in spent) == stats["output_tokens"]
    assert stats["input_tokens"] > 0 and stats["output_tokens"] > 0 and stats["retries"] == 0


@pytest.mark.parametrize("api", ["openai-compatible", "anthropic"])
def test_agentic_mistakes_are_observations_in_the_trajectory(
    api: str, server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    server.push(
        Reply.calling("write_code", '{"code": "def score('),
        Reply("Hmm, let me think."),
        Reply.calling("write_code", {"code": function_task.ground_truth}),
        Reply.calling("submit"),
    )
    episode, trajectory = play(server, function_task, sandbox, api=api, mode="agentic")
    assert episode.status == "passed"
    assert [(s["tool"], s["ok"]) for s in trajectory] == [
        (None, False),
        (None, False),
        ("write_code", True),
        ("submit", True),
    ]
    assert trajectory[0]["action"] == {"tool": "write_code", "args": '{"code": "def score('}
    assert "not valid JSON" in trajectory[0]["observation"] and trajectory[1]["action"] == "Hmm, let me think."
    assert episode.stats["malformed_tool_calls"] == 1 and episode.stats["replies_without_tool_call"] == 1
    assert "the tool arguments are not valid JSON" in server.requests[1].last_text()
    assert "Your reply called no tool" in server.requests[2].last_text()


def test_agentic_text_mode_reads_json_tool_calls(
    server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    action = json.dumps({"tool": "write_code", "args": {"code": function_task.ground_truth}})
    server.push(Reply(f"I will write it.\n```json\n{action}\n```"), Reply('{"tool": "submit", "args": {}}'))
    episode, _ = play(server, function_task, sandbox, mode="agentic", tool_calling="text")
    assert episode.status == "passed" and "tools" not in server.requests[0].body
    assert '{"tool": NAME, "args": {...}}' in server.requests[0].text()


@pytest.mark.parametrize("api", ["openai-compatible", "anthropic"])
def test_generate_and_repair_sends_the_failure_back(
    api: str, server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    server.push(Reply(block(WRONG)), Reply(block(function_task.ground_truth, "Fixed.")))
    episode, trajectory = play(server, function_task, sandbox, api=api, repairs=1)
    assert episode.status == "passed" and episode.submissions == [False, True] and episode.solved_at == 1
    assert [s["tool"] for s in trajectory] == ["write_code", "submit", "write_code", "submit"]
    prompt = server.requests[0].text()
    assert "## tiny/score.py" in prompt and "def score(values, cap=100):" in prompt
    assert "Sum of scaled values" in prompt and "math.floor(total)" not in prompt
    assert "tools" not in server.requests[0].body
    repair = server.requests[1].last_text()
    assert "Your function failed the tests" in repair and "WrongBehaviour" in repair
    assert "your code returned" in repair and "return value" in repair  # what it did, not the expected value
    assert episode.stats["model_answers"] == 2 and episode.stats["llm_calls"] == 2


def test_the_repair_budget_is_the_runs(
    server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    server.push(Reply(block(WRONG)), Reply(block(WRONG)))
    episode, _ = play(server, function_task, sandbox, repairs=1)
    assert episode.status == "failed" and episode.submissions == [False, False] and len(server.requests) == 2


def test_an_answer_without_code_uses_up_its_submission(
    server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    server.push(Reply("You should sum the scaled values."), Reply(block(function_task.ground_truth)))
    episode, trajectory = play(server, function_task, sandbox, repairs=1)
    assert episode.status == "passed" and episode.submissions == [False, True]
    assert [(s["tool"], s["ok"]) for s in trajectory] == [
        ("write_code", False),
        ("write_code", True),
        ("submit", True),
        ("write_code", True),
        ("submit", True),
    ]
    assert "NotImplementedError" in trajectory[2]["observation"]
    assert "contains no ```python code block" in server.requests[1].last_text()
    assert episode.stats["invalid_answers"] == 1


def test_docstring_removed_and_generated(
    server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    server.push(Reply(block(function_task.ground_truth)))
    play(server, function_task, sandbox, docstring="removed")
    assert "Sum of scaled values" not in server.requests[0].text()
    generated = "Add up the values times ten, each clamped to [0, cap], and floor the total."
    server.push(Reply(f'"""{generated}"""'), Reply(block(function_task.ground_truth)))
    episode, _ = play(server, function_task, sandbox, docstring="generated")
    ask_doc, generate = server.requests[1], server.requests[2]
    assert "Write a docstring" in ask_doc.text() and "math.floor(total)" in ask_doc.text()
    assert "Sum of scaled values" not in ask_doc.text() and ask_doc.body["temperature"] == 0.0
    assert f'"""{generated}"""' in generate.text() and "Sum of scaled values" not in generate.text()
    assert episode.status == "passed" and episode.stats["generated_docstring"] == generated
    assert episode.stats["llm_calls"] == 2


def test_faults_are_retried_and_never_scored(
    server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    server.push(
        Fault.rate_limit(0.1),
        Fault.server_error(),
        Fault.empty(),
        Reply(block(WRONG)),
        Fault.hang(10),
        Fault.reset(),
        Reply(block(function_task.ground_truth)),
    )
    episode, _ = play(server, function_task, sandbox, repairs=1, timeout=0.5)
    assert episode.status == "passed" and episode.submissions == [False, True]
    assert episode.stats["retries"] == 5 and episode.stats["llm_calls"] == 2


def test_an_endpoint_that_keeps_failing_is_an_infrastructure_error(
    server: ScriptedLLMServer, function_task: FunctionTask, sandbox: Sandbox
) -> None:
    server.push(Fault.server_error(), Fault.server_error())
    episode, _ = play(server, function_task, sandbox, max_retries=1)
    assert episode.status == "infra_error" and "LLMError" in episode.infra_error
    assert "gave up after 2 attempts" in episode.infra_error and episode.submissions == []


def test_llm_specs_and_options_fail_at_load_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    factory = load_policy("llm:openai-compatible/test", base_url="http://127.0.0.1:9/v1", mode="agentic")
    policy = factory()
    assert isinstance(policy, LLMPolicy) and policy.mode == "agentic" and factory() is not policy
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        load_policy("llm:openai/gpt-4o-mini")
    with pytest.raises(ConfigError, match="'temprature'"):
        load_policy("llm:openai-compatible/test", base_url="http://x/v1", temprature=0)
    with pytest.raises(ConfigError, match="mode='chat'"):
        load_policy("llm:openai-compatible/test", base_url="http://x/v1", mode="chat")
    with pytest.raises(ConfigError, match="applies to mode=generate-and-repair"):
        load_policy("llm:openai-compatible/test", base_url="http://x/v1", mode="agentic", docstring="removed")
    with pytest.raises(ConfigError, match="PROVIDER/MODEL"):
        load_policy("llm:gemini/pro")


# --------------------------------------------------------------------------- the CLI


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


class TaskModel:
    """Answers each task's generation prompt with its ground truth; some tasks first get a
    do-nothing answer (so they pass only after a repair). The first request of each turn
    (the first two of a repair turn) meets a fault, each kind in turn."""

    FAULTS = [Fault.rate_limit(0.1), Fault.hang(10), Fault.server_error(), Fault.reset(), Fault.empty()]

    def __init__(self, tasks: list[FunctionTask], fail_first: set[str]) -> None:
        self.tasks = {t.target.qualname: t for t in tasks}
        self.fail_first = fail_first
        self.seen: Counter[tuple[str, int]] = Counter()
        self.faults = 0
        self.lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply | Fault:
        qualname = re.search(r"Write the complete function `([\w.]+)`", request.text()).group(1)
        task = self.tasks[qualname]
        turn = sum(m["role"] == "assistant" for m in request.messages)
        with self.lock:
            self.seen[qualname, turn] += 1
            if self.seen[qualname, turn] == 1 or (turn == 1 and self.seen[qualname, turn] == 2):
                self.faults += 1
                return self.FAULTS[(self.faults - 1) % len(self.FAULTS)]
        if turn == 0 and task.name in self.fail_first:
            return Reply(block(do_nothing_candidate(task)))
        return Reply(block(task.ground_truth))


def test_eval_through_the_cli_gives_the_self_repair_table(tmp_path: Path, server: ScriptedLLMServer) -> None:
    names = ("demo/pricing.apply_discount", "demo/inventory.Inventory.reserve", "demo/config.load_settings")
    tasks = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if t.name in names]
    save_tasks(tasks, tmp_path / "tasks.jsonl")
    model = TaskModel(tasks, fail_first={"demo/inventory.Inventory.reserve"})
    server.responder = model
    args = [
        "eval",
        str(tmp_path / "tasks.jsonl"),
        "--policy",
        "llm:openai-compatible/test",
        "--base-url",
        server.openai_base_url,
        "--repairs",
        "1",
        "--workers",
        "2",
        "--policy-arg",
        "timeout=1",
        "--policy-arg",
        "backoff_initial=0.05",
    ]
    result = cli(*args, "-o", str(tmp_path / "run"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "self-repair" in result.stdout and "r=0" in result.stdout and "r=1" in result.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["self_repair"] == {"0": pytest.approx(2 / 3), "1": 1.0} and summary["infra_errors"] == 0
    episodes = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["submissions"] for e in episodes) == [[False, True], [True], [True]]
    assert all(e["stats"]["retries"] >= 1 for e in episodes) and model.faults == 5
    requests = len(server.requests)
    assert cli(*args, "-o", str(tmp_path / "run")).returncode == 0  # resumed: nothing left to run
    assert len(server.requests) == requests
    again = cli(*args, "-o", str(tmp_path / "rerun"), "--policy-arg", f"cache_dir={tmp_path / 'run' / 'llm-cache'}")
    assert again.returncode == 0, again.stderr
    assert len(server.requests) == requests, "a rerun with the cache must not reach the model"
    rerun = json.loads((tmp_path / "rerun" / "summary.json").read_text())
    assert rerun["self_repair"] == summary["self_repair"]
    cached = [json.loads(line)["stats"] for line in (tmp_path / "rerun" / "episodes.jsonl").read_text().splitlines()]
    assert all(s["cache_hits"] == s["llm_calls"] and s["input_tokens"] == 0 for s in cached)
