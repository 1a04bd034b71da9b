"""OpenAI chat completions (and every server that speaks them) through the ``openai`` SDK.

Wire format: the system prompt is a ``system`` message; tool calls travel in the
assistant message's ``tool_calls`` with ``function.arguments`` as a JSON string; each
result is a ``tool`` message naming its ``tool_call_id``.
"""

from __future__ import annotations

from typing import Any

import openai

from gym_repost.llm.accounting import Usage
from gym_repost.llm.base import LLMClient, LLMRequest, LLMResponse, Message, ToolCall
from gym_repost.llm.config import LLMConfigBase
from gym_repost.llm.retry import sdk_retry_hint


def openai_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Neutral messages in OpenAI's format."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": m.content or None,
                    "tool_calls": [
                        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                        for c in m.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def openai_tools(tools: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """Neutral tool specs in OpenAI's ``tools=[...]`` format."""
    return [{"type": "function", "function": dict(t)} for t in tools]


def parse_openai(completion: Any) -> LLMResponse:
    """An SDK ``ChatCompletion`` as an :class:`LLMResponse` (no choices: an empty answer)."""
    usage = completion.usage
    tokens = Usage(getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0)
    if not completion.choices:
        return LLMResponse(text="", usage=tokens, request_id=completion.id, model=completion.model or "")
    choice = completion.choices[0]
    calls = [
        ToolCall(c.id, c.function.name, c.function.arguments or "")
        for c in choice.message.tool_calls or []
        if getattr(c, "function", None) is not None
    ]
    return LLMResponse(
        text=choice.message.content or "",
        tool_calls=calls,
        usage=tokens,
        finish_reason=choice.finish_reason,
        request_id=completion.id,
        model=completion.model or "",
    )


class OpenAIClient(LLMClient):
    """A chat-completions client.

    Args:
        config: the backend's configuration.
        sdk: an ``openai.OpenAI`` made with ``max_retries=0``.
        token_parameter: ``max_completion_tokens`` (OpenAI) or ``max_tokens`` (other servers).
    """

    def __init__(self, config: LLMConfigBase, sdk: openai.OpenAI, *, token_parameter: str) -> None:
        super().__init__(config)
        self.sdk = sdk
        self.token_parameter = token_parameter

    def _send(self, request: LLMRequest) -> LLMResponse:
        params: dict[str, Any] = {
            "model": self.config.model,
            "messages": openai_messages(request.messages),
            self.token_parameter: request.max_tokens,
        }
        if request.tools:
            params["tools"] = openai_tools(request.tools)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.seed is not None:
            params["seed"] = request.seed
        return parse_openai(self.sdk.chat.completions.create(**params))

    def _retry_hint(self, exc: BaseException) -> float | None:
        return sdk_retry_hint(exc, openai.APIStatusError, openai.APIConnectionError)

    def close(self) -> None:
        """Close the SDK's HTTP client."""
        self.sdk.close()
