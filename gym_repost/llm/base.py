"""The LLM client seam: one small interface in front of every chat API.

A client answers :meth:`LLMClient.complete`: a list of neutral :class:`Message` objects
(and, for native tool calling, the tools as :class:`~gym_repost.tools.ToolSpec`) in, an
:class:`LLMResponse` out. Everything around the call is done here, once, for every
backend: the on-disk response cache, retries of transient failures (rate limits, 5xx,
timeouts, dropped connections, empty answers) with exponential backoff and a bounded
total, a concurrency limit per configuration, token and cost accounting into
:class:`~gym_repost.llm.accounting.Ledger` objects, and an optional JSONL log of every
exchange. A backend implements only :meth:`LLMClient._send` (one attempt through its SDK)
and :meth:`LLMClient._retry_hint` (is this SDK error transient, and how long to wait).

Failures the retries cannot fix raise :class:`~gym_repost.errors.LLMError`, an
infrastructure error: the runner records the episode as such, never as a failed task.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gym_repost.errors import LLMError
from gym_repost.llm.accounting import Exchange, Ledger, Usage

if TYPE_CHECKING:
    from gym_repost.llm.cache import ResponseCache
    from gym_repost.llm.config import LLMConfigBase
    from gym_repost.tools import ToolSpec

logger = logging.getLogger(__name__)

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model wrote it; ``arguments`` is its raw JSON text."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as an object, or None when they are not a JSON object."""
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class Message:
    """One turn of a conversation, in a format neutral to the providers.

    ``tool`` messages answer the assistant's tool call ``tool_call_id``; ``is_error``
    marks a tool result that reports a mistake.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False

    @classmethod
    def system(cls, text: str) -> Message:
        """A system prompt."""
        return cls("system", text)

    @classmethod
    def user(cls, text: str) -> Message:
        """A user turn."""
        return cls("user", text)

    @classmethod
    def tool_result(cls, call_id: str, text: str, *, is_error: bool = False) -> Message:
        """The result of the assistant's tool call ``call_id``."""
        return cls("tool", text, tool_call_id=call_id, is_error=is_error)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form with the fields that are set (as an episode's transcript keeps it)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [asdict(call) for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.is_error:
            out["is_error"] = True
        return out


@dataclass(frozen=True)
class LLMRequest:
    """Everything that decides an answer; its :meth:`key` addresses the cache."""

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    """The tools as neutral specs: ``{"name", "description", "parameters"}``."""
    temperature: float | None = None
    max_tokens: int = 4096
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (for the cache key and the exchange log)."""
        return asdict(self)

    def key(self, backend: dict[str, Any]) -> str:
        """SHA-256 of the canonical request plus the backend's identity."""
        payload = json.dumps(
            {"backend": backend, "request": self.to_dict()}, sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass
class LLMResponse:
    """A model's answer.

    Attributes:
        text: the answer's text ('' when it only called tools).
        tool_calls: native tool calls, in order.
        usage: tokens billed for this call (zero on a cache hit).
        cost: USD for this call when prices are configured, else None.
        finish_reason: the provider's stop reason (``stop``, ``length``, ``tool_calls``...).
        request_id: the provider's id of the response.
        model: the model that answered.
        cached: served from the on-disk cache.
        attempts: HTTP attempts made (1 without retries, 0 on a cache hit).
    """

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    finish_reason: str | None = None
    request_id: str | None = None
    model: str = ""
    cached: bool = False
    attempts: int = 1

    @property
    def empty(self) -> bool:
        """No text and no tool call: treated as a transient failure and retried."""
        return not self.text.strip() and not self.tool_calls

    def message(self) -> Message:
        """The answer as the assistant turn to append to the conversation."""
        return Message("assistant", self.text, tool_calls=tuple(self.tool_calls))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (the cache stores it)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LLMResponse:
        """Inverse of :meth:`to_dict`."""
        calls = [ToolCall(**c) for c in data.get("tool_calls", [])]
        return cls(**{**data, "tool_calls": calls, "usage": Usage(**data.get("usage", {}))})


class EmptyResponseError(Exception):
    """The provider answered with neither text nor a tool call (retried)."""


def tool_dicts(tools: Sequence[ToolSpec] | None) -> tuple[dict[str, Any], ...]:
    """Tool specs in the neutral form :class:`LLMRequest` carries."""
    return tuple({"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools or ())


class LLMClient(ABC):
    """A chat model behind an API. Use as a context manager or call :meth:`close`.

    Args:
        config: the backend's configuration.

    Attributes:
        ledger: totals over the client's lifetime.
    """

    def __init__(self, config: LLMConfigBase) -> None:
        from gym_repost.llm.cache import ResponseCache
        from gym_repost.llm.retry import concurrency_slots

        self.config = config
        self.ledger = Ledger()
        self._cache: ResponseCache | None = ResponseCache(config.cache_dir) if config.cache_dir else None
        self._slots = concurrency_slots(config)

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        ledger: Ledger | None = None,
    ) -> LLMResponse:
        """Ask the model for the next turn of ``messages``.

        Args:
            messages: the conversation so far (system prompt included).
            tools: tools for native tool calling; None or empty for a plain-text answer.
            temperature: sampling temperature (the config's when None; not sent when
                both are None, so the provider's default applies).
            max_tokens: most tokens to generate (the config's when None).
            seed: sampling seed, sent where the API takes one; always part of the
                cache key, so n samples of one prompt are n different requests.
            ledger: also record this call here (an episode's or a build's ledger).

        Raises:
            LLMError: the call failed and retries did not help (an infrastructure error).
        """
        request = LLMRequest(
            messages=tuple(messages),
            tools=tool_dicts(tools),
            temperature=self.config.temperature if temperature is None else temperature,
            max_tokens=max_tokens or self.config.max_tokens,
            seed=seed,
        )
        started = time.monotonic()
        response, error = None, None
        try:
            response = self._cached(request) or self._fetch(request)
        except LLMError as exc:
            error = exc
            raise
        finally:
            self._record(
                Exchange(
                    request=request,
                    response=response,
                    error=None if error is None else str(error),
                    seconds=time.monotonic() - started,
                ),
                ledger,
            )
        return response

    def _cached(self, request: LLMRequest) -> LLMResponse | None:
        if self._cache is None:
            return None
        hit = self._cache.get(request.key(self.config.identity()))
        if hit is None:
            return None
        return LLMResponse.from_dict(
            {**hit, "usage": {}, "cost": 0.0 if self.config.priced else None, "cached": True, "attempts": 0}
        )

    def _fetch(self, request: LLMRequest) -> LLMResponse:
        from gym_repost.llm.retry import call_with_retries

        def attempt() -> LLMResponse:
            with self._slots:
                response = self._send(request)
            if response.empty:
                raise EmptyResponseError(f"{self.config.model} answered with no text and no tool call")
            return response

        try:
            response, attempts = call_with_retries(attempt, self.config, self._hint, self.describe())
        except LLMError as exc:
            if getattr(exc.__cause__, "status_code", None) in (401, 403):
                raise LLMError(
                    f"{exc} (check the API key in {self.config.api_key_env})", attempts=exc.attempts
                ) from exc.__cause__
            raise
        response.attempts = attempts
        response.cost = self.config.cost(response.usage)
        if self._cache is not None:
            self._cache.put(request.key(self.config.identity()), response.to_dict())
        return response

    def _hint(self, exc: BaseException) -> float | None:
        if isinstance(exc, EmptyResponseError):
            return 0.0
        return self._retry_hint(exc)

    def _record(self, exchange: Exchange, ledger: Ledger | None) -> None:
        self.ledger.record(exchange)
        if ledger is not None:
            ledger.record(exchange)
        if self.config.log_file is not None:
            from gym_repost.llm.accounting import append_exchange

            append_exchange(self.config.log_file, exchange, self.describe())

    def describe(self) -> str:
        """``type/model`` (and the base URL when one is set), for messages and logs."""
        where = f" at {self.config.base_url}" if self.config.base_url else ""
        return f"{self.config.type}/{self.config.model}{where}"

    @abstractmethod
    def _send(self, request: LLMRequest) -> LLMResponse:
        """One attempt through the SDK; raise the SDK's exception on failure."""

    @abstractmethod
    def _retry_hint(self, exc: BaseException) -> float | None:
        """None when ``exc`` is not transient; else seconds the server asked to wait
        (``retry-after``), or 0.0 to use exponential backoff."""

    @abstractmethod
    def close(self) -> None:
        """Release the SDK's connections."""

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
