"""Test-generation training data: the Repo-Smith synthesis loop over test-file tasks.

For each :class:`~gym_repost.task.TestFileTask`:

1. **generate**: the model reads the focal file and writes a test file with its
   reasoning (``<reasoning>...</reasoning>`` then a ```python block);
2. the file is scored in the sandbox as ``gym_repost/TestFile-v0`` scores a submission;
3. up to ``max_rounds`` rounds of **guided repair**: each round picks the weakest metric
   relative to the repository's own tests, in Repo-Smith's order (execution errors,
   then failing tests, then coverage, then mutation score;
   :func:`~gym_repost.harness.testfile_scoring.weakest_metric`), and prompts for that
   repair with the report's details (the errors, the failing assertions, the lines and
   branches not covered, the surviving mutants as diffs). A repaired file replaces the
   current one when it differs and its reward is not lower; the loop stops early when
   nothing is left to repair;
4. **compress**: the first reasoning and those of the accepted repairs become one
   reasoning that explains the final test file without mentioning any repair.

Each task gives one JSONL record: the focal file, the final test file and reasoning,
the metrics of every round, and the SFT fields (``messages``, ``prompt``,
``completion``) loadable by ``datasets.load_dataset("json", ...)``.

The model sits behind :class:`TextGenerator`, a call shape only: ``llm:PROVIDER/MODEL``
(through :mod:`gym_repost.llm`) or ``scripted:FILE`` (replies replayed in order, offline).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gym_repost.data.llm_samplers import LLMSampler, LLMTotals, UnitSamplers, close_samplers
from gym_repost.data.records import task_seed
from gym_repost.errors import ConfigError
from gym_repost.executor import Executor, need_sandbox, with_sandbox
from gym_repost.harness.candidate import extract_code_block
from gym_repost.harness.testfile_report import TestFileReport, score_test_file
from gym_repost.harness.testfile_scoring import RepairKind, RewardConfig, weakest_metric
from gym_repost.llm.base import Message
from gym_repost.policy.scripted import read_json_objects
from gym_repost.prompting import render_prompt
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import TestFileTask

logger = logging.getLogger(__name__)

_PROMPTS = "gym_repost.data"
_REASONING = re.compile(r"<reasoning>(.*?)(?:</reasoning>|$)", re.DOTALL | re.IGNORECASE)
_MENTIONS_REPAIR = re.compile(
    r"\b(repair|repaired|revision|revised|previous (?:version|draft)|earlier "
    r"(?:version|draft)|first draft)\b",
    re.IGNORECASE,
)
_SHOWN_FILES = 60


@runtime_checkable
class TextGenerator(Protocol):
    """Answers a conversation with text (a reasoning and a test file, or a reasoning)."""

    def generate(self, messages: Sequence[Message], *, seed: int) -> str:
        """The model's reply to ``messages``."""


