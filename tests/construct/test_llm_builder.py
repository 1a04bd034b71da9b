"""The LLM builder end to end: a scripted model server on loopback, the real SDKs, the real sandbox.

The model's replies are scripted (no LLM is reachable); everything else is real: the
pipeline's deterministic stages, the construction tools, the sandbox runs, the quality
checks, the retries of injected faults, the exchange log and the CLI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from llm_builds import DEMO, RATES_MODULE, RATES_SCRIPT, RATES_TESTS, block, cli_llm_build, verdicts

from gym_repost.construct.builder import DeterministicBuilderSettings
from gym_repost.construct.llm_builder import LLMBuilderBudgets, LLMBuildSession, parse_reply, parse_verdict
from gym_repost.construct.pipeline import BuildResult, BuildSettings, build_function_tasks
from gym_repost.construct.quality import Judgement, judged_drop_reason
from gym_repost.harness.validation import validate_task
from gym_repost.llm import llm_config
from gym_repost.llm.scripted_server import Fault, Reply, ScriptedLLMServer
from gym_repost.sandbox import Sandbox

pytestmark = pytest.mark.usefixtures("llm_keys")

ROOT = Path(__file__).resolve().parents[2]
FAST = {"timeout": 2.0, "backoff_initial": 0.05, "backoff_max": 0.2}


def build(
    server: ScriptedLLMServer,
    sandbox: Sandbox,
    tmp_path: Path,
    *,
    source: Path = DEMO / "repo",
    only: tuple[str, ...] = ("RateClient.fetch_rates",),
    api: str = "openai-compatible",
    split: str = "train",
    llm: dict[str, Any] | None = None,
) -> BuildResult:
    url = server.anthropic_base_url if api == "anthropic" else server.openai_base_url
    config = llm_config(f"{api}/test-model", base_url=url, **{**FAST, **(llm or {})})
    settings = BuildSettings(
        split=split,
        only=only,
        trace=False,
        mutants=4,
        workers=1,  # type: ignore[arg-type]
        test_executions=300,
        licenses="any",
    )
    with LLMBuildSession(
        config,
        LLMBuilderBudgets(),
        log_path=tmp_path / "tasks.jsonl.llm.jsonl",
        deterministic=DeterministicBuilderSettings(test_executions=300, attempts=1),
    ) as builder:
        result = build_function_tasks(str(source), LLMBuildSession.settings_for(settings), sandbox, builder.policy)
        result.llm_usage = builder.usage()
    return result


def log_lines(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "tasks.jsonl.llm.jsonl").read_text().splitlines()]


def steps(result: BuildResult) -> list[tuple[str | None, bool]]:
    ((_, outcome),) = result.outcomes
    return [(s["tool"], s["ok"]) for s in outcome.steps]


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("split", "unchanged", "functionality", "correct", "reason"),
    [
        ("eval", True, "same", True, None),
        ("eval", True, "yes", True, None),
        ("eval", False, "yes", True, "target AST changed (eval split)"),
        ("eval", True, "same", False, "tests judged incorrect"),
        ("eval", True, "no", True, "judged not equivalent"),
        ("train", False, "yes", True, None),
        ("train", False, "same", True, None),
        ("train", False, "no", True, "judged not equivalent"),
        ("train", True, "same", False, "tests judged incorrect"),
    ],
)
def test_the_keep_rule_per_split(
    split: str, unchanged: bool, functionality: str, correct: bool, reason: str | None
) -> None:
    judgement = Judgement(functionality, correct)  # type: ignore[arg-type]
    assert judged_drop_reason(split, unchanged, judgement) == reason  # type: ignore[arg-type]


def test_replies_are_read_for_code_packages_and_verdicts() -> None:
    text = "Fixed.\n```requirements\n# needed\nrequests==2.32.0\npyyaml\n```\n```python\nimport yaml\n```\n"
    assert parse_reply(text) == ("import yaml\n", ["requests==2.32.0", "pyyaml"])
    assert parse_reply("no code here") == (None, [])
    assert parse_verdict("It looks fine.\nVERDICT: **Yes**", ("same", "yes", "no")) == "yes"
    assert parse_verdict("VERDICT: NO\n...\nVERDICT: SAME", ("same", "yes", "no")) == "same"
    assert parse_verdict("VERDICT: maybe", ("same", "yes", "no")) is None


# --------------------------------------------------------------------------- builds


def test_the_http_api_method_becomes_a_task(server: ScriptedLLMServer, sandbox: Sandbox, tmp_path: Path) -> None:
    server.push(Reply(block(RATES_MODULE)), Reply(block(RATES_TESTS, "The tests.")), *verdicts())
    result = build(server, sandbox, tmp_path)
    assert result.infra_errors == [] and result.drops == []
    (task,) = result.tasks
    assert task.target.qualname == "RateClient.fetch_rates" and task.metadata.split == "train"
    assert "class FakeRateService" in task.evaluation.script and "mock.patch(" in task.evaluation.script
    validation = validate_task(sandbox, task, mutants=4)
    assert validation.passed and not validation.accepts_do_nothing
    checks = task.metadata.checks
    assert checks["target unchanged (AST)"] and checks["judged functionality"] == "same"
    assert checks["tests judged correct"] and checks["branch_coverage"] == 1.0
    assert steps(result) == [
        ("write_script", True),
        ("run_script", True),
        ("write_script", True),
        ("run_script", True),
        ("submit", True),
    ]
    aggregate = server.requests[0].text()
    assert "the target touches the outside world: network (urllib.request)" in aggregate
    assert "A draft assembled by static analysis" in aggregate
    assert "# Sandboxed module for shopkit/rates.py::RateClient.fetch_rates" in aggregate
    assert "fetch_rates_new_implementation" in server.requests[1].text()
    assert "VERDICT: SAME" in server.requests[2].text() and "VERDICT: CORRECT" in server.requests[3].text()
    logged = log_lines(tmp_path)
    assert [e["step"] for e in logged] == ["aggregate", "tests", "judge functionality", "judge tests"]
    assert {e["candidate"] for e in logged} == {"shopkit/rates.py::RateClient.fetch_rates"}
    assert all(e["response"]["usage"]["input_tokens"] > 0 and e["error"] is None for e in logged)
    usage = result.statistics()["llm"]
    assert usage["llm_calls"] == 4 and usage["retries"] == 0 and usage["input_tokens"] > 0
    ((_, outcome),) = result.outcomes
    assert outcome.stats["llm_calls"] == 4 and outcome.stats["asked aggregate"] == 1


def test_a_failing_script_is_debugged_from_its_error(
    server: ScriptedLLMServer, sandbox: Sandbox, tmp_path: Path
) -> None:
    broken = RATES_MODULE.replace("import copy\n", "import copy\nfrom shopkit.money import quantize\n")
    asks_for_own_package = block(broken) + "```requirements\nshopkit\n```\n"
    server.push(
        Reply(asks_for_own_package),
        Reply(block(RATES_MODULE, "Removed the import.")),
        Reply(block(RATES_TESTS)),
        *verdicts(),
    )
    result = build(server, sandbox, tmp_path, api="anthropic")
    assert len(result.tasks) == 1 and result.drops == []
    assert steps(result)[:6] == [
        ("install", False),
        ("write_script", True),
        ("run_script", True),
        ("write_script", True),
        ("run_script", True),
        ("write_script", True),
    ]
    ((_, outcome),) = result.outcomes
    assert "repository's own package" in outcome.steps[0]["observation"]
    assert "No module named 'shopkit'" in outcome.steps[2]["observation"]
    debug = server.requests[1]
    assert debug.api == "anthropic" and "fails when run as a module" in debug.text()
    assert "No module named 'shopkit'" in debug.text() and "from shopkit.money import quantize" in debug.text()
    assert outcome.stats["asked debug"] == 1
    assert [e["step"] for e in log_lines(tmp_path)][:3] == ["aggregate", "debug", "tests"]


def test_faults_are_retried_and_the_build_completes(
    server: ScriptedLLMServer, sandbox: Sandbox, tmp_path: Path
) -> None:
    server.push(
        Fault.rate_limit(0.1),
        Reply(block(RATES_MODULE)),
        Fault.server_error(),
        Fault.empty(),
        Reply(block(RATES_TESTS)),
        Fault.server_error(503),
        *verdicts(),
    )
    result = build(server, sandbox, tmp_path)
    assert len(result.tasks) == 1 and result.infra_errors == [] and result.drops == []
    usage = result.statistics()["llm"]
    assert usage["retries"] == 4 and usage["llm_calls"] == 4 and usage["llm_failures"] == 0
    assert [e["response"]["attempts"] for e in log_lines(tmp_path)] == [2, 3, 2, 1]


def test_an_endpoint_that_keeps_failing_is_an_infrastructure_error(
    server: ScriptedLLMServer, sandbox: Sandbox, tmp_path: Path
) -> None:
    server.push(Fault.server_error(), Fault.server_error())
    result = build(server, sandbox, tmp_path, llm={"max_retries": 1})
    assert result.tasks == [] and len(result.infra_errors) == 1 and "LLMError" in result.infra_errors[0]
    assert [(d.stage, d.reason) for d in result.drops] == [("execution", "LLM failure")]
    assert result.statistics()["llm"]["llm_failures"] == 1
    (failed,) = log_lines(tmp_path)
    assert failed["response"] is None and "gave up after 2 attempts" in failed["error"]


EDITED_MODULE = RATES_MODULE.replace(
    "        self.requests_made += 1\n", "        self.requests_made = self.requests_made + 1\n"
)


@pytest.mark.parametrize(
    ("split", "edited", "functionality", "tests", "reason"),
    [
        ("train", False, "NO", "CORRECT", "judged not equivalent"),
        ("eval", False, "SAME", "INCORRECT", "tests judged incorrect"),
        ("eval", True, "YES", "CORRECT", "target AST changed (eval split)"),
        ("train", True, "YES", "CORRECT", None),
    ],
)
def test_judgements_keep_or_drop_per_split(
    split: str,
    edited: bool,
    functionality: str,
    tests: str,
    reason: str | None,
    server: ScriptedLLMServer,
    sandbox: Sandbox,
    tmp_path: Path,
) -> None:
    server.push(
        Reply(block(EDITED_MODULE if edited else RATES_MODULE)),
        Reply(block(RATES_TESTS)),
        *verdicts(functionality, tests),
    )
    result = build(server, sandbox, tmp_path, split=split)
    assert result.infra_errors == []
    if reason is None:
        (task,) = result.tasks
        assert task.metadata.checks["target unchanged (AST)"] is False
        assert task.metadata.checks["judged functionality"] == "yes"
        assert "self.requests_made = self.requests_made + 1" in task.target.source
        assert any(note.startswith("judge: functionality yes") for note in task.metadata.notes)
        return
    assert result.tasks == []
    (drop,) = result.drops
    assert (drop.stage, drop.reason) == ("quality", reason)
    assert steps(result)[-2:] == [("submit", True), ("abandon", True)]


WEAK_TESTS = RATES_TESTS.replace(
    RATES_TESTS[RATES_TESTS.index("SCRIPT = [") : RATES_TESTS.index("def test_fetch_rates")],
    'SCRIPT = [(0, "eur"), (599, "EUR")]\n\n\n',
)


def test_missed_lines_go_back_to_the_model_until_the_threshold(
    server: ScriptedLLMServer, sandbox: Sandbox, tmp_path: Path
) -> None:
    server.push(
        Reply(block(RATES_MODULE)),
        Reply(block(WEAK_TESTS)),
        Reply(block(RATES_SCRIPT, "More inputs.")),
        Reply("Looks equivalent to me."),
        Reply("VERDICT: SAME"),
        verdicts()[1],
    )
    result = build(server, sandbox, tmp_path)
    (task,) = result.tasks
    assert task.metadata.branch_coverage == 1.0 and 'SCRIPT = [(0, "eur"), (599, "EUR")]' not in task.evaluation.script
    coverage = server.requests[2].text()
    assert "reach only" in coverage and "80% are needed" in coverage
    assert "Lines never executed: [" in coverage and "   5  " in coverage  # the target, numbered
    assert "did not end with a verdict line" in server.requests[4].last_text()
    assert [e["step"] for e in log_lines(tmp_path)] == [
        "aggregate",
        "tests",
        "coverage",
        "judge functionality",
        "judge functionality",
        "judge tests",
    ]


WORDLIST = textwrap.dedent('''\
    def load_words(path, min_length=1):
        """The distinct words of a text file, one per line, lower-cased, in file order."""
        seen = []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                word = line.strip().lower()
                if len(word) >= min_length and word not in seen:
                    seen.append(word)
        return seen
    ''')

WORDLIST_SCRIPT = WORDLIST + textwrap.dedent('''\


    EXAMPLES = {"words.txt": "Apple\\nbanana\\n\\napple\\nKiwi\\n", "short.txt": "a\\nbb\\nccc\\nBB\\n",
                "empty.txt": ""}


    def write_examples():
        """Example files in the working directory (the sandbox's)."""
        for name, text in EXAMPLES.items():
            with open(name, "w", encoding="utf-8") as fh:
                fh.write(text)
        return sorted(EXAMPLES)
    ''')

WORDLIST_TESTS = textwrap.dedent("""\
    def test_load_words():
        for name in write_examples():
            for min_length in (1, 2, 3, 6):
                assert load_words(name, min_length) == load_words_new_implementation(name, min_length)
        assert load_words("words.txt") == load_words_new_implementation("words.txt")
        for impl in (load_words, load_words_new_implementation):
            try:
                impl("missing.txt")
            except FileNotFoundError:
                pass
            else:
                assert False, "a missing file must raise"


    if __name__ == "__main__":
        test_load_words()
    """)


def test_the_model_takes_over_what_the_deterministic_builder_drops(
    server: ScriptedLLMServer, sandbox: Sandbox, tmp_path: Path
) -> None:
    repo = tmp_path / "wordlist"
    (repo / "wordlist").mkdir(parents=True)
    (repo / "wordlist" / "__init__.py").write_text("")
    (repo / "wordlist" / "files.py").write_text(WORDLIST)
    server.push(Reply(block(WORDLIST_SCRIPT)), Reply(block(WORDLIST_TESTS)), *verdicts())
    result = build(server, sandbox, tmp_path, source=repo, only=("load_words",))
    (task,) = result.tasks
    ((_, outcome),) = result.outcomes
    assert outcome.stats["takeover"].startswith("the deterministic builder failed at tests")
    assert "the deterministic builder failed at tests" in server.requests[0].text()
    assert validate_task(sandbox, task, mutants=4).passed
    assert task.metadata.checks["judged functionality"] == "same"


# --------------------------------------------------------------------------- the CLI


def test_build_through_the_cli(server: ScriptedLLMServer, tmp_path: Path) -> None:
    server.push(Fault.rate_limit(0.1), Reply(block(RATES_MODULE)), Reply(block(RATES_TESTS)), *verdicts())
    shutil.copytree(DEMO / "repo", tmp_path / "shopkit")
    output = tmp_path / "out" / "tasks.jsonl"
    result = cli_llm_build(
        tmp_path / "shopkit",
        output,
        server.openai_base_url,
        "--builder-arg",
        "coverage_rounds=1",
        "--stats",
        str(tmp_path / "s.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tasks = [json.loads(line) for line in output.read_text().splitlines()]
    assert [t["target"]["qualname"] for t in tasks] == ["RateClient.fetch_rates"]
    log = output.with_name("tasks.jsonl.llm.jsonl")
    assert f"every LLM exchange of this build: {log}" in " ".join(result.stdout.split())
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [
        "aggregate",
        "tests",
        "judge functionality",
        "judge tests",
    ]
    assert "LLM openai-compatible/test-model" in result.stdout and "4 calls (0 cached, 1 retries" in result.stdout
    stats = json.loads((tmp_path / "s.json").read_text())["llm"]
    assert stats["llm_calls"] == 4 and stats["cost_usd"] > 0
    assert stats["cost_usd"] == pytest.approx((stats["input_tokens"] + 2 * stats["output_tokens"]) / 1e6)


def test_the_cli_rejects_llm_options_for_the_deterministic_builder(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_repost.cli",
            "build",
            str(DEMO / "repo"),
            "-o",
            str(tmp_path / "t.jsonl"),
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "apply to --builder llm" in result.stderr
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_repost.cli",
            "build",
            str(DEMO / "repo"),
            "-o",
            str(tmp_path / "t.jsonl"),
            "--builder",
            "llm:gemini/pro",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "PROVIDER/MODEL" in result.stderr
