"""AceCoder end to end, offline: proposed tests, proxy filtering, pass rates, pairs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym_repost.data.acecoder import is_preferred, run_acecoder_task
from gym_repost.data.base import TestSuite
from gym_repost.data.matrix import run_code_against_tests
from gym_repost.data.records import write_jsonl
from gym_repost.data.samplers import MutantCodeSampler, SplitAssertTestSampler
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, load_tasks

ROOT = Path(__file__).resolve().parents[2]


def test_the_proxy_removes_wrong_tests_and_pairs_follow_the_rule(
    humaneval_tasks: list[FunctionTask], sandbox: Sandbox
) -> None:
    task = humaneval_tasks[0]
    q = run_acecoder_task(task, SplitAssertTestSampler(), [MutantCodeSampler()], sandbox, n_tests=20, samples=12)
    assert q.dropped is None
    assert "perturbed" in q.proposed.labels and "perturbed" not in q.tests.labels
    assert q.removed_labels() == {"perturbed": q.proposed.labels.count("perturbed"), "task": 0, "docstring": 0}
    proxy = run_code_against_tests(sandbox, task, task.ground_truth, q.tests)
    assert proxy.pass_rate == 1.0
    rates = [p.pass_rate for p in q.programs]
    assert 1.0 in rates and len(q.programs) == len({p.code for p in q.programs})
    assert q.pairs and all(is_preferred(rates[i], rates[j]) for i, j in q.pairs)
    assert all(rates[j] > 0 for _, j in q.pairs)
    records = q.pair_records()
    assert records[0]["chosen_pass_rate"] > records[0]["rejected_pass_rate"] + 0.4
    assert records[0]["num_tests"] == len(q.tests) and records[0]["model"] == "mutants"


def test_a_question_left_with_too_few_tests_is_dropped(humaneval_tasks: list[FunctionTask], sandbox: Sandbox) -> None:
    q = run_acecoder_task(humaneval_tasks[2], SplitAssertTestSampler(), [MutantCodeSampler()], sandbox)
    assert q.dropped is not None and "fewer than 5" in q.dropped
    assert len(q.tests) < 5 and q.programs == () and q.pair_records() == []


def test_pairs_stay_within_one_models_samples(sandbox: Sandbox) -> None:
    task = {t.name: t for t in load_tasks(ROOT / "tasks" / "demo.jsonl")}["demo/shipping.estimate_shipping"]
    strong, weak = MutantCodeSampler(), MutantCodeSampler(include_ground_truth=False)
    weak.name = "mutants-only"
    q = run_acecoder_task(task, SplitAssertTestSampler(), [strong, weak], sandbox, samples=8)
    assert q.dropped is None and {p.model for p in q.programs} == {"mutants", "mutants-only"}
    assert all(q.programs[i].model == q.programs[j].model for i, j in q.pairs)
    strict = len(q.pairs)
    loose = run_acecoder_task(task, SplitAssertTestSampler(), [strong, weak], sandbox, samples=8, strict=False)
    assert len(loose.pairs) >= strict


def test_a_proxy_sampler_replaces_the_ground_truth(function_task: FunctionTask, sandbox: Sandbox) -> None:
    class Constant:
        name = "constant"

        def sample_code(self, task: FunctionTask, n: int, *, seed: int) -> list[str]:
            return ["def score(values, cap=100):\n    return 0"]

    class Fixed:
        name = "fixed"

        def sample_tests(self, task: FunctionTask, n: int, *, seed: int) -> TestSuite:
            return TestSuite(tuple(f"assert score([{i}]) == {10 * i}" for i in range(8)))

    # the constant proxy passes only "score([0]) == 0": one test left, the question is dropped
    q = run_acecoder_task(function_task, Fixed(), [MutantCodeSampler()], sandbox, proxy=Constant())
    assert q.tests.tests == ("assert score([0]) == 0",) and q.dropped is not None
    q = run_acecoder_task(function_task, Fixed(), [MutantCodeSampler()], sandbox)
    assert len(q.tests) == 8 and q.dropped is None


def test_acecoder_output_loads_as_a_trl_dataset(
    humaneval_tasks: list[FunctionTask], sandbox: Sandbox, tmp_path: Path, load_jsonl: Any
) -> None:
    questions = [
        run_acecoder_task(t, SplitAssertTestSampler(), [MutantCodeSampler()], sandbox, samples=8)
        for t in humaneval_tasks[:3]
    ]
    write_jsonl([r for q in questions for r in q.pair_records()], tmp_path / "pairs.jsonl")
    write_jsonl([q.tests_record() for q in questions], tmp_path / "tests.jsonl")
    ds = load_jsonl(tmp_path / "pairs.jsonl")
    assert len(ds) > 0 and {"prompt", "chosen", "rejected", "task_id", "source", "chosen_pass_rate"} <= set(
        ds.column_names
    )
    tests = load_jsonl(tmp_path / "tests.jsonl")
    assert tests["task_id"] == [t.id for t in humaneval_tasks[:3]]
    assert [d is None for d in tests["dropped"]] == [q.dropped is None for q in questions]
