"""One pydantic configuration per LLM backend; ``build()`` imports the SDK and makes the client.

>>> config = llm_config("openai-compatible/Qwen2.5-Coder-7B-Instruct", base_url="http://localhost:8000/v1")
>>> with config.build() as client:
...     client.complete([Message.user("Say hi")])

Keys come from environment variables (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``; another
one with ``api_key_env``), never from the configuration, so configurations can be
written to run records safely.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from gym_repost.errors import ConfigError, MissingExtraError
from gym_repost.llm.accounting import Usage, price_of

if TYPE_CHECKING:
    from gym_repost.llm.base import LLMClient


class LLMConfigBase(BaseModel):
    """Settings every backend shares."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    model: str = Field(min_length=1)
    """The model's name as the API knows it (``gpt-4o-mini``, ``claude-sonnet-4-5``...)."""
    base_url: str | None = None
    """Another endpoint: a proxy, a local server (``http://localhost:8000/v1`` for vLLM)."""
    api_key_env: str
    """Environment variable holding the API key."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds one HTTP attempt may take."""
    max_retries: int = Field(default=6, ge=0)
    """Retries of transient failures after the first attempt."""
    max_total_retry_seconds: float = Field(default=600.0, gt=0)
    """No new attempt starts this long after the first one."""
    backoff_initial: float = Field(default=1.0, ge=0)
    """Scale of the exponential backoff (seconds)."""
    backoff_max: float = Field(default=60.0, ge=0)
    """Longest single backoff (seconds); a server's ``retry-after`` is honoured as sent."""
    concurrency: int = Field(default=8, ge=1)
    """Requests in flight at once to this endpoint and model, across the process."""
    cache_dir: Path | None = None
    """Directory of the on-disk response cache; None: no cache."""
    log_file: Path | None = None
    """Append every exchange (request, response or error, usage) to this JSONL file."""
    temperature: float | None = Field(default=None, ge=0)
    """Default sampling temperature; None: the provider's default (not sent)."""
    max_tokens: int = Field(default=4096, ge=1)
    """Default limit on generated tokens."""
    input_price: float | None = Field(default=None, ge=0)
    """USD per million input tokens; with ``output_price``, costs are computed."""
    output_price: float | None = Field(default=None, ge=0)
    """USD per million output tokens."""

    def identity(self) -> dict[str, Any]:
        """What, besides the request, decides an answer (part of the cache key)."""
        return {"type": self.type, "model": self.model, "base_url": self.base_url}

    @property
    def priced(self) -> bool:
        """Both prices are known."""
        return self.input_price is not None and self.output_price is not None

    def cost(self, usage: Usage) -> float | None:
        """USD for ``usage``, or None when prices are not configured."""
        return price_of(usage, self.input_price, self.output_price)

    def api_key(self) -> str:
        """The key from :attr:`api_key_env`.

        Raises:
            ConfigError: the variable is not set (the message says which).
        """
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise ConfigError(
                f"the {self.type} backend needs an API key: set the {self.api_key_env} "
                f"environment variable (export {self.api_key_env}=...)"
            )
        return key

    def build(self) -> LLMClient:
        """Import the SDK and make the client.

        Raises:
            MissingExtraError: the SDK is not installed.
            ConfigError: the key (or, for some backends, the base URL) is missing.
        """
        raise NotImplementedError


def _import_sdk(package: str, purpose: str) -> Any:
    try:
        return __import__(package)
    except ImportError:
        raise MissingExtraError(package, package, purpose) from None


class OpenAIConfig(LLMConfigBase):
    """OpenAI's API (``openai`` SDK, chat completions)."""

    type: Literal["openai"] = "openai"
    api_key_env: str = "OPENAI_API_KEY"

    def build(self) -> LLMClient:
        """An :class:`~gym_repost.llm.openai_client.OpenAIClient`."""
        openai = _import_sdk("openai", "The OpenAI client")
        from gym_repost.llm.openai_client import OpenAIClient

        sdk = openai.OpenAI(api_key=self.api_key(), base_url=self.base_url, timeout=self.timeout, max_retries=0)
        return OpenAIClient(self, sdk, token_parameter="max_completion_tokens")


