"""DSTC: preference pairs from self-generated code and tests (Liu et al., 2024).

For each instruction (task), J code snippets and J tests are sampled and the J x J
execution matrix is computed (one sandboxed process per code, see
:mod:`gym_repost.data.matrix`). :func:`minimax_select` picks a chosen and a rejected
(code, test) pair; each response is the code, a fixed sentence and the test
(``prompts/code_and_test.j2``), so the model learns which code agrees with which test.

Records: DPO ``{prompt, chosen, rejected}`` only when all four indices exist; KTO
``{prompt, completion, label}``: ``label=True`` for the chosen pair whenever it exists,
``label=False`` for the rejected pair whenever it exists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from gym_repost.data.base import CodeSampler, TestSampler, TestSuite
from gym_repost.data.llm_samplers import LLMTotals, UnitSamplers, add_llm_totals
from gym_repost.data.matrix import DEFAULT_TEST_TIMEOUT, ExecutionMatrix, execution_matrix
from gym_repost.data.records import instruction_prompt, task_fields, task_seed
from gym_repost.data.samplers import check_sampler_specs, load_code_sampler, load_test_sampler
from gym_repost.errors import DataError
from gym_repost.executor import Executor, need_sandbox, with_sandbox
from gym_repost.prompting import render_prompt
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask

logger = logging.getLogger(__name__)


class Selection(NamedTuple):
    """Indices chosen by :func:`minimax_select`; None where there is no such index."""

    chosen_code: int | None
    chosen_test: int | None
    rejected_test: int | None
    rejected_code: int | None


def _check_matrix(matrix: Sequence[Sequence[int | bool]]) -> list[list[int]]:
    rows = [list(row) for row in matrix]
    width = len(rows[0]) if rows else 0
    for i, row in enumerate(rows):
        if len(row) != width:
            raise DataError(f"execution matrix row {i} has {len(row)} entries, row 0 has {width}")
        if any(v not in (0, 1) for v in row):
            raise DataError(f"execution matrix row {i} holds a value other than 0 or 1: {row}")
    return [[int(v) for v in row] for row in rows]


def _argbest(candidates: Sequence[int], key: Sequence[int], *, highest: bool) -> int | None:
    """The candidate with the highest (or lowest) key; the lowest index on ties."""
    best: int | None = None
    for i in candidates:
        if best is None or (key[i] > key[best] if highest else key[i] < key[best]):
            best = i
    return best


def minimax_select(matrix: Sequence[Sequence[int | bool]]) -> Selection:
    """DSTC's minimax selection over an execution matrix.

    Args:
        matrix: rows are codes, columns tests; 1 (or True) where the code passes the test.

    Returns:
        ``(chosen_code, chosen_test, rejected_test, rejected_code)``:

        * chosen code: the code that passes the most tests; None when no code passes any
          test (a code passing nothing is not "chosen");
        * chosen test: among the tests the chosen code passes, the one the fewest codes
          pass (the most demanding test the best code meets);
        * rejected test: among the tests at least one code fails, the one the most codes
          pass (the most lenient test that still rejects something); None when every code
          passes every test;
        * rejected code: among the codes that fail the rejected test, the one passing the
          fewest tests.

        Ties are broken by the lowest index. An empty matrix (no codes or no tests) gives
        all None.

    Raises:
        DataError: the matrix is not rectangular or holds values other than 0 and 1.
    """
    rows = _check_matrix(matrix)
    if not rows or not rows[0]:
        return Selection(None, None, None, None)
    codes, tests = range(len(rows)), range(len(rows[0]))
    code_passes = [sum(row) for row in rows]
    test_passes = [sum(row[k] for row in rows) for k in tests]
    chosen_code = _argbest(codes, code_passes, highest=True)
    chosen_test = None
    if chosen_code is not None and code_passes[chosen_code] > 0:
        chosen_test = _argbest([k for k in tests if rows[chosen_code][k]], test_passes, highest=False)
    else:
        chosen_code = None
    rejected_test = _argbest([k for k in tests if test_passes[k] < len(rows)], test_passes, highest=True)
    rejected_code = None
    if rejected_test is not None:
        rejected_code = _argbest([i for i in codes if not rows[i][rejected_test]], code_passes, highest=False)
    return Selection(chosen_code, chosen_test, rejected_test, rejected_code)


def code_and_test(code: str, test: str) -> str:
    """A DSTC response: the code, the fixed sentence, the test."""
    return render_prompt("gym_repost.data", "code_and_test.j2", code=code, test=test).rstrip("\n")


@dataclass(frozen=True)
class DstcResult:
    """One task's samples, execution matrix and selection."""

    task: FunctionTask
    codes: tuple[str, ...]
    tests: TestSuite
    execution: ExecutionMatrix
    selection: Selection
    llm: LLMTotals | None = None
    """What the task's samples cost (None when no model ran)."""

    def _fields(self) -> dict[str, Any]:
        return {**task_fields(self.task), "method": "dstc", "test_style": self.tests.style}

    def dpo_record(self) -> dict[str, Any] | None:
        """``{prompt, chosen, rejected}`` when all four indices exist, else None."""
        cc, ct, rt, rc = self.selection
        if cc is None or ct is None or rt is None or rc is None:
            return None
        return {
            "prompt": instruction_prompt(self.task, with_test=True),
            "chosen": code_and_test(self.codes[cc], self.tests.tests[ct]),
            "rejected": code_and_test(self.codes[rc], self.tests.tests[rt]),
            **self._fields(),
            "chosen_code": cc,
            "chosen_test": ct,
            "rejected_code": rc,
            "rejected_test": rt,
        }

    def kto_records(self) -> list[dict[str, Any]]:
        """KTO examples: the chosen pair (label True) and the rejected pair (label False),
        each when it exists."""
        cc, ct, rt, rc = self.selection
        prompt = instruction_prompt(self.task, with_test=True)
        records = []
        for code, test, label in ((cc, ct, True), (rc, rt, False)):
            if code is not None and test is not None:
                records.append(
                    {
                        "prompt": prompt,
                        "completion": code_and_test(self.codes[code], self.tests.tests[test]),
                        "label": label,
                        **self._fields(),
                        "code_index": code,
                        "test_index": test,
                    }
                )
        return records

    def matrix_record(self) -> dict[str, Any]:
        """The samples, the detailed outcomes and the selection, for inspection."""
        return {
            **task_fields(self.task),
            "codes": list(self.codes),
            "tests": list(self.tests.tests),
            "test_style": self.tests.style,
            "test_labels": list(self.tests.labels),
            "matrix": self.execution.matrix,
            "outcomes": self.execution.outcomes,
            "judged_outside": list(self.execution.judged_outside),
            "selection": self.selection._asdict(),
        }


