"""LLM policies: a model solves function tasks, agentically or by RepoST's protocol.

``gym-repost eval TASKS --policy llm:PROVIDER/MODEL [--base-url URL] [--repairs R]``,
PROVIDER being ``openai``, ``anthropic`` or ``openai-compatible``. Options come as
``--policy-arg KEY=VALUE``: ``mode``, ``docstring``, ``tool_calling``,
``docstring_model`` (below) and any LLM setting of
:class:`~gym_repost.llm.config.LLMConfigBase` (``temperature``, ``max_tokens``,
``cache_dir``, ``timeout``, ``max_retries``, ``concurrency``, ``input_price``...).

Modes:

* ``generate-and-repair`` (default), RepoST's benchmark protocol: one prompt with the
  dependency-only context ending in the target's header; the code block of the answer
  is written and submitted; on failure the test report (failing assertion, error and
  stack trace) goes back to the model, for as many repairs as the run allows
  (``--repairs R``), which gives RepoST's self-repair table. ``docstring`` chooses the
  header's docstring: ``original``, ``removed``, or ``generated`` by a model shown the
  ground truth without its docstring (``docstring_model``, by default the same model).
  That is the one use of the ground truth: with ``docstring=generated`` the policy is a
  privileged control (:class:`~gym_repost.policy.base.PrivilegedPolicy`) handed it by the
  runner, and only the docstring writer's prompt shows it. Every prompt of the solving
  model is built from the :class:`~gym_repost.task_view.TaskView`.
* ``agentic``: the model acts through the environment's tools (``list_files``,
  ``read_file``, ``search``, ``write_code``, ``run_tests``, ``submit``), by native tool
  calling (``tool_calling=native``) or by writing each call as JSON (``text``).

The model's mistakes are observations, and the trajectory shows them: a malformed tool
call goes to the environment as written and its error comes back as the tool's result;
a reply without a tool call becomes an action the environment rejects, followed by a
reminder to call a tool. In generate-and-repair, an answer without usable code (no code
block, code that does not parse or does not define the function) is written as it is
(the error shows in the trajectory), then a stand-in that raises ``NotImplementedError``
is written and submitted: the answer uses up its submission like any failing one, so
submission k is always the model's answer k, and the model is told what was wrong.

A failing endpoint is not the model's mistake: :class:`~gym_repost.errors.LLMError`
propagates and the runner records an infrastructure error, never a failed task.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from gym_repost.errors import ConfigError
from gym_repost.harness import extract_code_block
from gym_repost.harness.function_report import TestReport
from gym_repost.llm import Ledger, LLMClient, LLMConfigBase, LLMResponse, Message, ToolCall, llm_config
from gym_repost.policy.base import Action, PrivilegedPolicy, tool_call
from gym_repost.policy.generation import (
    DOCSTRING_OPTIONS,
    clean_docstring,
    docstring_for,
    generation_prompt,
    source_without_docstring,
)
from gym_repost.prompting import render_prompt
from gym_repost.task_view import TargetView, TaskView
from gym_repost.tools import FUNCTION_TOOLS, ToolSpec

MODES = ("generate-and-repair", "agentic")
TOOL_CALLING = ("native", "text")
_PROMPTS = "gym_repost.policy"

Ask = Callable[[Sequence[Message], Sequence[ToolSpec] | None], LLMResponse]


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"llm policy: {name}={value!r}; choose one of {', '.join(allowed)}")
    return str(value)


def unusable_candidate(target: TargetView, reason: str) -> str:
    """A stand-in for an answer without usable code: the target's header raising ``reason``."""
    lines = [f"@{d}" for d in target.decorators] + [target.signature]
    return "\n".join(lines + [f"    raise NotImplementedError({('no usable code: ' + reason)[:300]!r})"]) + "\n"


def text_action(text: str) -> str:
    """The JSON tool call a text-mode reply holds: a fenced block, or the reply itself."""
    candidates = [extract_code_block(text), text.strip()]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        if candidate is None:
            continue
        try:
            if isinstance(json.loads(candidate), dict):
                return candidate.strip()
        except json.JSONDecodeError:
            continue
    return text


def _reply_facts(response: LLMResponse, seconds: float) -> dict[str, Any]:
    """What a transcript says of a model reply besides its text: tokens, seconds, a cache hit."""
    facts: dict[str, Any] = {
        "tokens_in": response.usage.input_tokens,
        "tokens_out": response.usage.output_tokens,
        "seconds": round(seconds, 3),
    }
    if response.cached:
        facts["cached"] = True
    return facts