class ScriptedGenerator:
    """Replays fixed replies in order (offline runs and tests).

    Args:
        replies: the replies, served one per call across all tasks.
        responder: called once the replies run out (else an error is raised).
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self, replies: Sequence[str] = (), responder: Callable[[Sequence[Message]], str] | None = None
    ) -> None:
        self.replies = list(replies)
        self.responder = responder
        self.calls: list[list[Message]] = []

    def generate(self, messages: Sequence[Message], *, seed: int) -> str:
        """The next reply."""
        self.calls.append(list(messages))
        if self.replies:
            return self.replies.pop(0)
        if self.responder is not None:
            return self.responder(messages)
        raise ConfigError("scripted generator: no reply left for this request")


class LLMGenerator(LLMSampler):
    """A chat model through :mod:`gym_repost.llm` (retries, cache and accounting there): an
    LLM sampler asked whole conversations, so what a task's calls cost is counted in its
    result (:attr:`TestGenResult.llm`).

    Args:
        model: ``PROVIDER/MODEL``.
        **settings: LLM settings (``base_url``, ``temperature``, ``cache_dir``...).
    """

    def generate(self, messages: Sequence[Message], *, seed: int) -> str:
        """The model's answer text.

        Raises:
            LLMError: the endpoint failed beyond its retries (infrastructure).
        """
        return self.client.complete(messages, seed=seed).text


def read_replies(path: str | Path) -> list[str]:
    """Replies of a ``scripted:FILE``: JSON Lines of ``{"text": ...}``.

    Raises:
        ConfigError: the file is missing or a line is malformed.
    """
    replies = []
    for number, entry in read_json_objects(path, "scripted generator"):
        if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
            raise ConfigError(f'{path}:{number}: expected {{"text": "..."}}')
        replies.append(entry["text"])
    return replies


def load_generator(spec: str, **settings: Any) -> TextGenerator:
    """``llm:PROVIDER/MODEL`` (``settings`` go to the LLM configuration: ``base_url``,
    ``cache_dir``, ``temperature``...) or ``scripted:FILE``.

    Raises:
        ConfigError: an unknown form or a bad setting.
        MissingExtraError: the provider's SDK is not installed.
    """
    if spec.startswith("scripted:"):
        return ScriptedGenerator(read_replies(spec.split(":", 1)[1]))
    if spec.startswith("llm:"):
        return LLMGenerator(spec.removeprefix("llm:"), **settings)
    raise ConfigError(f"unknown generator {spec!r}; use llm:PROVIDER/MODEL or scripted:FILE")


@dataclass(frozen=True)
class Reply:
    """A reply split into its reasoning and its test file (None when it holds no code)."""

    reasoning: str
    code: str | None


def parse_reply(text: str) -> Reply:
    """The ``<reasoning>`` part (or the text before the code block) and the code block."""
    code = extract_code_block(text)
    found = _REASONING.search(text)
    if found:
        reasoning = found.group(1)
    else:
        reasoning = text.split("```", 1)[0]
    return Reply(reasoning.strip(), code.strip() + "\n" if code and code.strip() else None)


@dataclass
class Round:
    """One generation or repair: what was asked, what came back, how it scored."""

    index: int
    kind: str
    """``generate`` or ``repair:<execution|failures|coverage|mutation>``."""
    reasoning: str
    code: str | None
    report: TestFileReport
    accepted: bool

    def record(self) -> dict[str, Any]:
        """The round as a JSON-able dict."""
        return {
            "round": self.index,
            "kind": self.kind,
            "accepted": self.accepted,
            "reasoning": self.reasoning,
            "reward": self.report.reward,
            "status": self.report.status,
            "metrics": self.report.metrics.model_dump(),
            "relative": self.report.relative,
        }


@dataclass
class TestGenResult:
    """The outcome of the loop on one task."""

    __test__ = False  # not a pytest test class

    task: TestFileTask
    prompt: list[Message]
    rounds: list[Round] = field(default_factory=list)
    reasoning: str = ""
    """The compressed reasoning that explains the final test file."""
    llm: LLMTotals | None = None
    """What the task's model calls cost (None when no model ran)."""

    @property
    def final(self) -> Round:
        """The last accepted round (the generation when no repair was accepted)."""
        return [r for r in self.rounds if r.accepted][-1]

    def record(self) -> dict[str, Any]:
        """The JSONL record (see the module docstring)."""
        final, spec = self.final, self.task.evaluation
        code = final.code or ""
        completion = f"<reasoning>\n{self.reasoning}\n</reasoning>\n\n```python\n{code}```\n"
        return {
            "task_id": self.task.id,
            "task_name": self.task.name,
            "focal_file": spec.focal_file,
            "focal_module": spec.focal_module,
            "focal_source": self.task.repository.files[spec.focal_file],
            "test_path": spec.test_path,
            "test_file": code,
            "reasoning": self.reasoning,
            "reasoning_mentions_repair": bool(_MENTIONS_REPAIR.search(self.reasoning)),
            "reward": final.report.reward,
            "passed": final.report.passed,
            "metrics": final.report.metrics.model_dump(),
            "relative": final.report.relative,
            "reference": self.task.reference.model_dump(),
            "rounds": [r.record() for r in self.rounds],
            "messages": [{"role": m.role, "content": m.content} for m in self.prompt]
            + [{"role": "assistant", "content": completion}],
            "prompt": self.prompt[-1].content,
            "completion": completion,
        }


def _context(task: TestFileTask) -> dict[str, Any]:
    spec = task.evaluation
    others = sorted(p for p in task.repository.files if p != spec.focal_file)
    return {
        "spec": spec,
        "repo": task.provenance.repo,
        "extra_path": [p for p in spec.python_path if p],
        "plugins": ", ".join(spec.plugins) or "none beyond pytest's own",
        "focal_source": task.repository.files[spec.focal_file].rstrip("\n"),
        "other_files": others[:_SHOWN_FILES],
        "more_files": max(0, len(others) - _SHOWN_FILES),
    }


def _conversation(user: str) -> list[Message]:
    return [Message.system(render_prompt(_PROMPTS, "testgen_system.j2")), Message.user(user)]


def generation_prompt(task: TestFileTask) -> list[Message]:
    """The first request: the focal file, where the tests go, what is asked."""
    return _conversation(render_prompt(_PROMPTS, "testgen_generate.j2", **_context(task)))


def repair_prompt(task: TestFileTask, kind: RepairKind, code: str, report: TestFileReport) -> list[Message]:
    """The request of a repair round aimed at ``kind``, with the report's details."""
    details = {
        "execution": report.failing_text() or report.message,
        "failures": report.failing_text(),
        "coverage": report.coverage_text(),
        "mutation": report.mutants_text(),
    }[kind]
    text = render_prompt(
        _PROMPTS, f"testgen_repair_{kind}.j2", **_context(task), code=code.rstrip("\n"), report=report, details=details
    )
    return _conversation(text)


