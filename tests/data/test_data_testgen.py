"""The Repo-Smith test-generation loop: scripted replies offline, and an LLM behind a scripted server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from testfile_tasks import GROUND_TRUTH, tiny_testfile_task  # noqa: F401 - a fixture

from gym_repost.data.records import write_jsonl
from gym_repost.data.repo_smith import (
    LLMGenerator,
    ScriptedGenerator,
    TextGenerator,
    load_generator,
    parse_reply,
    read_replies,
    synthesize_tests,
)
from gym_repost.errors import ConfigError
from gym_repost.llm.base import Message
from gym_repost.sandbox import Sandbox
from gym_repost.task import TestFileTask

BROKEN = "from tinypkg.missing import clamp\n\n\ndef test_clamp():\n    assert clamp(5) == 5\n"
WEAK = "from tinypkg.core import clamp\n\n\ndef test_clamp():\n    assert clamp(5) == 5\n"


def reply(reasoning: str, code: str | None) -> str:
    block = f"\n\n```python\n{code}```\n" if code is not None else ""
    return f"<reasoning>\n{reasoning}\n</reasoning>{block}"


def test_parse_reply() -> None:
    assert parse_reply(reply("Why.", WEAK)) == parse_reply("<reasoning>Why.</reasoning>\n```python\n" + WEAK + "```")
    parsed = parse_reply("I test clamp.\n```python\nx = 1\n```")
    assert (parsed.reasoning, parsed.code) == ("I test clamp.", "x = 1\n")
    assert parse_reply("<reasoning>only words").code is None


def test_the_loop_repairs_the_weakest_metric_then_compresses(
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
    tmp_path: Path,
    load_jsonl: Any,
) -> None:
    generator = ScriptedGenerator(
        [
            reply("clamp bounds its input.", BROKEN),
            reply("The module is tinypkg.core.", WEAK),
            reply("Make it better.", "def test_x(:\n"),
            reply("Cover fib, check and total with exact values.", GROUND_TRUTH),
            "<reasoning>clamp, fib, check and total are tested with exact values and the TooBig error.</reasoning>",
        ]
    )
    result = synthesize_tests(tiny_testfile_task, generator, sandbox, max_rounds=4, seed=7)
    kinds = [(r.kind, r.accepted) for r in result.rounds]
    # Execution error first, then coverage (the weak file passes); a worse file is rejected
    # and the same metric asked again; nothing is left to repair after the fourth reply.
    assert kinds == [
        ("generate", True),
        ("repair:execution", True),
        ("repair:coverage", False),
        ("repair:coverage", True),
    ]
    assert result.final.code == GROUND_TRUTH and result.final.report.passed
    assert result.reasoning.startswith("clamp, fib, check and total")

    asks = [call[-1].content for call in generator.calls]
    assert "tinypkg/core.py" in asks[0] and "def total(values):" in asks[0]
    assert "No module named 'tinypkg.missing'" in asks[1]
    assert "Lines of tinypkg/core.py no passing test runs" in asks[2] and "21-24" in asks[2]
    assert "Note 3:" in asks[4] and "Make it better." not in asks[4] and "Do not mention" in asks[4]
    assert all(call[0].role == "system" for call in generator.calls)

    record = result.record()
    assert record["test_file"] == GROUND_TRUTH and record["reward"] == pytest.approx(1.0)
    assert record["focal_file"] == "tinypkg/core.py" and not record["reasoning_mentions_repair"]
    assert [r["kind"] for r in record["rounds"]] == [k for k, _ in kinds]
    assert record["rounds"][0]["metrics"]["execution_rate"] == 0.0
    assert record["messages"][-1]["role"] == "assistant" and "```python" in record["completion"]
    out = tmp_path / "testgen.jsonl"
    write_jsonl([record, record], out)
    rows = load_jsonl(out)
    assert rows.num_rows == 2 and rows[0]["rounds"][3]["accepted"] is True


def test_mutation_repairs_show_the_surviving_mutants(
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
) -> None:
    no_boundaries = GROUND_TRUTH.replace("    assert clamp(11) == 10\n", "")
    generator = ScriptedGenerator([reply("Test each function.", no_boundaries), reply("Same.", no_boundaries)])
    result = synthesize_tests(tiny_testfile_task, generator, sandbox, max_rounds=1)
    assert [r.kind for r in result.rounds] == ["generate", "repair:coverage"]
    assert "14->15" in generator.calls[1][-1].content
    # No accepted repair changed the file's reasoning: nothing to compress, no extra call.
    assert len(generator.calls) == 2 and result.reasoning == "Test each function."


def test_a_scripted_generator_runs_out(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no reply left"):
        ScriptedGenerator([]).generate([Message.user("hi")], seed=0)
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"text": "a"}) + "\n\n" + json.dumps({"text": "b"}) + "\n")
    assert read_replies(script) == ["a", "b"]
    assert isinstance(load_generator(f"scripted:{script}"), TextGenerator)
    script.write_text('{"reply": 1}\n')
    with pytest.raises(ConfigError, match="expected"):
        read_replies(script)
    with pytest.raises(ConfigError, match="unknown generator"):
        load_generator("gpt")


def test_an_llm_generator_through_the_openai_wire_format(
    tiny_testfile_task: TestFileTask,  # noqa: F811
    sandbox: Sandbox,
    tmp_path: Path,
) -> None:
    pytest.importorskip("openai", reason='pip install "gym-repost[openai]"')
    from gym_repost.llm.scripted_server import Reply, ScriptedLLMServer

    with ScriptedLLMServer([Reply(reply("Exact values for every function.", GROUND_TRUTH))]) as server:
        generator = load_generator(
            "llm:openai-compatible/scripted-model",
            base_url=server.openai_base_url,
            cache_dir=tmp_path / "cache",
            temperature=0.2,
        )
        assert isinstance(generator, LLMGenerator)
        result = synthesize_tests(tiny_testfile_task, generator, sandbox, max_rounds=2, seed=3)
        generator.close()
        request = server.requests[0]
    assert [r.kind for r in result.rounds] == ["generate"] and result.final.report.passed
    body = request.body
    assert body["model"] == "scripted-model" and body["messages"][0]["role"] == "system"
    assert "tinypkg/core.py" in body["messages"][1]["content"] and body["temperature"] == 0.2