class OpenAICompatibleConfig(LLMConfigBase):
    """Any server speaking OpenAI's chat completions: vLLM, Ollama, llama.cpp, LiteLLM.

    The key is optional (``EMPTY`` is sent when the variable is unset, as vLLM expects);
    the base URL is required (or ``OPENAI_BASE_URL``).
    """

    type: Literal["openai-compatible"] = "openai-compatible"
    api_key_env: str = "OPENAI_API_KEY"

    def api_key(self) -> str:
        """The key, or ``EMPTY``."""
        return os.environ.get(self.api_key_env, "").strip() or "EMPTY"

    def endpoint(self) -> str:
        """The base URL.

        Raises:
            ConfigError: none is configured.
        """
        url = self.base_url or os.environ.get("OPENAI_BASE_URL")
        if not url:
            raise ConfigError(
                "the openai-compatible backend needs a base URL: --base-url "
                "http://localhost:8000/v1 (vLLM) or http://localhost:11434/v1 (Ollama), "
                "or set OPENAI_BASE_URL"
            )
        return url

    def build(self) -> LLMClient:
        """An :class:`~gym_repost.llm.openai_client.OpenAIClient` pointed at :meth:`endpoint`."""
        openai = _import_sdk("openai", "The OpenAI-compatible client")
        from gym_repost.llm.openai_client import OpenAIClient

        sdk = openai.OpenAI(api_key=self.api_key(), base_url=self.endpoint(), timeout=self.timeout, max_retries=0)
        return OpenAIClient(self, sdk, token_parameter="max_tokens")


class AnthropicConfig(LLMConfigBase):
    """Anthropic's messages API (``anthropic`` SDK)."""

    type: Literal["anthropic"] = "anthropic"
    api_key_env: str = "ANTHROPIC_API_KEY"

    def build(self) -> LLMClient:
        """An :class:`~gym_repost.llm.anthropic_client.AnthropicClient`."""
        anthropic = _import_sdk("anthropic", "The Anthropic client")
        from gym_repost.llm.anthropic_client import AnthropicClient

        sdk = anthropic.Anthropic(api_key=self.api_key(), base_url=self.base_url, timeout=self.timeout, max_retries=0)
        return AnthropicClient(self, sdk)


LLMConfig = Annotated[Union[OpenAIConfig, OpenAICompatibleConfig, AnthropicConfig], Field(discriminator="type")]
"""Any backend's configuration, chosen by ``type``."""

PROVIDERS = ("openai", "anthropic", "openai-compatible")

_ADAPTER: TypeAdapter[Any] = TypeAdapter(LLMConfig)


def parse_llm_config(data: dict[str, Any]) -> LLMConfigBase:
    """Validate a configuration dict (``type`` chooses the backend).

    Raises:
        ConfigError: naming the first bad or unknown field.
    """
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:] or first["loc"]) or "type"
        known = ", ".join(sorted(OpenAIConfig.model_fields))
        raise ConfigError(f"LLM setting {where!r}: {first['msg']} (settings: {known})") from None


def llm_config(spec: str, **settings: Any) -> LLMConfigBase:
    """The configuration for ``PROVIDER/MODEL`` (``openai/gpt-4o-mini``), plus ``settings``.

    Raises:
        ConfigError: unknown provider, no model, or a bad setting.
    """
    provider, _, model = spec.partition("/")
    if provider not in PROVIDERS or not model:
        raise ConfigError(f"LLM {spec!r}: expected PROVIDER/MODEL with PROVIDER one of {', '.join(PROVIDERS)}")
    return parse_llm_config({**{k: v for k, v in settings.items() if v is not None}, "type": provider, "model": model})
