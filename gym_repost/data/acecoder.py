"""AceCoder: preference pairs from synthesized tests and program pass rates (Zeng et al., 2025).

Per question (task):

1. a test sampler proposes about 20 assert-style tests;
2. a proxy solution (the task's ground truth by default, or one sample of a stronger
   model) runs against them; tests the proxy fails are removed, and a question left with
   fewer than 5 tests is dropped;
3. each model (code sampler) samples programs; duplicates within a model are removed
   (same code up to formatting and comments); each program's pass rate over the kept
   tests is measured, one sandboxed process per program;
4. within one model's programs, :func:`preference_pairs` picks (chosen, rejected) pairs.

Records: DPO ``{prompt, chosen, rejected}`` with both pass rates and the model, and
optionally the filtered tests per question (AceCode-87K's shape).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gym_repost.data.base import CodeSampler, TestSampler, TestSuite
from gym_repost.data.llm_samplers import LLMTotals, UnitSamplers, add_llm_totals
from gym_repost.data.matrix import DEFAULT_TEST_TIMEOUT, CodeRun, execution_matrix, run_code_against_tests
from gym_repost.data.records import code_response, instruction_prompt, normalized_code, task_fields, task_seed
from gym_repost.data.samplers import check_sampler_specs, load_code_sampler, load_test_sampler
from gym_repost.errors import DataError
from gym_repost.executor import Executor, need_sandbox, with_sandbox
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask

logger = logging.getLogger(__name__)

PASS_RATE_GAP = 0.4
"""The chosen program's pass rate must exceed the rejected one's by this much."""
MIN_CHOSEN_PASS_RATE = 0.8
"""The chosen program's pass rate must exceed this."""
MIN_TESTS = 5
"""Questions with fewer tests left after filtering are dropped."""
_EPS = 1e-9


def _check_rates(pass_rates: Sequence[float]) -> None:
    for i, rate in enumerate(pass_rates):
        if not isinstance(rate, (int, float)) or math.isnan(rate) or not 0.0 <= rate <= 1.0:
            raise DataError(f"pass rate {i} is {rate!r}; pass rates lie within [0, 1]")


def is_preferred(chosen: float, rejected: float, *, strict: bool = True) -> bool:
    """AceCoder's pair rule for two pass rates.

    Strict (the paper's rule): ``chosen > rejected + 0.4``, ``chosen > 0.8`` and
    ``rejected > 0``. Non-strict (the rule of AceCoder's released pair-building code,
    ``create_rm_dataset.py``): ``chosen >= rejected + 0.4``, ``chosen >= 0.8`` and still
    ``rejected > 0``. Comparisons allow 1e-9 of float error, so rates computed as
    ``passed / total`` behave as the exact fractions at the boundaries (0.8 - 0.4 is a
    gap of exactly 0.4).
    """
    gap = chosen - rejected - PASS_RATE_GAP
    over = chosen - MIN_CHOSEN_PASS_RATE
    if strict:
        return gap > _EPS and over > _EPS and rejected > _EPS
    return gap >= -_EPS and over >= -_EPS and rejected > _EPS


def preference_pairs(pass_rates: Sequence[float], *, strict: bool = True) -> list[tuple[int, int]]:
    """Every ``(chosen_index, rejected_index)`` pair that :func:`is_preferred` accepts.

    Args:
        pass_rates: one pass rate per program, all from one model's samples.
        strict: the paper's strict rule (default) or the released code's non-strict one.

    Returns:
        Pairs ordered by chosen index, then rejected index. Pass duplicate-free
        programs: equal programs would give equal pairs.

    Raises:
        DataError: a pass rate is outside [0, 1] or not a number.
    """
    _check_rates(pass_rates)
    indices = range(len(pass_rates))
    return [
        (i, j) for i in indices for j in indices if i != j and is_preferred(pass_rates[i], pass_rates[j], strict=strict)
    ]


def filter_tests(suite: TestSuite, proxy: CodeRun) -> TestSuite:
    """The tests of ``suite`` that the proxy solution passes."""
    return suite.select([k for k, o in enumerate(proxy.outcomes) if o.passed])


def dedupe_codes(codes: Sequence[str]) -> list[str]:
    """``codes`` without repeats (equal up to formatting and comments), first kept."""
    seen: dict[str, str] = {}
    for code in codes:
        seen.setdefault(normalized_code(code), code)
    return list(seen.values())


@dataclass(frozen=True)
class Program:
    """One sampled program and its run against the kept tests."""

    model: str
    code: str
    run: CodeRun

    @property
    def pass_rate(self) -> float:
        """Share of the kept tests passed."""
        return self.run.pass_rate


