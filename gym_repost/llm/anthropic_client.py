"""Anthropic's messages API through the ``anthropic`` SDK.

Wire format: the system prompt is a separate ``system`` parameter; content is a list
of blocks; tool calls are ``tool_use`` blocks of the assistant and their results are
``tool_result`` blocks of the next user turn (consecutive results share one turn).
Sampling temperature goes in the request body when one is set; the API has no seed.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic

from gym_repost.llm.accounting import Usage
from gym_repost.llm.base import LLMClient, LLMRequest, LLMResponse, Message, ToolCall
from gym_repost.llm.config import LLMConfigBase
from gym_repost.llm.retry import sdk_retry_hint


def _blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": m.tool_call_id,
            "content": m.content or "(no output)",
        }
        return [{**block, "is_error": True} if m.is_error else block]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content.strip() else []
    for call in m.tool_calls:
        # a malformed call is replayed with the arguments it parsed to, or none
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.parsed_arguments() or {}})
    return blocks or [{"type": "text", "text": "(empty)"}]


def anthropic_messages(messages: tuple[Message, ...]) -> tuple[str, list[dict[str, Any]]]:
    """Neutral messages as Anthropic's ``(system, messages)``; same-side turns are merged."""
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        role = "assistant" if m.role == "assistant" else "user"
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(_blocks(m))
        else:
            out.append({"role": role, "content": _blocks(m)})
    return system, out


def anthropic_tools(tools: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """Neutral tool specs in Anthropic's format."""
    return [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in tools]


def parse_anthropic(message: Any) -> LLMResponse:
    """An SDK ``Message`` as an :class:`LLMResponse`."""
    texts, calls = [], []
    for block in message.content or []:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            raw = block.input
            arguments = json.dumps(raw) if isinstance(raw, dict) else str(raw)
            calls.append(ToolCall(block.id, block.name, arguments))
    u = message.usage
    tokens = Usage(
        (u.input_tokens or 0)
        + (getattr(u, "cache_read_input_tokens", 0) or 0)
        + (getattr(u, "cache_creation_input_tokens", 0) or 0),
        u.output_tokens or 0,
    )
    return LLMResponse(
        text="".join(texts),
        tool_calls=calls,
        usage=tokens,
        finish_reason=message.stop_reason,
        request_id=message.id,
        model=message.model or "",
    )


class AnthropicClient(LLMClient):
    """A messages-API client.

    Args:
        config: the backend's configuration.
        sdk: an ``anthropic.Anthropic`` made with ``max_retries=0``.
    """

    def __init__(self, config: LLMConfigBase, sdk: anthropic.Anthropic) -> None:
        super().__init__(config)
        self.sdk = sdk

    def _send(self, request: LLMRequest) -> LLMResponse:
        system, messages = anthropic_messages(request.messages)
        params: dict[str, Any] = {"model": self.config.model, "messages": messages, "max_tokens": request.max_tokens}
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = anthropic_tools(request.tools)
        if request.temperature is not None:
            params["extra_body"] = {"temperature": request.temperature}
        return parse_anthropic(self.sdk.messages.create(**params))

    def _retry_hint(self, exc: BaseException) -> float | None:
        return sdk_retry_hint(exc, anthropic.APIStatusError, anthropic.APIConnectionError)

    def close(self) -> None:
        """Close the SDK's HTTP client."""
        self.sdk.close()
