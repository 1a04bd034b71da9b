"""LLM samplers for the training-data commands: ``--sampler llm:PROVIDER/MODEL``.

A chat model through :mod:`gym_repost.llm` (OpenAI, Anthropic, or any OpenAI-compatible
server such as vLLM or Ollama through ``base_url``) writes the training data's samples:

* :class:`LLMCodeSampler` writes code: ``n`` requests of the task's instruction
  (:func:`~gym_repost.data.records.instruction_prompt`), seeds ``seed, seed + 1, ...``
  (so the response cache keeps them apart), one sample per reply: its fenced code block.
  A reply without one is the empty sample ``""``, which cannot be placed into the
  evaluation script: it passes no test (its outcomes are ``error``), it is never a
  crash, and it is counted in :attr:`~LLMCodeSampler.counts`.
* :class:`LLMTestSampler` writes tests: one request for ``n`` assert-style tests
  (:func:`~gym_repost.data.assertions.propose_tests_prompt`: about 20 for AceCoder, J for
  DSTC), parsed by :func:`~gym_repost.data.assertions.parse_test_reply`; it asks again
  (up to ``max_requests`` in all) while fewer than ``n`` distinct tests came back.
* :class:`LLMRepairer` repairs a failing solution (rejection sampling's
  ``--debug-failures``): one request holding the task's instruction, the failed code and
  its test report (``prompts/debug_failure.j2``); the answer's code block is the repair.

Retries, the response cache and token accounting are the client's: every sampler has
the :attr:`ledger` of its client. An endpoint that keeps failing raises
:class:`~gym_repost.errors.LLMError` (an infrastructure error) out of the sampler.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from gym_repost.data.assertions import parse_test_reply, propose_tests_prompt
from gym_repost.data.base import TestSuite
from gym_repost.data.records import PROMPTS, instruction_prompt
from gym_repost.errors import ConfigError
from gym_repost.harness.candidate import extract_code_block
from gym_repost.llm import Ledger, LedgerTotals, LLMClient, Message, llm_config
from gym_repost.prompting import render_prompt
from gym_repost.task import FunctionTask

TEST_LABEL = "llm"
"""Label of the tests an :class:`LLMTestSampler` proposes."""


class LLMSampler:
    """A model behind an LLM API, asked one user message at a time.

    Args:
        model: ``PROVIDER/MODEL``, e.g. ``openai/gpt-4o-mini`` or
            ``openai-compatible/Qwen2.5-Coder-7B-Instruct``.
        client: a built client to use instead of one built from ``model`` and
            ``settings`` (not closed by :meth:`close`).
        **settings: LLM settings (:class:`~gym_repost.llm.config.LLMConfigBase`:
            ``base_url``, ``temperature``, ``cache_dir``, ``max_tokens``...).

    Raises:
        ConfigError: a bad setting, a missing API key or base URL.
        MissingExtraError: the provider's SDK is not installed.

    Attributes:
        name: the model (``PROVIDER/MODEL``); AceCoder pairs programs within one name.
        counts: what the replies lacked (``replies_without_code``, ...).
    """

    def __init__(self, model: str, *, client: LLMClient | None = None, **settings: Any) -> None:
        self.name = model
        self.client = client if client is not None else llm_config(model, **settings).build()
        self._owns_client = client is None
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def ledger(self) -> Ledger:
        """Calls, tokens, retries and cost of this sampler's client."""
        return self.client.ledger

    def ask(self, prompt: str, seed: int) -> str:
        """The model's answer to one user message.

        Raises:
            LLMError: the endpoint failed beyond its retries (infrastructure).
        """
        return self.client.complete([Message.user(prompt)], seed=seed).text

    def count(self, what: str) -> None:
        """Count one reply that lacked ``what`` the sampler needed (thread-safe)."""
        with self._lock:
            self.counts[what] += 1

    def close(self) -> None:
        """Close the client, if this sampler built it."""
        if self._owns_client:
            self.client.close()


class LLMCodeSampler(LLMSampler):
    """Writes ``n`` candidates of a task's target, one request each (see the module docstring)."""

    def sample_code(self, task: FunctionTask, n: int, *, seed: int) -> list[str]:
        """``n`` codes, in request order; ``""`` for a reply without a code block."""
        prompt = instruction_prompt(task)
        return [self._code(self.ask(prompt, seed + k)) for k in range(n)]

    def _code(self, reply: str) -> str:
        code = extract_code_block(reply)
        if code is None or not code.strip():
            self.count("replies_without_code")
            return ""
        return code.strip("\n") + "\n"