@dataclass(frozen=True)
class AcecoderQuestion:
    """One task through the AceCoder pipeline.

    Attributes:
        task: the task.
        proposed: the tests the test sampler proposed.
        tests: the tests the proxy passes.
        dropped: why the question was dropped (too few tests), else None.
        programs: the deduplicated programs of every model, with their runs.
        pairs: ``(chosen, rejected)`` indices into ``programs``, each within one model.
        strict: which pair rule was used.
    """

    task: FunctionTask
    proposed: TestSuite
    tests: TestSuite
    dropped: str | None
    programs: tuple[Program, ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()
    strict: bool = True
    llm: LLMTotals | None = None
    """What the question's samples cost (None when no model ran)."""

    def pair_records(self) -> list[dict[str, Any]]:
        """DPO records, one per pair."""
        prompt = instruction_prompt(self.task)
        records = []
        for i, j in self.pairs:
            chosen, rejected = self.programs[i], self.programs[j]
            records.append(
                {
                    "prompt": prompt,
                    "chosen": code_response(chosen.code),
                    "rejected": code_response(rejected.code),
                    **task_fields(self.task),
                    "method": "acecoder",
                    "model": chosen.model,
                    "strict": self.strict,
                    "chosen_pass_rate": chosen.pass_rate,
                    "rejected_pass_rate": rejected.pass_rate,
                    "num_tests": len(self.tests),
                }
            )
        return records

    def tests_record(self) -> dict[str, Any]:
        """The question with its kept tests (and what was proposed and dropped)."""
        return {
            **task_fields(self.task),
            "question": instruction_prompt(self.task),
            "tests": list(self.tests.tests),
            "test_style": self.tests.style,
            "test_labels": list(self.tests.labels),
            "proposed": len(self.proposed),
            "kept": len(self.tests),
            "removed_labels": self.removed_labels(),
            "dropped": self.dropped,
        }

    def removed_labels(self) -> dict[str, int]:
        """How many tests of each label the proxy removed (empty for unlabelled tests)."""
        counts = dict.fromkeys(self.proposed.labels, 0)
        for label in self.proposed.labels:
            counts[label] += 1
        for label in self.tests.labels:
            counts[label] -= 1
        return counts


def _programs(
    task: FunctionTask,
    sampler: CodeSampler,
    tests: TestSuite,
    sandbox: Sandbox,
    *,
    samples: int,
    seed: int,
    test_timeout: float,
) -> list[Program]:
    codes = dedupe_codes(sampler.sample_code(task, samples, seed=task_seed(seed, task.id, f"acecoder:{sampler.name}")))
    matrix = execution_matrix(sandbox, task, codes, tests, test_timeout=test_timeout)  # one judge run for all
    return [Program(sampler.name, code, row) for code, row in zip(codes, matrix.rows)]


def _pairs_within_models(programs: Sequence[Program], strict: bool) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    for model in dict.fromkeys(p.model for p in programs):
        members = [k for k, p in enumerate(programs) if p.model == model]
        rates = [programs[k].pass_rate for k in members]
        pairs += [(members[i], members[j]) for i, j in preference_pairs(rates, strict=strict)]
    return pairs


def _proxy_code(task: FunctionTask, proxy: CodeSampler | None, seed: int) -> str | None:
    if proxy is None:
        return task.ground_truth
    codes = proxy.sample_code(task, 1, seed=task_seed(seed, task.id, "acecoder:proxy"))
    return codes[0] if codes else None


def run_acecoder_task(
    task: FunctionTask,
    test_sampler: TestSampler,
    code_samplers: Sequence[CodeSampler],
    sandbox: Sandbox,
    *,
    n_tests: int = 20,
    samples: int = 16,
    min_tests: int = MIN_TESTS,
    strict: bool = True,
    proxy: CodeSampler | None = None,
    seed: int = 0,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
) -> AcecoderQuestion:
    """Propose tests, filter them with the proxy, sample and score programs, pair them.

    Args:
        proxy: the sampler whose first sample is the proxy solution; None for the task's
            ground truth.

    Raises:
        SandboxError: the sandbox failed (an infrastructure error).
    """
    proposed = test_sampler.sample_tests(task, n_tests, seed=task_seed(seed, task.id, "acecoder:tests"))
    proxy_code = _proxy_code(task, proxy, seed)
    if proxy_code is None:
        return AcecoderQuestion(task, proposed, proposed.select([]), "the proxy gave no solution", strict=strict)
    kept = filter_tests(
        proposed, run_code_against_tests(sandbox, task, proxy_code, proposed, test_timeout=test_timeout)
    )
    if len(kept) < min_tests:
        return AcecoderQuestion(
            task, proposed, kept, f"{len(kept)} tests left after filtering (fewer than {min_tests})", strict=strict
        )
    programs: list[Program] = []
    for sampler in code_samplers:
        programs += _programs(task, sampler, kept, sandbox, samples=samples, seed=seed, test_timeout=test_timeout)
    pairs = _pairs_within_models(programs, strict)
    logger.debug(
        "%s: %d/%d tests kept, %d programs, %d pairs", task.name, len(kept), len(proposed), len(programs), len(pairs)
    )
    return AcecoderQuestion(task, proposed, kept, None, tuple(programs), tuple(pairs), strict)


@dataclass(frozen=True)
class AcecoderRun:
    """AceCoder over a task set: each question, and the model calls it cost."""

    questions: tuple[AcecoderQuestion, ...]
    min_tests: int
    strict: bool
    llm: LLMTotals | None = None
    """Summed ledgers and counts of the LLM samplers; None when no model ran."""

    def pair_records(self) -> list[dict[str, Any]]:
        """The DPO records of every question."""
        return [r for q in self.questions for r in q.pair_records()]

    def tests_records(self) -> list[dict[str, Any]]:
        """Each question with its kept tests."""
        return [q.tests_record() for q in self.questions]

    def totals(self) -> dict[str, Any]:
        """Counts over the run: questions kept and dropped, tests, programs, pairs."""
        kept = [q for q in self.questions if q.dropped is None]
        removed: dict[str, int] = {}
        for q in self.questions:
            for label, count in q.removed_labels().items():
                removed[label] = removed.get(label, 0) + count
        return {
            "questions": len(self.questions),
            "dropped": len(self.questions) - len(kept),
            "tests_proposed": sum(len(q.proposed) for q in self.questions),
            "tests_kept": sum(len(q.tests) for q in self.questions),
            "removed_by_label": removed,
            "programs": sum(len(q.programs) for q in kept),
            "with_pairs": sum(bool(q.pairs) for q in kept),
            "pairs": sum(len(q.pairs) for q in kept),
        }


@dataclass(frozen=True)
class AcecoderWork:
    """The unit of work of :func:`run`: one question, its samplers made (and closed) where it runs."""

    test_sampler: str
    samplers: tuple[str, ...]
    proxy: str
    settings: Mapping[str, Mapping[str, Any]]
    n_tests: int
    samples: int
    min_tests: int
    strict: bool
    seed: int
    test_timeout: float

    def __call__(self, task: FunctionTask, sandbox: Sandbox | None) -> AcecoderQuestion:
        with UnitSamplers() as made:
            tester = made.add(load_test_sampler(self.test_sampler, **self.settings.get(self.test_sampler, {})))
            models = [made.add(load_code_sampler(s, **self.settings.get(s, {}))) for s in self.samplers]
            proxy = None
            if self.proxy != "ground-truth":
                proxy = made.add(load_code_sampler(self.proxy, **self.settings.get(self.proxy, {})))
            question = run_acecoder_task(
                task,
                tester,
                models,
                need_sandbox(sandbox, "AceCoder"),
                n_tests=self.n_tests,
                samples=self.samples,
                min_tests=self.min_tests,
                strict=self.strict,
                proxy=proxy,
                seed=self.seed,
                test_timeout=self.test_timeout,
            )
        return replace(question, llm=made.totals())


def run(
    tasks: Sequence[FunctionTask],
    sandbox: Sandbox | None,
    *,
    test_sampler: str = "deterministic",
    samplers: Sequence[str] = ("deterministic",),
    proxy: str = "ground-truth",
    sampler_settings: Mapping[str, Mapping[str, Any]] | None = None,
    n_tests: int = 20,
    samples: int = 16,
    min_tests: int = MIN_TESTS,
    strict: bool = True,
    seed: int = 0,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
    executor: Executor | None = None,
    on_result: Callable[[AcecoderQuestion], None] | None = None,
) -> AcecoderRun:
    """AceCoder over ``tasks``. ``test_sampler``, ``samplers`` and ``proxy`` are sampler
    specs (``proxy="ground-truth"``: the task's ground truth filters the tests);
    ``sampler_settings`` maps a spec to its settings. Each question's samplers are made
    where it runs (default: two threads over ``sandbox``) and closed after it.

    Raises:
        ConfigError: a spec names no sampler.
        SandboxError: the sandbox failed (an infrastructure error).
    """
    settings = {spec: dict(v) for spec, v in (sampler_settings or {}).items()}
    code_specs = [*samplers, *([] if proxy == "ground-truth" else [proxy])]
    check_sampler_specs(code_specs, [test_sampler], settings)
    work = AcecoderWork(
        test_sampler, tuple(samplers), proxy, settings, n_tests, samples, min_tests, strict, seed, test_timeout
    )
    questions = with_sandbox(executor, sandbox).map(work, tasks, on_result)
    return AcecoderRun(tuple(questions), min_tests, strict, add_llm_totals(q.llm for q in questions))
