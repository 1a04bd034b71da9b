"""LLM samplers and the LLM repairer: the real SDKs against the scripted server on loopback.

The server plays a model: code requests, test requests and repair requests each get the
next reply of their own queue, so the replies (and the data they must give) are fixed
whatever the order of the requests. Faults are injected by the server, never by
patching an SDK. The commands run as a user runs them, in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gym_repost.data.dstc import code_and_test
from gym_repost.data.llm_samplers import LLMCodeSampler, LLMRepairer, LLMTestSampler, llm_totals
from gym_repost.data.records import code_response
from gym_repost.data.rejection import PolicyRepairer, load_repairer
from gym_repost.data.samplers import load_code_sampler, load_test_sampler
from gym_repost.errors import ConfigError
from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.llm.scripted_server import Fault, RecordedRequest, Reply, ScriptedLLMServer
from gym_repost.policy import load_policy
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, load_tasks, save_tasks

pytest.importorskip("openai", reason='pip install "gym-repost[openai]"')

pytestmark = pytest.mark.usefixtures("llm_keys")

ROOT = Path(__file__).resolve().parents[2]
FAST = {"timeout": 5.0, "backoff_initial": 0.05, "backoff_max": 0.2}

ZERO = "def apply_discount(price, percent, currency=DEFAULT_CURRENCY):\n    return Decimal(0)\n"
NO_CAP = (
    "def apply_discount(price, percent, currency=DEFAULT_CURRENCY):\n"
    "    pct = Decimal(str(percent))\n"
    "    if price < 0:\n"
    '        raise PricingError(f"negative price: {price}")\n'
    "    return quantize(price * (Decimal(100) - pct) / Decimal(100), currency)\n"
)
UNCHANGED = "def apply_discount(price, percent, currency=DEFAULT_CURRENCY):\n    return price\n"
NO_CODE = "I would rather not write this function."

WRONG_A = "def score(values, cap=100):\n    return sum(values)\n"
WRONG_B = "def score(values, cap=100):\n    return 0\n"
FIX_SCORE = (
    "def score(values, cap=100):\n    return math.floor(sum(clamp(v * SCALE, 0, cap) for v in values if v >= 0))\n"
)


def block(code: str) -> str:
    return f"Here it is.\n```python\n{code}```\nDone."


class Model:
    """A responder: one queue of replies per kind of request (code, tests, repair, eval)."""

    def __init__(self, **queues: list[str]) -> None:
        self.queues = {kind: list(replies) for kind, replies in queues.items()}
        self.seen: dict[str, list[RecordedRequest]] = {}

    @staticmethod
    def kind(request: RecordedRequest) -> str:
        text = request.last_text()
        if "Do not write the function: write" in text:
            return "tests"
        if "A previous answer failed the tests" in text:
            return "repair"
        if "Reply with the function in one ```python block." in text:
            return "code"
        return "eval"

    def __call__(self, request: RecordedRequest) -> Reply:
        kind = self.kind(request)
        self.seen.setdefault(kind, []).append(request)
        queue = self.queues.get(kind, [])
        return Reply(queue.pop(0) if queue else f"no scripted {kind} reply left")


@pytest.fixture(scope="module")
def discount() -> FunctionTask:
    task = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if t.name == "demo/pricing.apply_discount"][0]
    assert isinstance(task, FunctionTask)
    return task


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", "data", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def row(stdout: str, name: str) -> str:
    """The value of a count table's row."""
    line = next(ln for ln in stdout.splitlines() if name in ln)
    return line.split("│")[-2].strip()