class RepairLoop:
    """RepoST's generate-and-repair conversation, one model answer per submission."""

    def __init__(self, ask: Ask, view: TaskView, docstring: str | None, counts: Counter[str]) -> None:
        assert view.target is not None
        self.ask, self.target, self.counts = ask, view.target, counts
        self.messages = [
            Message.system(render_prompt(_PROMPTS, "generate_system.j2")),
            Message.user(generation_prompt(view, docstring)),
        ]
        self.state = "answer"
        self.no_code_block = False
        self.invalid_reason: str | None = None

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        """``write_code(answer)``, then ``submit``; after a failure, the next answer."""
        if self.state == "written" and not info.get("ok", True):
            return self._write_stand_in(observation)
        if self.state in ("written", "stand-in"):
            self.state = "submitted"
            return tool_call("submit")
        if self.state == "submitted":
            self.messages.append(Message.user(self._feedback(observation, info)))
        return self._answer()

    def _answer(self) -> Action:
        response = self.ask(self.messages, None)
        self.messages.append(response.message())
        self.counts["model_answers"] += 1
        code = extract_code_block(response.text)
        self.no_code_block = code is None
        self.invalid_reason = None
        self.state = "written"
        return tool_call("write_code", code=response.text if code is None else code)

    def _write_stand_in(self, observation: str) -> Action:
        self.counts["invalid_answers"] += 1
        self.invalid_reason = (
            "your answer contains no ```python code block"
            if self.no_code_block
            else observation.removeprefix("Error: ")
        )
        self.state = "stand-in"
        return tool_call("write_code", code=unusable_candidate(self.target, self.invalid_reason))

    def _feedback(self, observation: str, info: dict[str, Any]) -> str:
        if self.invalid_reason is not None:
            return render_prompt(_PROMPTS, "invalid_answer.j2", reason=self.invalid_reason, target=self.target)
        report = info.get("test_report")
        text = TestReport.model_validate(report).to_text() if report else observation
        left = int(info.get("max_submissions", 1)) - int(info.get("submissions", 0))
        return render_prompt(_PROMPTS, "repair.j2", report=text, left=left, target=self.target)


class AgenticLoop:
    """The model calls tools until the environment ends the episode.

    Generic over the tool set, so any tool-driven environment (the construction agent's
    too) can run a model with it.

    Args:
        ask: sends the conversation (and, for native tool calling, the tools) to the model.
        system: the system prompt.
        statement: the first observation (the task).
        tools: the tools the model may call.
        native: native tool calling; else the model writes each call as JSON text.
        counts: where the model's mistakes are counted.
    """

    def __init__(
        self, ask: Ask, system: str, statement: str, tools: Sequence[ToolSpec], native: bool, counts: Counter[str]
    ) -> None:
        self.ask, self.tools, self.native, self.counts = ask, tuple(tools), native, counts
        self.messages = [Message.system(system), Message.user(statement)]
        self.queue: list[ToolCall | str] = []
        self.last: ToolCall | str | None = None

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        """The next tool call: one the model already made, or ask it for more."""
        if self.last is not None:
            self.messages.append(self._result(self.last, observation, info))
        if not self.queue:
            self.queue = self._next_calls()
        self.last = self.queue.pop(0)
        return self._action(self.last)

    def _next_calls(self) -> list[ToolCall | str]:
        response = self.ask(self.messages, self.tools if self.native else None)
        self.messages.append(response.message())
        self.counts["model_answers"] += 1
        if not self.native:
            return [text_action(response.text)]
        if not response.tool_calls:
            self.counts["replies_without_tool_call"] += 1
            return [response.text]
        return list(response.tool_calls)

    def _action(self, item: ToolCall | str) -> Action:
        if isinstance(item, str):
            return item  # the environment parses it, or reports the mistake
        args = item.parsed_arguments()
        if args is None:
            self.counts["malformed_tool_calls"] += 1
            return {"tool": item.name, "args": item.arguments}
        return {"tool": item.name, "args": args}

    def _result(self, item: ToolCall | str, observation: str, info: dict[str, Any]) -> Message:
        if isinstance(item, ToolCall):
            return Message.tool_result(item.id, observation, is_error=not info.get("ok", True))
        if self.native:
            names = [spec.name for spec in self.tools]
            return Message.user(render_prompt(_PROMPTS, "no_tool_call.j2", tools=names))
        return Message.user(observation)