def run_dstc_task(
    task: FunctionTask,
    code_sampler: CodeSampler,
    test_sampler: TestSampler,
    sandbox: Sandbox,
    *,
    samples: int = 8,
    seed: int = 0,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
) -> DstcResult:
    """Sample J = ``samples`` codes and tests for ``task``, execute, select.

    Raises:
        SandboxError: the sandbox failed (an infrastructure error).
    """
    codes = tuple(code_sampler.sample_code(task, samples, seed=task_seed(seed, task.id, "dstc-code")))
    suite = test_sampler.sample_tests(task, samples, seed=task_seed(seed, task.id, "dstc-tests"))
    execution = execution_matrix(sandbox, task, codes, suite, test_timeout=test_timeout)
    selection = minimax_select(execution.matrix)
    logger.debug("%s: %d codes x %d tests, selection %s", task.name, len(codes), len(suite), selection)
    return DstcResult(task, codes, suite, execution, selection)


@dataclass(frozen=True)
class DstcRun:
    """DSTC over a task set: each task's result, and the model calls it cost."""

    sampler: str
    samples: int
    results: tuple[DstcResult, ...]
    llm: LLMTotals | None = None
    """Summed ledgers and counts of the LLM samplers; None when no model ran."""

    def dpo_records(self) -> list[dict[str, Any]]:
        """One DPO record per task that has all four indices."""
        return [r for res in self.results if (r := res.dpo_record()) is not None]

    def kto_records(self) -> list[dict[str, Any]]:
        """The KTO records of every task."""
        return [r for res in self.results for r in res.kto_records()]

    def matrix_records(self) -> list[dict[str, Any]]:
        """Each task's samples, outcomes and selection."""
        return [res.matrix_record() for res in self.results]

    def totals(self) -> dict[str, Any]:
        """Counts over the run: tasks with a chosen / rejected pair, records, matrix cells."""
        cells = {"pass": 0, "fail": 0, "error": 0, "timeout": 0}
        for res in self.results:
            for key, value in res.execution.outcome_counts().items():
                cells[key] += value
        kto = self.kto_records()
        return {
            "tasks": len(self.results),
            "with_chosen": sum(res.selection.chosen_test is not None for res in self.results),
            "with_rejected": sum(res.selection.rejected_code is not None for res in self.results),
            "dpo_records": len(self.dpo_records()),
            "kto_desirable": sum(r["label"] for r in kto),
            "kto_undesirable": sum(not r["label"] for r in kto),
            "cells": cells,
            "judged_outside": sum(sum(res.execution.judged_outside) for res in self.results),
            "tests": sum(res.execution.n_tests for res in self.results),
        }


@dataclass(frozen=True)
class DstcWork:
    """The unit of work of :func:`run`: one task, its samplers made (and closed) where it runs."""

    sampler: str
    settings: Mapping[str, Any]
    samples: int
    seed: int
    test_timeout: float

    def __call__(self, task: FunctionTask, sandbox: Sandbox | None) -> DstcResult:
        with UnitSamplers() as made:
            code_sampler = made.add(load_code_sampler(self.sampler, **self.settings))
            test_sampler = made.add(load_test_sampler(self.sampler, **self.settings))
            result = run_dstc_task(
                task,
                code_sampler,
                test_sampler,
                need_sandbox(sandbox, "DSTC"),
                samples=self.samples,
                seed=self.seed,
                test_timeout=self.test_timeout,
            )
        return replace(result, llm=made.totals())


def run(
    tasks: Sequence[FunctionTask],
    sandbox: Sandbox | None,
    *,
    sampler: str = "deterministic",
    sampler_settings: Mapping[str, Any] | None = None,
    samples: int = 8,
    seed: int = 0,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
    executor: Executor | None = None,
    on_result: Callable[[DstcResult], None] | None = None,
) -> DstcRun:
    """DSTC over ``tasks``: one sampler spec (``deterministic``, ``llm:PROVIDER/MODEL``,
    ``KIND:ARG``) samples both codes and tests. Each task's samplers are made where the task
    runs (default: two threads over ``sandbox``) and closed after it.

    Raises:
        ConfigError: ``sampler`` names no sampler.
        SandboxError: the sandbox failed (an infrastructure error).
    """
    settings = dict(sampler_settings or {})
    check_sampler_specs([sampler], [sampler], {sampler: settings})
    work = DstcWork(sampler, settings, samples, seed, test_timeout)
    results = with_sandbox(executor, sandbox).map(work, tasks, on_result)
    return DstcRun(sampler, samples, tuple(results), add_llm_totals(r.llm for r in results))
