"""LLM clients against a real HTTP server on loopback, through the real SDKs.

The scripted server speaks the OpenAI chat-completions and the Anthropic messages wire
formats; faults are injected by the server, never by patching the SDKs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gym_repost.errors import ConfigError, InfrastructureError, LLMError
from gym_repost.llm import Ledger, LLMClient, Message, ToolCall, llm_config
from gym_repost.llm.scripted_server import Fault, RecordedRequest, Reply, ScriptedLLMServer, read_script
from gym_repost.tools import FUNCTION_TOOLS

pytestmark = pytest.mark.usefixtures("llm_keys")

APIS = ["openai", "openai-compatible", "anthropic"]
FAST = {"timeout": 2.0, "backoff_initial": 0.05, "backoff_max": 0.2}


def client_for(api: str, server: ScriptedLLMServer, **settings: object) -> LLMClient:
    url = server.anthropic_base_url if api == "anthropic" else server.openai_base_url
    return llm_config(f"{api}/test-model", base_url=url, **{**FAST, **settings}).build()


def conversation() -> list[Message]:
    return [Message.system("You are terse."), Message.user("Say hello.")]


@pytest.mark.parametrize("api", APIS)
def test_a_text_answer_with_its_usage(api: str, server: ScriptedLLMServer) -> None:
    server.push(Reply("hello there", input_tokens=11, output_tokens=7))
    with client_for(api, server, max_tokens=64, temperature=0.5) as client:
        answer = client.complete(conversation(), seed=3)
    assert answer.text == "hello there" and answer.tool_calls == []
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (11, 7)
    assert answer.finish_reason in ("stop", "end_turn") and answer.request_id and answer.attempts == 1
    assert answer.cost is None and answer.model == "test-model"
    sent = server.requests[0]
    assert sent.body["model"] == "test-model"
    if api == "anthropic":
        assert sent.api == "anthropic" and sent.path == "/v1/messages"
        assert sent.body["system"] == "You are terse."
        assert sent.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]
        assert sent.body["max_tokens"] == 64 and sent.body["temperature"] == 0.5 and "seed" not in sent.body
        assert "sk-test-anthropic" in json.dumps(sent.headers)
    else:
        assert sent.api == "openai" and sent.path == "/v1/chat/completions"
        assert sent.body["messages"] == [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello."},
        ]
        tokens = "max_completion_tokens" if api == "openai" else "max_tokens"
        assert sent.body[tokens] == 64 and sent.body["temperature"] == 0.5 and sent.body["seed"] == 3
        assert sent.headers["authorization"] == "Bearer sk-test-openai"


@pytest.mark.parametrize("api", APIS)
def test_native_tool_calls_and_their_results_in_each_wire_format(api: str, server: ScriptedLLMServer) -> None:
    server.push(
        Reply(
            text="Let me look.",
            tool_calls=(
                Reply.calling("read_file", {"path": "a.py"}).tool_calls[0],
                Reply.calling("run_tests").tool_calls[0],
            ),
        ),
        Reply("done"),
    )
    with client_for(api, server) as client:
        first = client.complete(conversation(), FUNCTION_TOOLS)
        assert first.text == "Let me look."
        assert [(c.name, c.parsed_arguments()) for c in first.tool_calls] == [
            ("read_file", {"path": "a.py"}),
            ("run_tests", {}),
        ]
        history = conversation() + [
            first.message(),
            Message.tool_result(first.tool_calls[0].id, "1  x = 1"),
            Message.tool_result(first.tool_calls[1].id, "Error: no code", is_error=True),
        ]
        assert client.complete(history, FUNCTION_TOOLS).text == "done"
    tools, messages = server.requests[1].body["tools"], server.requests[1].messages
    assert len(tools) == len(FUNCTION_TOOLS)
    ids = [c.id for c in first.tool_calls]
    if api == "anthropic":
        assert tools[0]["input_schema"] == FUNCTION_TOOLS[0].parameters
        assert [b["type"] for b in messages[1]["content"]] == ["text", "tool_use", "tool_use"]
        assert messages[1]["content"][1]["input"] == {"path": "a.py"}
        results = messages[2]["content"]
        assert [(b["type"], b["tool_use_id"]) for b in results] == [("tool_result", i) for i in ids]
        assert results[1]["is_error"] is True and len(messages) == 3
    else:
        assert tools[0]["function"]["parameters"] == FUNCTION_TOOLS[0].parameters
        calls = messages[2]["tool_calls"]
        assert [c["function"]["arguments"] for c in calls] == ['{"path": "a.py"}', "{}"]
        assert [(m["role"], m["tool_call_id"]) for m in messages[3:]] == [("tool", i) for i in ids]


@pytest.mark.parametrize("api", APIS)
def test_a_malformed_tool_call_is_returned_as_written_and_not_retried(api: str, server: ScriptedLLMServer) -> None:
    server.push(Reply.calling("write_code", '{"code": "def f(:'))
    with client_for(api, server) as client:
        answer = client.complete(conversation(), FUNCTION_TOOLS)
    call = answer.tool_calls[0]
    assert call.name == "write_code" and call.arguments == '{"code": "def f(:' and call.parsed_arguments() is None
    assert len(server.requests) == 1 and answer.attempts == 1


FAULTS = {
    "rate_limit": Fault.rate_limit(retry_after=0.4),
    "server_error": Fault.server_error(500),
    "overloaded": Fault.server_error(529),
    "hang": Fault.hang(10),
    "reset": Fault.reset(),
    "empty": Fault.empty(),
}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_fault_is_retried(api: str, fault: str, server: ScriptedLLMServer) -> None:
    server.push(FAULTS[fault], Reply("recovered"))
    ledger = Ledger()
    started = time.monotonic()
    with client_for(api, server, timeout=0.5) as client:
        answer = client.complete(conversation(), ledger=ledger)
    elapsed = time.monotonic() - started
    assert answer.text == "recovered" and answer.attempts == 2 and len(server.requests) == 2
    assert ledger.totals().retries == 1 and ledger.totals().failures == 0
    if fault == "rate_limit":
        assert elapsed >= 0.4, "the server's retry-after was not honoured"
    if fault == "hang":
        assert 0.5 <= elapsed < 5


@pytest.mark.parametrize("api", ["openai-compatible", "anthropic"])
def test_giving_up_raises_an_infrastructure_error(api: str, server: ScriptedLLMServer) -> None:
    server.push(*[Fault.server_error(503)] * 3)
    ledger = Ledger()
    with (
        client_for(api, server, max_retries=2) as client,
        pytest.raises(LLMError, match="gave up after 3 attempts") as caught,
    ):
        client.complete(conversation(), ledger=ledger)
    assert isinstance(caught.value, InfrastructureError) and caught.value.transient and caught.value.attempts == 3
    assert len(server.requests) == 3 and ledger.totals().failures == 1 and ledger.totals().calls == 0


def test_the_total_retry_time_is_bounded(server: ScriptedLLMServer) -> None:
    server.push(*[Fault.rate_limit(retry_after=0.3)] * 50)
    started = time.monotonic()
    with (
        client_for("openai-compatible", server, max_retries=100, max_total_retry_seconds=1.0) as client,
        pytest.raises(LLMError, match="gave up"),
    ):
        client.complete(conversation())
    assert time.monotonic() - started < 2.0
    assert 2 <= len(server.requests) <= 6


@pytest.mark.parametrize("api", ["openai-compatible", "anthropic"])
def test_permanent_errors_are_not_retried(api: str, server: ScriptedLLMServer) -> None:
    # nothing scripted: the server answers 400, a request the model cannot serve
    with client_for(api, server) as client, pytest.raises(LLMError, match="BadRequestError") as caught:
        client.complete(conversation())
    assert len(server.requests) == 1 and not caught.value.transient
    server.push(Fault.http_error(401), Fault.http_error(404))
    with client_for(api, server) as client:
        variable = "ANTHROPIC_API_KEY" if api == "anthropic" else "OPENAI_API_KEY"
        with pytest.raises(LLMError, match=f"AuthenticationError.*check the API key in {variable}"):
            client.complete(conversation())
        with pytest.raises(LLMError, match="NotFoundError"):
            client.complete(conversation())
    assert len(server.requests) == 3


@pytest.mark.parametrize("api", ["openai-compatible", "anthropic"])
def test_a_rerun_is_served_from_the_cache(api: str, server: ScriptedLLMServer, tmp_path: Path) -> None:
    server.push(Reply("first", input_tokens=100, output_tokens=10), Reply("other seed"))
    settings = {"cache_dir": tmp_path / "cache", "input_price": 1.0, "output_price": 2.0}
    with client_for(api, server, **settings) as client:
        paid = client.complete(conversation(), seed=1)
    with client_for(api, server, **settings) as client:
        again = client.complete(conversation(), seed=1)
        other = client.complete(conversation(), seed=2)
        totals = client.ledger.totals()
    assert paid.cost == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6) and not paid.cached
    assert again.text == "first" and again.cached and again.cost == 0.0 and again.usage.total_tokens == 0
    assert other.text == "other seed" and len(server.requests) == 2
    assert totals.calls == 2 and totals.cache_hits == 1


def test_accounting_per_ledger_and_the_exchange_log(server: ScriptedLLMServer, tmp_path: Path) -> None:
    server.push(
        Reply("a", input_tokens=10, output_tokens=1),
        Reply("b", input_tokens=20, output_tokens=2),
        Fault.server_error(),
        Reply("c", input_tokens=30, output_tokens=3),
    )
    log = tmp_path / "exchanges.jsonl"
    episode, build = Ledger(), Ledger(keep_exchanges=True)
    with client_for("openai-compatible", server, log_file=log, input_price=0.5, output_price=4.0) as client:
        client.complete(conversation(), ledger=episode)
        client.complete(conversation() + [Message("assistant", "a"), Message.user("more")], ledger=build)
        client.complete(conversation(), seed=9, ledger=build)
        lifetime = client.ledger.totals()
    assert episode.to_dict() == {
        "llm_calls": 1,
        "cache_hits": 0,
        "llm_failures": 0,
        "retries": 0,
        "input_tokens": 10,
        "output_tokens": 1,
        "cost_usd": pytest.approx(9e-6),
    }
    assert build.totals().usage.input_tokens == 50 and build.totals().retries == 1
    assert [e.response.text for e in build.exchanges] == ["b", "c"]
    assert lifetime.calls == 3 and lifetime.usage.output_tokens == 6
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["response"]["text"] for r in records] == ["a", "b", "c"]
    assert records[1]["request"]["messages"][-1]["content"] == "more" and records[2]["response"]["attempts"] == 2
    assert "sk-test" not in log.read_text()


def test_concurrency_is_limited_per_configuration(server: ScriptedLLMServer) -> None:
    lock, state = threading.Lock(), {"now": 0, "peak": 0}

    def slow(request: RecordedRequest) -> Reply:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.2)
        with lock:
            state["now"] -= 1
        return Reply("ok")

    server.responder = slow
    clients = [client_for("openai-compatible", server, concurrency=2) for _ in range(6)]
    threads = [threading.Thread(target=c.complete, args=(conversation(),)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    assert len(server.requests) == 6 and state["peak"] == 2


def test_missing_keys_and_base_urls_say_what_to_set(monkeypatch: pytest.MonkeyPatch, server: ScriptedLLMServer) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ConfigError, match="set the OPENAI_API_KEY environment variable"):
        llm_config("openai/gpt-4o-mini").build()
    with pytest.raises(ConfigError, match="set the ANTHROPIC_API_KEY environment variable"):
        llm_config("anthropic/claude-sonnet-4-5").build()
    with pytest.raises(ConfigError, match="MY_KEY"):
        llm_config("openai/gpt-4o-mini", api_key_env="MY_KEY").build()
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="--base-url http://localhost:8000/v1"):
        llm_config("openai-compatible/m").build()
    server.push(Reply("no key needed"))
    with client_for("openai-compatible", server) as client:
        assert client.complete(conversation()).text == "no key needed"
    assert server.requests[0].headers["authorization"] == "Bearer EMPTY"


def test_specs_and_settings_are_checked() -> None:
    config = llm_config("openai-compatible/Qwen/Qwen2.5-Coder-7B-Instruct", base_url="http://x/v1")
    assert config.model == "Qwen/Qwen2.5-Coder-7B-Instruct" and config.type == "openai-compatible"
    with pytest.raises(ConfigError, match="PROVIDER one of openai, anthropic, openai-compatible"):
        llm_config("gemini/pro")
    with pytest.raises(ConfigError, match="PROVIDER/MODEL"):
        llm_config("openai")
    with pytest.raises(ConfigError, match="'temprature'"):
        llm_config("openai/gpt-4o-mini", temprature=0.2)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_missing_sdk_names_the_extra_to_install() -> None:
    for sdk, spec in (("openai", "openai/gpt-4o-mini"), ("anthropic", "anthropic/claude-sonnet-4-5")):
        result = run_python(
            f"import sys, os; sys.modules[{sdk!r}] = None; os.environ['OPENAI_API_KEY'] = "
            f"os.environ['ANTHROPIC_API_KEY'] = 'k'\n"
            f"from gym_repost.llm import llm_config\n"
            f"try:\n    llm_config({spec!r}).build()\n"
            f"except ImportError as e:\n    print(type(e).__name__, e)"
        )
        assert "MissingExtraError" in result.stdout and f'pip install "gym-repost[{sdk}]"' in result.stdout, result


def test_importing_the_package_imports_no_sdk() -> None:
    result = run_python(
        "import sys, gym_repost, gym_repost.llm, gym_repost.policy.llm\n"
        "import gym_repost.llm.scripted_server\n"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    )
    assert result.stdout.strip() == "[]", result.stderr


def test_the_script_file_format(tmp_path: Path) -> None:
    lines = [
        '{"text": "hi"}',
        '{"tool_calls": [{"name": "submit"}]}',
        '{"fault": "rate_limit", "retry_after": 0.2}',
        "",
        '{"tool_calls": [{"name": "write_code", "arguments": "{\\"code\\": "}]}',
    ]
    items = read_script(lines)
    assert items[0] == Reply("hi") and items[1].tool_calls[0].name == "submit"
    assert items[2] == Fault("rate_limit", retry_after=0.2) and items[3].tool_calls[0].arguments == '{"code": '


def test_tool_call_arguments_parse_only_to_objects() -> None:
    assert ToolCall("1", "t", "").parsed_arguments() == {}
    assert ToolCall("1", "t", "[1]").parsed_arguments() is None
    assert ToolCall("1", "t", '{"a": 1}').parsed_arguments() == {"a": 1}