class LLMPolicy(PrivilegedPolicy):
    """A model behind an LLM API acting in a function task (see the module docstring).

    Args:
        model: ``PROVIDER/MODEL``, e.g. ``openai/gpt-4o-mini``.
        mode: ``generate-and-repair`` or ``agentic``.
        docstring: generate-and-repair only: ``original``, ``removed`` or ``generated``.
        tool_calling: agentic only: ``native`` (the API's tool calling) or ``text``.
        docstring_model: ``PROVIDER/MODEL`` writing generated docstrings (default: ``model``).
        client: an LLM client to use instead of building one from ``model`` and ``settings``
            (it is not closed by the policy).
        **settings: LLM settings (``base_url``, ``temperature``, ``cache_dir``...).

    Raises:
        ConfigError: an unknown option or setting.
    """

    name = "llm"

    def __init__(
        self,
        model: str,
        *,
        mode: str = "generate-and-repair",
        docstring: str = "original",
        tool_calling: str = "native",
        docstring_model: str | None = None,
        client: LLMClient | None = None,
        **settings: Any,
    ) -> None:
        self.mode = _choice("mode", mode, MODES)
        self.docstring = _choice("docstring", docstring, DOCSTRING_OPTIONS)
        self.tool_calling = _choice("tool_calling", tool_calling, TOOL_CALLING)
        if self.mode == "agentic" and self.docstring != "original":
            raise ConfigError(
                "llm policy: the docstring option applies to mode=generate-and-repair; in agentic "
                "mode the model reads the repository, docstrings included"
            )
        self.model = model
        self.config: LLMConfigBase = client.config if client is not None else llm_config(model, **settings)
        self.docstring_config = self._docstring_config(docstring_model, settings)
        self._client, self._owns_client = client, client is None
        self._docstring_client: LLMClient | None = None
        self.ledger = Ledger()
        self.counts: Counter[str] = Counter()
        self.generated_docstring: str | None = None
        self._loop: RepairLoop | AgenticLoop | None = None
        self._replies: list[dict[str, Any]] = []

    def _docstring_config(self, spec: str | None, settings: dict[str, Any]) -> LLMConfigBase | None:
        if spec is None or self.docstring != "generated":
            return None
        if spec.partition("/")[0] != self.config.type:
            settings = {k: v for k, v in settings.items() if k not in ("base_url", "api_key_env")}
        return llm_config(spec, **settings)

    def check(self) -> None:
        """Fail now on what would fail every episode: a missing SDK, key or base URL.

        Raises:
            MissingExtraError: the SDK is not installed.
            ConfigError: the key or base URL is missing.
        """
        for config in (self.config, self.docstring_config):
            if config is not None and (config is not self.config or self._client is None):
                config.build().close()

    @property
    def needs_ground_truth(self) -> bool:
        """Only to write a docstring from the original (``docstring=generated``)."""
        return self.docstring == "generated"

    def reset(
        self, task: TaskView, observation: str, info: dict[str, Any], *, seed: int, ground_truth: str | None = None
    ) -> None:
        """Start a conversation for the task (writing its docstring first if asked to).

        ``ground_truth`` is given by the runner with ``docstring=generated`` only, and goes
        to the docstring writer alone.
        """
        if self._client is None:
            self._client = self.config.build()
        self.ledger, self.counts, self.generated_docstring = Ledger(), Counter(), None
        self._loop, self._replies = None, []

        def ask(messages: Sequence[Message], tools: Sequence[ToolSpec] | None) -> LLMResponse:
            assert self._client is not None
            started = time.monotonic()
            response = self._client.complete(messages, tools, seed=seed, ledger=self.ledger)
            self._replies.append(_reply_facts(response, time.monotonic() - started))
            return response

        if task.kind != "function" or task.target is None:
            raise ConfigError(f"the llm policy acts in function tasks, not {task.kind} tasks")
        if self.mode == "agentic":
            native = self.tool_calling == "native"
            system = render_prompt(_PROMPTS, "agentic_system.j2", tools=FUNCTION_TOOLS, native=native)
            self._loop = AgenticLoop(ask, system, observation, FUNCTION_TOOLS, native, self.counts)
            return
        if self.docstring == "generated":
            if ground_truth is None:
                raise ConfigError("llm policy: docstring=generated needs the ground truth from the runner")
            self.generated_docstring = self._generate_docstring(task.target, ground_truth)
        self._loop = RepairLoop(ask, task, docstring_for(task, self.docstring, self.generated_docstring), self.counts)

    def _generate_docstring(self, target: TargetView, ground_truth: str) -> str:
        if self.docstring_config is not None and self._docstring_client is None:
            self._docstring_client = self.docstring_config.build()
        client = self._docstring_client or self._client
        assert client is not None
        prompt = render_prompt(
            _PROMPTS, "docstring.j2", target=target, source=source_without_docstring(ground_truth, target.name)
        )
        # one docstring per task, whatever the sample: fixed seed, greedy
        answer = client.complete([Message.user(prompt)], temperature=0.0, seed=0, ledger=self.ledger)
        return clean_docstring(answer.text)

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        """The next tool call."""
        if self._loop is None:
            raise RuntimeError("act() before reset()")
        return self._loop.act(observation, info)

    def transcript(self) -> list[dict[str, Any]]:
        """The episode's conversation so far, oldest first: the prompts, each model reply
        (text and tool calls) with its tokens and seconds, the tool results and reminders
        (what the runner records, see :mod:`gym_repost.policy.base`). The docstring
        writer's exchange is not part of it (``stats()`` holds the docstring)."""
        if self._loop is None:
            return []
        replies = iter(self._replies)
        out = []
        for message in self._loop.messages:
            record = message.to_dict()
            if message.role == "assistant":
                record.update(next(replies, {}))
            out.append(record)
        return out

    def stats(self) -> dict[str, Any]:
        """Tokens, cost, calls, cache hits and the model's mistakes in this episode."""
        stats: dict[str, Any] = {"mode": self.mode, "model": self.model, **self.ledger.to_dict(), **self.counts}
        if self.generated_docstring is not None:
            stats["generated_docstring"] = self.generated_docstring
        return stats

    def close(self) -> None:
        """Close the clients this policy built."""
        for client in (self._client if self._owns_client else None, self._docstring_client):
            if client is not None:
                client.close()
        if self._owns_client:
            self._client = None
        self._docstring_client = None