def compression_prompt(task: TestFileTask, notes: Sequence[str], code: str) -> list[Message]:
    """The request that merges the reasonings into one about the final file."""
    text = render_prompt(
        _PROMPTS, "testgen_compress.j2", spec=task.evaluation, notes=list(notes), code=code.rstrip("\n")
    )
    return _conversation(text)


def _attempt(
    task: TestFileTask,
    generator: TextGenerator,
    sandbox: Sandbox,
    messages: list[Message],
    seed: int,
    reward: RewardConfig | None,
) -> tuple[Reply, TestFileReport]:
    reply = parse_reply(generator.generate(messages, seed=seed))
    report = score_test_file(sandbox, task, reply.code or "", reward)
    return reply, report


def synthesize_tests(
    task: TestFileTask,
    generator: TextGenerator,
    sandbox: Sandbox,
    *,
    max_rounds: int = 3,
    seed: int = 0,
    reward: RewardConfig | None = None,
) -> TestGenResult:
    """Run the generate / repair / compress loop on one task.

    Raises:
        SandboxError, LLMError: the infrastructure failed.
    """
    prompt = generation_prompt(task)
    reply, report = _attempt(task, generator, sandbox, prompt, seed, reward)
    result = TestGenResult(task, prompt, [Round(0, "generate", reply.reasoning, reply.code, report, True)])
    for index in range(1, max_rounds + 1):
        current = result.final
        kind = weakest_metric(current.report.metrics, task.reference)
        if kind is None:
            break
        messages = repair_prompt(task, kind, current.code or "", current.report)
        reply, report = _attempt(task, generator, sandbox, messages, seed + index, reward)
        accepted = reply.code not in (None, current.code) and report.reward >= current.report.reward
        result.rounds.append(Round(index, f"repair:{kind}", reply.reasoning, reply.code, report, accepted))
    result.reasoning = _compress(task, generator, result, seed + max_rounds + 1)
    return result


@dataclass(frozen=True)
class TestGenWork:
    """The unit of work of :func:`run`: one task, its generator made (and closed) where it runs."""

    __test__ = False  # not a pytest test class

    generator: str
    settings: Mapping[str, Any]
    max_rounds: int
    seed: int

    def __call__(self, task: TestFileTask, sandbox: Sandbox | None) -> TestGenResult:
        with UnitSamplers() as made:
            result = synthesize_tests(
                task,
                made.add(load_generator(self.generator, **self.settings)),
                need_sandbox(sandbox, "test generation"),
                max_rounds=self.max_rounds,
                seed=task_seed(self.seed, task.id, "testgen"),
            )
        result.llm = made.totals()
        return result


def run(
    tasks: Sequence[TestFileTask],
    sandbox: Sandbox | None,
    *,
    generator: str,
    generator_settings: Mapping[str, Any] | None = None,
    max_rounds: int = 3,
    seed: int = 0,
    executor: Executor | None = None,
    on_result: Callable[[TestGenResult], None] | None = None,
) -> list[TestGenResult]:
    """:func:`synthesize_tests` over ``tasks`` with the generator ``generator`` (a spec of
    :func:`load_generator`); each task gets its own generator, made where the task runs
    (default: two threads over ``sandbox``) and closed after it, so a ``scripted:FILE``
    generator serves its replies from the start to every task, whatever ran before;
    each task's seed is derived from ``seed``.

    Raises:
        ConfigError: a bad generator spec or setting.
        SandboxError, LLMError: the infrastructure failed.
    """
    settings = dict(generator_settings or {})
    close_samplers([load_generator(generator, **settings)])  # a bad spec or setting fails before any task runs
    return with_sandbox(executor, sandbox).map(TestGenWork(generator, settings, max_rounds, seed), tasks, on_result)


def testgen_totals(results: Sequence[TestGenResult]) -> dict[str, Any]:
    """Counts over a run: passing and mean reward after generation and at the end, repairs."""
    repairs = [r for res in results for r in res.rounds[1:]]
    n = len(results) or 1
    return {
        "tasks": len(results),
        "passing_first": sum(res.rounds[0].report.passed for res in results),
        "passing_final": sum(res.final.report.passed for res in results),
        "mean_reward_first": sum(res.rounds[0].report.reward for res in results) / n,
        "mean_reward_final": sum(res.final.report.reward for res in results) / n,
        "repair_rounds": len(repairs),
        "repairs_accepted": sum(r.accepted for r in repairs),
        "repairs_by_target": {
            k.split(":")[1]: sum(r.kind == k for r in repairs) for k in sorted({r.kind for r in repairs})
        },
    }


def _compress(task: TestFileTask, generator: TextGenerator, result: TestGenResult, seed: int) -> str:
    notes = [r.reasoning for r in result.rounds if r.accepted and r.reasoning]
    if len(notes) <= 1:
        return notes[0] if notes else ""
    text = generator.generate(compression_prompt(task, notes, result.final.code or ""), seed=seed)
    found = _REASONING.search(text)
    return (found.group(1) if found else text).strip()
