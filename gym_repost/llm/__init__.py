"""LLM clients: OpenAI, Anthropic, and any OpenAI-compatible server (vLLM, Ollama, ...).

>>> from gym_repost.llm import Message, llm_config
>>> with llm_config("openai/gpt-4o-mini", cache_dir=".cache/llm").build() as client:
...     answer = client.complete([Message.system("Be brief."), Message.user("2+2?")])
...     answer.text, answer.usage, client.ledger.to_dict()

Importing this package does not import either SDK; ``build()`` does.
See :mod:`gym_repost.llm.base` for the seam and :mod:`gym_repost.llm.scripted_server`
for a loopback server that plays scripted replies in both wire formats.

May import: errors.
"""

from gym_repost.llm.accounting import Exchange, Ledger, LedgerTotals, Usage
from gym_repost.llm.base import LLMClient, LLMRequest, LLMResponse, Message, ToolCall
from gym_repost.llm.config import (
    PROVIDERS,
    AnthropicConfig,
    LLMConfig,
    LLMConfigBase,
    OpenAICompatibleConfig,
    OpenAIConfig,
    llm_config,
    parse_llm_config,
)

__all__ = [
    "PROVIDERS",
    "AnthropicConfig",
    "Exchange",
    "LLMClient",
    "LLMConfig",
    "LLMConfigBase",
    "LLMRequest",
    "LLMResponse",
    "Ledger",
    "LedgerTotals",
    "Message",
    "OpenAICompatibleConfig",
    "OpenAIConfig",
    "ToolCall",
    "Usage",
    "llm_config",
    "parse_llm_config",
]
