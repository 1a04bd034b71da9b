"""Token and cost accounting: per call, per episode, per build.

A :class:`Ledger` adds up the exchanges recorded into it. Every client keeps one over its
lifetime (``client.ledger``); pass another to ``complete(..., ledger=...)`` to account an
episode or a build on its own. Ledgers are thread-safe.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym_repost.llm.base import LLMRequest, LLMResponse


@dataclass(frozen=True)
class Usage:
    """Tokens of one call (or a sum of calls)."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


def price_of(usage: Usage, input_price: float | None, output_price: float | None) -> float | None:
    """USD for ``usage`` at the given prices per million tokens; None if a price is unknown."""
    if input_price is None or output_price is None:
        return None
    return (usage.input_tokens * input_price + usage.output_tokens * output_price) / 1_000_000


@dataclass
class Exchange:
    """One call to a model: the request, the response or the error, the time it took."""

    request: LLMRequest
    response: LLMResponse | None
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form."""
        return {
            "request": self.request.to_dict(),
            "response": None if self.response is None else self.response.to_dict(),
            "error": self.error,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class LedgerTotals:
    """What a ledger has added up."""

    calls: int = 0
    """Calls answered (cache hits included)."""
    cache_hits: int = 0
    failures: int = 0
    """Calls that raised :class:`~gym_repost.errors.LLMError`."""
    retries: int = 0
    """HTTP attempts beyond the first, over all calls."""
    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    """USD, or None when no call was priced."""

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-able form (as stored with an episode's stats)."""
        return {
            "llm_calls": self.calls,
            "cache_hits": self.cache_hits,
            "llm_failures": self.failures,
            "retries": self.retries,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "cost_usd": self.cost,
        }


class Ledger:
    """Thread-safe running totals of exchanges.

    Args:
        keep_exchanges: also keep every exchange in :attr:`exchanges` (a builder stores
            them with what it built).
    """

    def __init__(self, *, keep_exchanges: bool = False) -> None:
        self.keep_exchanges = keep_exchanges
        self.exchanges: list[Exchange] = []
        self._totals = LedgerTotals()
        self._lock = threading.Lock()

    def record(self, exchange: Exchange) -> None:
        """Add one exchange."""
        with self._lock:
            t = self._totals
            if self.keep_exchanges:
                self.exchanges.append(exchange)
            response = exchange.response
            if response is None:
                t.failures += 1
                return
            t.calls += 1
            t.cache_hits += int(response.cached)
            t.retries += max(0, response.attempts - 1)
            t.usage = t.usage + response.usage
            if response.cost is not None:
                t.cost = (t.cost or 0.0) + response.cost

    def totals(self) -> LedgerTotals:
        """A snapshot of the totals."""
        with self._lock:
            t = self._totals
            return LedgerTotals(t.calls, t.cache_hits, t.failures, t.retries, t.usage, t.cost)

    def to_dict(self) -> dict[str, Any]:
        """The totals, flat and JSON-able."""
        return self.totals().to_dict()


_LOG_LOCK = threading.Lock()


def append_exchange(path: Path, exchange: Exchange, client: str) -> None:
    """Append ``exchange`` as one JSON line to ``path`` (created with its directory)."""
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "client": client, **exchange.to_dict()}
    line = json.dumps(record, ensure_ascii=False, default=_jsonable) + "\n"
    with _LOG_LOCK:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    return str(value)
