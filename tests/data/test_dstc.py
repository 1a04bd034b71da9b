"""DSTC end to end, offline: samples, execution matrix, selection, DPO and KTO records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym_repost.data.base import TestSuite
from gym_repost.data.dstc import DstcResult, Selection, code_and_test, minimax_select, run_dstc_task
from gym_repost.data.matrix import CodeRun, ExecutionMatrix, TestOutcome
from gym_repost.data.records import write_jsonl
from gym_repost.data.samplers import MutantCodeSampler, SplitAssertTestSampler
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, load_tasks

ROOT = Path(__file__).resolve().parents[2]


def _result(task: FunctionTask, selection: Selection) -> DstcResult:
    codes = ("def score(values, cap=100):\n    return 1", "def score(values, cap=100):\n    return 2")
    tests = TestSuite(("assert score([]) == 1", "assert score([]) == 2"))
    rows = tuple(CodeRun((TestOutcome("pass"), TestOutcome("fail"))) for _ in codes)
    return DstcResult(task, codes, tests, ExecutionMatrix(rows, 2), selection)


def test_records_exist_only_for_the_pairs_that_exist(function_task: FunctionTask) -> None:
    full = _result(function_task, Selection(0, 0, 1, 1))
    dpo = full.dpo_record()
    assert dpo is not None and dpo["chosen"] == code_and_test(full.codes[0], "assert score([]) == 1")
    assert dpo["rejected"] == code_and_test(full.codes[1], "assert score([]) == 2")
    assert [r["label"] for r in full.kto_records()] == [True, False]
    chosen_only = _result(function_task, Selection(0, 0, None, None))
    assert chosen_only.dpo_record() is None and [r["label"] for r in chosen_only.kto_records()] == [True]
    rejected_only = _result(function_task, Selection(None, None, 1, 0))
    assert rejected_only.dpo_record() is None and [r["label"] for r in rejected_only.kto_records()] == [False]
    assert _result(function_task, Selection(None, None, None, None)).kto_records() == []


def test_a_response_is_the_code_a_fixed_sentence_and_the_test() -> None:
    text = code_and_test("def f():\n    return 1\n", "assert f() == 1")
    assert text == (
        "```python\ndef f():\n    return 1\n```\n\nHere is a test that checks the function above:\n\n"
        "```python\nassert f() == 1\n```"
    )


def _check_result(result: DstcResult) -> None:
    assert result.selection == minimax_select(result.execution.matrix)
    assert len(result.execution.rows) == len(result.codes)
    cc, ct, rt, rc = result.selection
    if cc is not None:
        assert result.execution.matrix[cc][ct] == 1  # type: ignore[index]
    if rt is not None:
        assert result.execution.matrix[rc][rt] == 0  # type: ignore[index]


def test_dstc_on_humaneval_selects_consistent_pairs(humaneval_tasks: list[FunctionTask], sandbox: Sandbox) -> None:
    results = [
        run_dstc_task(t, MutantCodeSampler(), SplitAssertTestSampler(), sandbox, samples=6, seed=0)
        for t in humaneval_tasks[:4]
    ]
    for result in results:
        _check_result(result)
        # the ground truth passes exactly the right tests: the tests and the binding are sound
        truth = result.execution.matrix[result.codes.index(result.task.ground_truth)]
        assert truth == [int(label != "perturbed") for label in result.tests.labels]
        cc, ct, _, _ = result.selection
        assert cc is not None and ct is not None
        assert result.execution.rows[cc].passed >= sum(truth)  # the chosen code passes the most tests
    assert sum(r.dpo_record() is not None for r in results) == 4


def test_dstc_on_demo_tasks_keeps_errors_apart_from_failures(sandbox: Sandbox) -> None:
    demo = {t.name: t for t in load_tasks(ROOT / "tasks" / "demo.jsonl")}
    result = run_dstc_task(
        demo["demo/inventory.Inventory.reserve"],
        MutantCodeSampler(),
        SplitAssertTestSampler(),
        sandbox,
        samples=8,
        seed=0,
    )
    _check_result(result)
    assert result.tests.style == "equivalence"
    counts = result.execution.outcome_counts()
    assert counts["fail"] > 0 and counts["error"] > 0  # mutants raise KeyError, NameError...
    assert sum(counts.values()) == len(result.codes) * len(result.tests)
    record = result.matrix_record()
    assert record["outcomes"] == result.execution.outcomes and record["selection"]["chosen_code"] is not None
    assert len(record["judged_outside"]) == len(result.tests)


def test_dstc_output_loads_as_trl_datasets(
    humaneval_tasks: list[FunctionTask], sandbox: Sandbox, tmp_path: Path, load_jsonl: Any
) -> None:
    results = [
        run_dstc_task(t, MutantCodeSampler(), SplitAssertTestSampler(), sandbox, samples=5, seed=1)
        for t in humaneval_tasks[10:13]
    ]
    dpo = [r for res in results if (r := res.dpo_record()) is not None]
    kto = [r for res in results for r in res.kto_records()]
    write_jsonl(dpo, tmp_path / "dpo.jsonl")
    write_jsonl(kto, tmp_path / "kto.jsonl")
    write_jsonl([res.matrix_record() for res in results], tmp_path / "matrices.jsonl")
    ds = load_jsonl(tmp_path / "dpo.jsonl")
    assert len(ds) == len(dpo) > 0
    assert {"prompt", "chosen", "rejected", "task_id", "task_name", "source", "repo"} <= set(ds.column_names)
    assert ds[0]["source"] == "humaneval" and ds[0]["task_id"] == results[0].task.id
    ds = load_jsonl(tmp_path / "kto.jsonl")
    assert {"prompt", "completion", "label"} <= set(ds.column_names) and set(ds["label"]) == {True, False}
    assert len(load_jsonl(tmp_path / "matrices.jsonl")) == 3


def test_the_library_run_over_a_task_set_matches_the_per_task_runs(sandbox: Sandbox) -> None:
    from gym_repost.data import dstc
    from gym_repost.executor import LocalExecutor

    tasks = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if t.kind == "function"][:3]
    seen: list[DstcResult] = []
    run = dstc.run(tasks, sandbox, samples=4, seed=3, executor=LocalExecutor(2), on_result=seen.append)
    alone = [run_dstc_task(t, MutantCodeSampler(), SplitAssertTestSampler(), sandbox, samples=4, seed=3) for t in tasks]
    assert [r.task.id for r in run.results] == [t.id for t in tasks]  # input order, whatever finished first
    assert sorted(r.task.id for r in seen) == sorted(t.id for t in tasks)
    assert run.dpo_records() == [r for res in alone if (r := res.dpo_record()) is not None]
    totals = run.totals()
    assert totals["tasks"] == 3 and totals["dpo_records"] == len(run.dpo_records())
    assert sum(totals["cells"].values()) == sum(len(r.codes) * len(r.tests) for r in run.results)
    assert run.llm is None  # the offline sampler runs no model
