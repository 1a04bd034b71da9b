"""Retries and the concurrency limit around one model call.

Transient failures (rate limits, 5xx, timeouts, dropped connections, empty answers) are
retried with ``tenacity``: the server's ``retry-after`` when it sends one, else
exponential backoff with jitter; at most ``max_retries`` retries and at most
``max_total_retry_seconds`` from the first attempt. The SDKs' own retries are switched
off, so these are the only ones. What is left after that raises
:class:`~gym_repost.errors.LLMError`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from gym_repost.errors import LLMError

if TYPE_CHECKING:
    from gym_repost.llm.config import LLMConfigBase

logger = logging.getLogger(__name__)

T = TypeVar("T")
RetryHint = Callable[[BaseException], "float | None"]

_SLOTS: dict[tuple[object, ...], threading.BoundedSemaphore] = {}
_SLOTS_LOCK = threading.Lock()


def concurrency_slots(config: LLMConfigBase) -> threading.BoundedSemaphore:
    """The semaphore shared by every client of the same endpoint and model.

    Clients built from equal configurations (each episode builds its own) share it, so
    ``concurrency`` bounds the requests in flight to that endpoint across the process.
    """
    key = (config.type, config.base_url, config.model, config.concurrency)
    with _SLOTS_LOCK:
        if key not in _SLOTS:
            _SLOTS[key] = threading.BoundedSemaphore(config.concurrency)
        return _SLOTS[key]


def sdk_retry_hint(exc: BaseException, status_error: type, connection_error: type) -> float | None:
    """Transient-or-not for the ``openai`` and ``anthropic`` SDKs' errors (same shape).

    Connection errors and timeouts, 408, 409, 429 and 5xx are transient; a 429's or
    503's ``retry-after-ms``/``retry-after`` header gives the wait.
    """
    if isinstance(exc, connection_error):
        return 0.0
    if not isinstance(exc, status_error):
        return None
    status = getattr(exc, "status_code", 0)
    if status not in (408, 409, 429) and status < 500:
        return None
    return retry_after(getattr(exc, "response", None)) or 0.0


def retry_after(response: Any) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds) headers, if any."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        if seconds > 0:
            return seconds
    return None


def _wait(config: LLMConfigBase, hint: RetryHint) -> Callable[[RetryCallState], float]:
    backoff = wait_random_exponential(multiplier=config.backoff_initial, max=config.backoff_max)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = hint(exc) if exc is not None else None
        delay = asked if asked else backoff(state)
        remaining = config.max_total_retry_seconds - (state.seconds_since_start or 0.0)
        return max(0.0, min(delay, remaining))

    return wait


def _log_retry(who: str) -> Callable[[RetryCallState], None]:
    def log(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        # a first or second retry is routine (rate limits); more deserve the user's eye
        level = logging.WARNING if state.attempt_number >= 3 else logging.INFO
        logger.log(
            level,
            "%s: attempt %d failed (%s: %s); retrying in %.1fs",
            who,
            state.attempt_number,
            type(exc).__name__,
            exc,
            state.upcoming_sleep,
        )

    return log


def call_with_retries(fn: Callable[[], T], config: LLMConfigBase, hint: RetryHint, who: str) -> tuple[T, int]:
    """Call ``fn`` until it succeeds; return its result and the number of attempts.

    Args:
        fn: one attempt.
        config: retry budget (``max_retries``, ``max_total_retry_seconds``, backoff).
        hint: None for a permanent error; else seconds to wait (0.0: use backoff).
        who: the client, for messages.

    Raises:
        LLMError: a permanent error, or a transient one that outlasted the budget.
    """
    retrying = Retrying(
        stop=stop_after_attempt(config.max_retries + 1) | stop_after_delay(config.max_total_retry_seconds),
        wait=_wait(config, hint),
        retry=retry_if_exception(lambda exc: hint(exc) is not None),
        before_sleep=_log_retry(who),
        reraise=True,
    )
    attempts = 0

    def counted() -> T:
        nonlocal attempts
        attempts += 1
        return fn()

    try:
        return retrying(counted), attempts
    except LLMError:
        raise
    except Exception as exc:
        if hint(exc) is None:
            raise LLMError(f"{who}: {type(exc).__name__}: {exc}", attempts=attempts) from exc
        raise LLMError(
            f"{who}: gave up after {attempts} attempt{'s' if attempts != 1 else ''} ({type(exc).__name__}: {exc})",
            attempts=attempts,
            transient=True,
        ) from exc