class LLMTestSampler(LLMSampler):
    """Writes assert-style tests of a task's target (see the module docstring).

    Args:
        max_requests: requests per task at most, while fewer than ``n`` tests came back.
    """

    def __init__(self, model: str, *, max_requests: int = 2, client: LLMClient | None = None, **settings: Any) -> None:
        if max_requests < 1:
            raise ConfigError(f"max_requests must be at least 1, not {max_requests}")
        super().__init__(model, client=client, **settings)
        self.max_requests = max_requests

    def sample_tests(self, task: FunctionTask, n: int, *, seed: int) -> TestSuite:
        """Up to ``n`` distinct tests, in the order the model wrote them, labelled ``llm``."""
        prompt = propose_tests_prompt(task, n)
        tests: list[str] = []
        for k in range(self.max_requests):
            found = parse_test_reply(self.ask(prompt, seed + k), task.target)
            if not found:
                self.count("replies_without_tests")
            tests += [t for t in found if t not in tests]
            if len(tests) >= n:
                break
        kept = tuple(tests[:n])
        return TestSuite(kept, "assert", (TEST_LABEL,) * len(kept))


class LLMRepairer(LLMSampler):
    """Repairs a failing candidate from its test report, in one answer."""

    def repair(self, task: FunctionTask, code: str, report: str, *, seed: int) -> str | None:
        """The answer's code block, or None when it holds none."""
        prompt = render_prompt(
            PROMPTS,
            "debug_failure.j2",
            instruction=instruction_prompt(task),
            code=code,
            report=report,
            target=task.target,
        )
        repaired = extract_code_block(self.ask(prompt, seed))
        if repaired is None or not repaired.strip():
            self.count("replies_without_code")
            return None
        return repaired.strip("\n") + "\n"


LLMTotals = tuple[LedgerTotals, Counter[str]]
"""Summed ledgers of LLM samplers and their counts (replies without code, ...)."""


def llm_totals(samplers: Iterable[object]) -> LLMTotals | None:
    """The summed ledgers and counts of the LLM samplers among ``samplers`` (each client
    once), or None when none of them is an LLM sampler."""
    models = list({id(s): s for s in samplers if isinstance(s, LLMSampler)}.values())
    if not models:
        return None
    ledgers = {id(m.ledger): m.ledger for m in models}.values()
    return add_llm_totals(
        [(ledger.totals(), Counter()) for ledger in ledgers] + [(LedgerTotals(), m.counts) for m in models]
    )


def add_llm_totals(parts: Iterable[LLMTotals | None]) -> LLMTotals | None:
    """The sum of several :func:`llm_totals` (None where no model ran); None when all are."""
    found = [p for p in parts if p is not None]
    if not found:
        return None
    total, counts = LedgerTotals(), Counter[str]()
    for t, c in found:
        total.calls += t.calls
        total.cache_hits += t.cache_hits
        total.failures += t.failures
        total.retries += t.retries
        total.usage = total.usage + t.usage
        if t.cost is not None:
            total.cost = (total.cost or 0.0) + t.cost
        counts.update(c)
    return total, counts


def close_samplers(samplers: Iterable[object]) -> None:
    """Close every sampler (once) that has a ``close`` method."""
    for sampler in {id(s): s for s in samplers}.values():
        close = getattr(sampler, "close", None)
        if callable(close):
            close()


class UnitSamplers:
    """The samplers of one unit of work, made where it runs (a thread, a Ray actor) and
    closed when it ends; :meth:`totals` is what their models cost that unit, so the
    units' totals add up to the run's wherever they ran.

    >>> with UnitSamplers() as made:
    ...     code = made.add(load_code_sampler(spec))
    """

    def __init__(self) -> None:
        self.samplers: list[Any] = []

    def add(self, sampler: Any) -> Any:
        """Keep ``sampler`` to close and account for; returns it."""
        self.samplers.append(sampler)
        return sampler

    def totals(self) -> LLMTotals | None:
        """The unit's :func:`llm_totals`."""
        return llm_totals(self.samplers)

    def __enter__(self) -> UnitSamplers:
        return self

    def __exit__(self, *exc: object) -> None:
        close_samplers(self.samplers)


__all__ = [
    "TEST_LABEL",
    "LLMCodeSampler",
    "LLMRepairer",
    "LLMSampler",
    "LLMTestSampler",
    "LLMTotals",
    "UnitSamplers",
    "add_llm_totals",
    "close_samplers",
    "llm_totals",
]
