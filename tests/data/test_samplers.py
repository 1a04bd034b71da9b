"""Offline samplers, test splitting and perturbation, the sampler registry, prompts."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gym_repost.data import base as data_base
from gym_repost.data.assertions import (
    docstring_tests,
    parse_test_reply,
    perturb_test,
    propose_tests_prompt,
    split_statements,
    split_task_tests,
)
from gym_repost.data.base import CodeSampler, TestSuite
from gym_repost.data.records import instruction_prompt, sft_record
from gym_repost.data.samplers import (
    MutantCodeSampler,
    SplitAssertTestSampler,
    load_code_sampler,
    load_test_sampler,
    register_code_sampler,
)
from gym_repost.errors import ConfigError
from gym_repost.task import FunctionTask, load_tasks

ROOT = Path(__file__).resolve().parents[2]


def test_humaneval_check_becomes_plain_asserts_on_the_entry_point(humaneval_tasks: list[FunctionTask]) -> None:
    suite = split_task_tests(humaneval_tasks[0])
    assert suite.style == "assert"
    assert suite.tests[0] == "assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"
    assert suite.labels.count("task") == 7  # the seven asserts of check(candidate)
    assert "assert has_close_elements([1.0, 2.0, 3.0], 0.5) == False" in suite.tests  # from the docstring
    assert all("candidate" not in t for t in suite.tests)


def test_setup_before_an_assert_travels_with_it(humaneval_tasks: list[FunctionTask]) -> None:
    (loop,) = [t for t in split_task_tests(humaneval_tasks[32]).tests if "for _ in range(100)" in t]
    assert loop.startswith("import math\nimport random\nrng = random.Random(42)")
    assert "solution = find_zero(copy.deepcopy(coeffs))" in loop


def test_trivial_asserts_are_dropped() -> None:
    body = ast.parse("x = 1\nassert True, 'always'\nassert f(x) == 2\nassert x == 1").body
    assert split_statements(body, {"f"}, require_mention=True) == ["x = 1\nassert f(x) == 2"]


def test_a_repost_style_test_function_becomes_equivalence_statements(method_task: FunctionTask) -> None:
    demo = {t.name: t for t in load_tasks(ROOT / "tasks" / "demo.jsonl")}
    suite = split_task_tests(demo["demo/models.Product.normalize_sku"])
    assert suite.style == "equivalence"
    assert 'assert _same("TEA-0042")' in [t.replace("'", '"') for t in suite.tests]  # a helper reaching both
    reserve = split_task_tests(demo["demo/inventory.Inventory.reserve"])
    # "assert _state(original) == _state(candidate)" right after the setup reaches no code: dropped
    assert all("reserve" in t for t in reserve.tests) and len(reserve) == 4


def test_a_perturbed_test_expects_a_wrong_value() -> None:
    assert perturb_test("assert f([1, 2], 3) == True", {"f"}) == ["assert f([1, 2], 3) == False"]
    assert perturb_test("assert 'ab' == g(1)", {"g"}) == ["assert 'XXabXX' == g(1)"]
    assert perturb_test("x = 2\nassert f(x) == [x, 4]", {"f"}) == ["x = 2\nassert f(x) == [x, 5]"]
    assert perturb_test("assert f(1) < 3", {"f"}) == ["assert not f(1) < 3"]
    assert perturb_test("assert f(1), 'msg'", {"f"}) == ["assert not f(1), 'msg'"]
    assert perturb_test("for i in range(3):\n    assert f(i)", {"f"}) == []
    # equivalence: the side that does not reach the candidate gets the wrong input
    assert perturb_test("assert g(1) == g_new_implementation(1)", {"g_new_implementation"}) == [
        "assert g(2) == g_new_implementation(1)"
    ]


def test_doctest_examples_become_asserts(humaneval_tasks: list[FunctionTask]) -> None:
    assert docstring_tests(humaneval_tasks[0].target) == [
        "assert has_close_elements([1.0, 2.0, 3.0], 0.5) == False",
        "assert has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3) == True",
    ]


def test_the_mutant_sampler_is_seeded_and_mixes_right_and_wrong(function_task: FunctionTask) -> None:
    sampler = MutantCodeSampler()
    assert isinstance(sampler, CodeSampler)
    codes = sampler.sample_code(function_task, 6, seed=1)
    assert codes == sampler.sample_code(function_task, 6, seed=1)
    assert codes != sampler.sample_code(function_task, 6, seed=2)
    assert len(codes) == 6 and len(set(codes)) == 6
    assert function_task.ground_truth in codes
    assert "def score(values, cap=100):\n    return None\n" in codes
    assert (
        MutantCodeSampler(include_ground_truth=False)
        .sample_code(function_task, 6, seed=1)
        .count(function_task.ground_truth)
        == 0
    )
    assert len(sampler.sample_code(function_task, 1000, seed=0)) < 1000  # all mutants, no more


def test_the_split_sampler_mixes_task_tests_with_perturbed_ones(humaneval_tasks: list[FunctionTask]) -> None:
    sampler = SplitAssertTestSampler(perturbed_share=0.25)
    assert isinstance(sampler, data_base.TestSampler)  # imported this way: pytest collects Test* names
    suite = sampler.sample_tests(humaneval_tasks[0], 8, seed=3)
    assert suite == sampler.sample_tests(humaneval_tasks[0], 8, seed=3)
    assert len(suite) == 8 and suite.labels.count("perturbed") == 2
    assert set(suite.tests) - set(split_task_tests(humaneval_tasks[0]).tests) == {
        t for t, label in zip(suite.tests, suite.labels, strict=True) if label == "perturbed"
    }
    small = sampler.sample_tests(humaneval_tasks[2], 20, seed=0)  # 3 task tests, 3 perturbed copies
    assert len(small) == 6 and small.labels.count("perturbed") == 3
    with pytest.raises(ConfigError):
        SplitAssertTestSampler(perturbed_share=1.5)


def test_a_test_suite_keeps_labels_aligned() -> None:
    suite = TestSuite(("a", "b", "c"), "assert", ("task", "perturbed", "task"))
    assert suite.select([2, 0]) == TestSuite(("c", "a"), "assert", ("task", "task"))
    with pytest.raises(ValueError):
        TestSuite(("a",), "assert", ("task", "task"))


def test_samplers_are_picked_by_spec_and_other_kinds_can_register(function_task: FunctionTask) -> None:
    assert isinstance(load_code_sampler("deterministic"), MutantCodeSampler)
    assert isinstance(load_test_sampler("deterministic"), SplitAssertTestSampler)
    with pytest.raises(ConfigError, match="known kinds: deterministic, llm"):
        load_code_sampler("gpt:4o-mini")
    with pytest.raises(ConfigError, match="takes no argument"):
        load_test_sampler("deterministic:x")

    class Fixed:
        name = "fixed"

        def __init__(self, code: str) -> None:
            self.code = code

        def sample_code(self, task: FunctionTask, n: int, *, seed: int) -> list[str]:
            return [self.code] * n

    register_code_sampler("fixed-test-only", Fixed)
    sampler = load_code_sampler("fixed-test-only:def score(values, cap=100): return 0")
    assert sampler.sample_code(function_task, 2, seed=0) == ["def score(values, cap=100): return 0"] * 2


def test_a_model_reply_is_parsed_into_assert_tests(function_task: FunctionTask) -> None:
    reply = (
        "Here are tests:\n```python\nimport math\nassert score([1, 2]) == 30\nassert True\n"
        "print('hi')\nassert math.floor(score([0.25])) == 2\nassert other(1) == 2\n"
        "assert score([1, 2]) == 30\n```"
    )
    assert parse_test_reply(reply, function_task.target) == [
        "import math\nassert score([1, 2]) == 30",
        "import math\nassert math.floor(score([0.25])) == 2",
    ]
    broken = "assert score([1]) == 10\nassert score([ == 3\nassert score([2]) == 20"
    assert parse_test_reply(broken, function_task.target) == ["assert score([1]) == 10", "assert score([2]) == 20"]
    prompt = propose_tests_prompt(function_task, 20)
    assert "write 20 test cases" in prompt and "`score`" in prompt and "# Body removed" in prompt


def test_no_shipped_task_prompt_shows_the_ground_truth(
    humaneval_tasks: list[FunctionTask], repost_eval_tasks: list[FunctionTask]
) -> None:
    tasks = [*humaneval_tasks, *load_tasks(ROOT / "tasks" / "demo.jsonl"), *repost_eval_tasks]
    demo = [t for t in tasks if t.name == "demo/pricing.apply_discount"][0]
    for task in tasks:  # neither the published context nor the prompt holds the answer
        assert task.ground_truth.strip() not in task.context, task.name
        assert task.ground_truth.strip() not in instruction_prompt(task, with_test=True), task.name
    prompt = instruction_prompt(demo)
    assert "## shopkit/pricing.py" in prompt and "## shopkit/constants.py" in prompt
    assert prompt.rstrip().endswith("Reply with the function in one ```python block.")


def test_sft_records_in_both_formats(function_task: FunctionTask) -> None:
    messages = sft_record(function_task, "def score(values, cap=100):\n    return 0", "messages", system="Be exact.")
    assert [m["role"] for m in messages["messages"]] == ["system", "user", "assistant"]
    assert messages["messages"][2]["content"] == "```python\ndef score(values, cap=100):\n    return 0\n```"
    assert messages["task_id"] == function_task.id and messages["source"] == "test"
    plain = sft_record(function_task, "def score(values, cap=100):\n    return 0", "prompt-completion")
    assert set(plain) >= {"prompt", "completion", "task_id", "task_name", "repo", "qualname"}


def test_importing_the_data_package_pulls_in_no_heavy_dependency() -> None:
    code = (
        "import sys, gym_repost, gym_repost.data.dstc, gym_repost.data.acecoder, gym_repost.data.rejection, "
        "gym_repost.data.samplers\n"
        "print(sorted(m for m in ('docker', 'openai', 'anthropic', 'ray', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_a_registered_test_sampler_is_loaded_by_its_spec(function_task: FunctionTask) -> None:
    from gym_repost.data.samplers import load_test_sampler, register_test_sampler

    class Fixed:
        name = "fixed-tests"

        def __init__(self, argument: str) -> None:
            self.tests = tuple(t.strip() for t in argument.split(";"))

        def sample_tests(self, task: FunctionTask, n: int, *, seed: int) -> TestSuite:
            return TestSuite(self.tests[:n])

    register_test_sampler("fixed-tests-only", Fixed)
    sampler = load_test_sampler("fixed-tests-only:assert score([]) == 0; assert score([1]) == 10")
    assert sampler.sample_tests(function_task, 5, seed=0).tests == ("assert score([]) == 0", "assert score([1]) == 10")
    with pytest.raises(ConfigError, match="nope"):
        load_test_sampler("nope:x")