def _flat(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------- DSTC

DSTC_TESTS = """Tests:
```python
from decimal import Decimal
assert apply_discount(Decimal("19.99"), 15) == Decimal("16.99")
assert apply_discount(Decimal("100"), 95) == Decimal("20.00")
assert True
assert Decimal("1") == Decimal("1.0")
assert apply_discount(Decimal("10.00"), 0) == Decimal("9.00")
assert apply_discount(Decimal("10.00"), 0) == Decimal("10.00")
assert apply_discount(Decimal("5.00"), 10) == Decimal("4.50")
```"""
IMPORT = "from decimal import Decimal\n"
T0 = IMPORT + "assert apply_discount(Decimal('19.99'), 15) == Decimal('16.99')"
T1 = IMPORT + "assert apply_discount(Decimal('100'), 95) == Decimal('20.00')"
T2 = IMPORT + "assert apply_discount(Decimal('10.00'), 0) == Decimal('9.00')"
T3 = IMPORT + "assert apply_discount(Decimal('10.00'), 0) == Decimal('10.00')"


def test_dstc_with_an_llm_sampler_retries_faults_and_selects_by_hand(
    server: ScriptedLLMServer, discount: FunctionTask, tmp_path: Path, load_jsonl: Any
) -> None:
    save_tasks([discount], tmp_path / "demo.jsonl")
    model = Model(code=[block(ZERO), block(discount.ground_truth), NO_CODE, block(NO_CAP)], tests=[DSTC_TESTS])
    server.responder = model
    server.push(Fault.rate_limit(0.1), Fault.server_error(500))  # the first request is retried twice
    out = tmp_path / "out"
    args = (
        "dstc",
        str(tmp_path / "demo.jsonl"),
        "-o",
        str(out / "dpo.jsonl"),
        "--kto",
        str(out / "kto.jsonl"),
        "--matrices",
        str(out / "matrices.jsonl"),
        "--sampler",
        "llm:openai-compatible/scripted-coder",
        "--base-url",
        server.openai_base_url,
        "--temperature",
        "0.7",
        "-n",
        "4",
        "-w",
        "1",
    )
    result = cli(*args)
    assert result.returncode == 0, result.stderr

    # J=4 codes x J=4 tests (the fifth target assert is cut; `assert True` and the assert
    # that does not call apply_discount are not tests of it):
    #   ZERO      [0 0 0 0]   passes nothing
    #   truth     [1 1 0 1]   3
    #   no code   [E E E E]   the empty sample: every outcome is an error
    #   no cap    [1 0 0 1]   2  (fails the capped 95% discount)
    # codes passing each test: 2 1 0 2. Chosen code: the truth (3); chosen test: the one
    # it passes that the fewest codes pass, T1 (1). Rejected test: the most passed one
    # that some code fails, T0 (2, tie with T3 broken by index); rejected code: among
    # those failing T0, the one passing fewest, ZERO (0, tie with the empty one by index).
    matrices = [json.loads(line) for line in (out / "matrices.jsonl").read_text().splitlines()]
    assert len(matrices) == 1
    m = matrices[0]
    truth = discount.ground_truth.strip("\n") + "\n"
    assert m["codes"] == [ZERO, truth, "", NO_CAP] and m["tests"] == [T0, T1, T2, T3]
    assert m["test_style"] == "assert" and m["test_labels"] == ["llm"] * 4
    assert m["matrix"] == [[0, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 1]]
    assert m["outcomes"][2] == ["error"] * 4 and m["outcomes"][0] == ["fail"] * 4
    assert m["selection"] == {"chosen_code": 1, "chosen_test": 1, "rejected_test": 0, "rejected_code": 0}

    dpo, kto = load_jsonl(out / "dpo.jsonl"), load_jsonl(out / "kto.jsonl")
    assert len(dpo) == 1
    assert dpo[0]["chosen"] == code_and_test(truth, T1) and dpo[0]["rejected"] == code_and_test(ZERO, T0)
    assert dpo[0]["task_name"] == "demo/pricing.apply_discount" and "Then write a test" in dpo[0]["prompt"]
    assert [(r["label"], r["code_index"], r["test_index"]) for r in kto] == [(True, 1, 1), (False, 0, 0)]

    # 5 answered calls (4 codes, 1 test request), the first after a 429 and a 500.
    assert row(result.stdout, "LLM calls (cache hits)") == "5 (0)"
    assert row(result.stdout, "LLM retries / failed calls") == "2 / 0"
    assert row(result.stdout, "replies without code") == "1"
    assert row(result.stdout, "DPO records") == "1"
    tokens_in, tokens_out = (int(v) for v in row(result.stdout, "LLM tokens in / out").split(" / "))
    assert tokens_in > 1000 and tokens_out > 50
    assert len(server.requests) == 7
    assert len(model.seen["code"]) == 4 and len(model.seen["tests"]) == 1
    sent = [r.body for r in server.requests if Model.kind(r) == "code"]
    assert len(sent) == 6 and len({b["seed"] for b in sent}) == 4  # the first one sent three times
    assert {b["model"] for b in sent} == {"scripted-coder"} and {b["temperature"] for b in sent} == {0.7}
    assert "write 4 test cases" in model.seen["tests"][0].last_text()

    again = cli(*args)  # the response cache answers every call of a rerun
    assert again.returncode == 0, again.stderr
    assert row(again.stdout, "LLM calls (cache hits)") == "5 (5)" and len(server.requests) == 7
    assert load_jsonl(out / "dpo.jsonl")[0]["chosen"] == dpo[0]["chosen"]


# --------------------------------------------------------------------------- AceCoder

ACECODER_TESTS = """```python
from decimal import Decimal

assert apply_discount(Decimal("19.99"), 15) == Decimal("16.99")
assert apply_discount(Decimal("100"), 95) == Decimal("20.00")
assert apply_discount(Decimal("10.00"), 0) == Decimal("10.00")
assert apply_discount(Decimal("80.00"), "12.5") == Decimal("70.00")
assert apply_discount(Decimal("1234"), 10, "JPY") == Decimal("1111")
assert apply_discount(Decimal("59.90"), 20.5, "USD") == Decimal("47.62")
assert apply_discount(Decimal("10.00"), 0) == Decimal("9.00")
```"""


def test_acecoder_with_llm_tests_and_llm_programs_in_the_anthropic_format(
    server: ScriptedLLMServer, discount: FunctionTask, tmp_path: Path, load_jsonl: Any
) -> None:
    save_tasks([discount], tmp_path / "demo.jsonl")
    commented = discount.ground_truth.replace(
        "    pct = Decimal(str(percent))", "    pct = Decimal(str(percent))  # as text: no float noise"
    )
    server.responder = model = Model(
        tests=[ACECODER_TESTS],
        code=[block(discount.ground_truth), block(commented), block(NO_CAP), block(UNCHANGED), NO_CODE],
    )
    spec = "llm:anthropic/claude-scripted"
    result = cli(
        "acecoder",
        str(tmp_path / "demo.jsonl"),
        "-o",
        str(tmp_path / "pairs.jsonl"),
        "--tests-output",
        str(tmp_path / "tests.jsonl"),
        "--test-sampler",
        spec,
        "--sampler",
        spec,
        "--base-url",
        server.anthropic_base_url,
        "--tests",
        "7",
        "--samples",
        "5",
        "-w",
        "1",
        env={"ANTHROPIC_API_KEY": "sk-test-anthropic"},
    )
    assert result.returncode == 0, result.stderr

    # The proxy (the ground truth) fails the last test (9.00): 6 of 7 are kept. The
    # commented copy of the truth is a duplicate. Pass rates over the 6 kept tests:
    # truth 6/6, no cap 5/6 (fails the capped 95%), unchanged 1/6 (only 10.00 at 0%),
    # no code 0/6. Strict pairs (chosen > rejected + 0.4, chosen > 0.8, rejected > 0):
    # truth over unchanged and no cap over unchanged; never over the 0/6 sample, and
    # truth over no cap misses the gap (1 - 5/6 < 0.4).
    tests = load_jsonl(tmp_path / "tests.jsonl")
    assert (tests[0]["proposed"], tests[0]["kept"], tests[0]["dropped"]) == (7, 6, None)
    assert tests[0]["removed_labels"] == {"llm": 1} and tests[0]["test_style"] == "assert"
    assert tests[0]["tests"][4] == IMPORT + "assert apply_discount(Decimal('1234'), 10, 'JPY') == Decimal('1111')"
    pairs = load_jsonl(tmp_path / "pairs.jsonl")
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [
        (code_response(discount.ground_truth), code_response(UNCHANGED)),
        (code_response(NO_CAP), code_response(UNCHANGED)),
    ]
    assert pairs["chosen_pass_rate"] == pytest.approx([1.0, 5 / 6])
    assert pairs["rejected_pass_rate"] == pytest.approx([1 / 6, 1 / 6])
    assert set(pairs["model"]) == {"anthropic/claude-scripted"} and set(pairs["num_tests"]) == {6}
    assert row(result.stdout, "programs (deduplicated, kept questions)") == "4"
    assert row(result.stdout, "LLM calls (cache hits)") == "6 (0)"
    assert row(result.stdout, "replies without code") == "1"

    sent = server.requests
    assert {r.api for r in sent} == {"anthropic"} and {r.path for r in sent} == {"/v1/messages"}
    assert all("sk-test-anthropic" in json.dumps(r.headers) for r in sent)
    assert "write 7 test cases" in model.seen["tests"][0].last_text()
    assert "temperature" not in sent[0].body and sent[0].body["model"] == "claude-scripted"


# --------------------------------------------------------------------------- rejection sampling


@pytest.fixture
def llm_run(
    tmp_path: Path, function_task: FunctionTask, sandbox: Sandbox, server: ScriptedLLMServer
) -> tuple[Path, Model]:
    """An evaluation run of the LLM policy (n=2) whose two answers both fail."""
    server.responder = model = Model(eval=[block(WRONG_A), block(WRONG_B)])
    save_tasks([function_task], tmp_path / "tasks.jsonl")
    spec = "llm:openai-compatible/scripted-coder"
    config = RunConfig(
        tasks=str(tmp_path / "tasks.jsonl"), tasks_digest=tasks_digest([function_task]), policy=spec, n=2
    )
    factory = load_policy(spec, base_url=server.openai_base_url, **FAST)
    summary = evaluate([function_task], factory, config, RunDir(tmp_path / "run"), sandbox)
    assert summary["episodes"] == 2 and len(model.seen["eval"]) == 2
    return tmp_path / "run", model


def test_rejection_debugs_failed_llm_solutions_with_the_runs_own_model(
    llm_run: tuple[Path, Model], server: ScriptedLLMServer, tmp_path: Path, load_jsonl: Any
) -> None:
    run, model = llm_run
    model.queues["repair"] = []

    def repair(request: RecordedRequest) -> Reply:
        if Model.kind(request) != "repair":
            return model(request)
        model.seen.setdefault("repair", []).append(request)
        return Reply(block(FIX_SCORE) if WRONG_A in request.last_text() else NO_CODE)

    server.responder = repair
    out = tmp_path / "sft.jsonl"
    result = cli("rejection", str(run), "-o", str(out), "--debug-failures", "--base-url", server.openai_base_url)
    assert result.returncode == 0, result.stderr
    assert "0/1 (0.0%)" in result.stdout and "1/1 (100.0%)" in result.stdout
    assert "failed samples: 2; repair attempts: 2; repaired and passing: 1" in _flat(result.stdout)
    assert row(result.stdout, "LLM calls (cache hits)") == "2 (0)"
    assert row(result.stdout, "replies without code") == "1"

    records = load_jsonl(out)
    sample_a = next(e.sample for e in RunDir(run).episodes() if e.code == WRONG_A)
    assert len(records) == 1 and records[0]["origin"] == "repaired" and records[0]["sample"] == sample_a
    assert records[0]["messages"][-1]["content"] == code_response(FIX_SCORE)
    asked = [r.last_text() for r in model.seen["repair"]]
    assert len(asked) == 2
    for text in asked:  # each failed answer was shown with its own test report
        assert "A previous answer failed the tests" in text and "Tests failed" in text
        assert (WRONG_A in text) != (WRONG_B in text)
        assert "The body of `score` in `tiny/score.py` has been removed" in text


# --------------------------------------------------------------------------- the samplers themselves


def test_code_and_test_samplers_in_the_library(server: ScriptedLLMServer, function_task: FunctionTask) -> None:
    server.responder = Model(
        code=[block(FIX_SCORE), "```\n\n```", "no code at all"],
        tests=[
            "```python\nassert score([1]) == 10\nassert score([2]) == 20\n```",
            "```python\nassert score([2]) == 20\nassert score([]) == 0\nassert score([3]) == 30\n```",
        ],
    )
    code = load_code_sampler("llm:openai-compatible/m", base_url=server.openai_base_url, **FAST)
    tests = load_test_sampler("llm:openai-compatible/m", base_url=server.openai_base_url, **FAST)
    assert isinstance(code, LLMCodeSampler) and isinstance(tests, LLMTestSampler) and code.name == "openai-compatible/m"
    try:
        assert code.sample_code(function_task, 3, seed=10) == [FIX_SCORE, "", ""]
        assert [r.body["seed"] for r in server.requests] == [10, 11, 12]
        suite = tests.sample_tests(function_task, 3, seed=5)  # two replies: 2 tests, then 1 more that is new
        assert suite.tests == ("assert score([1]) == 10", "assert score([2]) == 20", "assert score([]) == 0")
        assert suite.style == "assert" and suite.labels == ("llm",) * 3
        assert [r.body["seed"] for r in server.requests[3:]] == [5, 6]
        found = llm_totals([code, tests, code, None])
        assert found is not None
        totals, counts = found
        assert totals.calls == 5 and totals.retries == 0 and totals.usage.input_tokens > 0
        assert counts == {"replies_without_code": 2}
    finally:
        code.close()
        tests.close()


def test_specs_settings_and_missing_keys_are_clear_errors(
    function_task: FunctionTask, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="needs a model"):
        load_code_sampler("llm:")
    with pytest.raises(ConfigError, match="expected PROVIDER/MODEL"):
        load_test_sampler("llm:gpt-4o")
    with pytest.raises(ConfigError, match="runs no model"):
        load_code_sampler("deterministic", base_url="http://localhost:8000/v1")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigError, match="set the OPENAI_API_KEY environment variable"):
        load_code_sampler("llm:openai/gpt-4o-mini")
    with pytest.raises(ConfigError, match="needs a base URL"):
        load_test_sampler("llm:openai-compatible/m")
    with pytest.raises(ConfigError, match="applies to llm:PROVIDER/MODEL repair policies"):
        load_repairer("oracle", {}, sandbox, base_url="http://localhost:8000/v1")
    url = "http://127.0.0.1:9/v1"
    repairer = load_repairer(
        "llm:openai-compatible/m",
        {"mode": "generate-and-repair", "docstring": "removed", "temperature": 0.2},
        sandbox,
        base_url=url,
    )
    assert isinstance(repairer, LLMRepairer) and repairer.client.config.temperature == 0.2
    repairer.close()
    agentic = load_repairer("llm:openai-compatible/m", {"mode": "agentic"}, sandbox, base_url=url)
    assert isinstance(agentic, PolicyRepairer) and agentic.factory.options["base_url"] == url

    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    save_tasks([function_task], tmp_path / "t.jsonl")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_repost.cli",
            "data",
            "dstc",
            str(tmp_path / "t.jsonl"),
            "-o",
            str(tmp_path / "x.jsonl"),
            "--sampler",
            "llm:openai/gpt-4o-mini",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 2 and "set the OPENAI_API_KEY environment variable" in _flat(result.stderr)
    result = cli("acecoder", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "x.jsonl"), "--base-url", "http://x")
    assert result.returncode == 2 and "apply to llm:PROVIDER/MODEL samplers" in _flat(result.stderr)
    assert not (tmp_path / "x.jsonl").exists()
