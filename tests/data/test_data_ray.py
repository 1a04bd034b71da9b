"""``gym-repost data acecoder|testgen|rejection`` on Ray give what the same commands give locally.

Each command runs twice from the command line, as a user runs it, with the same seed and
the same relative paths: in ``local/`` with ``--executor local``, and in ``ray/`` with
``--executor ray --ray-address`` joining the simulated cluster of ``tests/conftest.py``,
whose workers run in another directory (a path that travels to them must not be relative
to the command's). The files written and everything printed must be equal (test
generation's mutants killed by a test or by the clock counted together). Models are the
scripted server on loopback, answering each request from its content alone (never from
the order requests arrive), so both runs get the same answers; each run keeps its own
response cache, which a second Ray run then answers from. Last, a repair policy kills its
Ray worker once: the records are still the local run's, none lost, none twice.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from testfile_tasks import GROUND_TRUTH, measured_testfile_task

from gym_repost.analysis.mutation import generate_mutants
from gym_repost.harness import do_nothing_candidate
from gym_repost.llm.scripted_server import RecordedRequest, Reply, ScriptedLLMServer
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, TestFileTask, load_tasks, save_tasks
from tests.data.test_llm_samplers import FIX_SCORE, NO_CODE, WRONG_A, block, cli, llm_run, row  # noqa: F401 - a fixture
from tests.data.test_rejection import REPAIR_AGENT, runs  # noqa: F401 - a fixture

pytest.importorskip("ray", reason='the Ray tests need Ray: pip install "gym-repost[ray]"')
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("llm_keys")]

ROOT = Path(__file__).resolve().parents[2]
LLM = "llm:openai-compatible/scripted-model"


def data_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``gym-repost data ARGS`` run in ``cwd``, this checkout on the import path."""
    return cli(
        *args, env={"PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}, cwd=cwd
    )


def on_ray(cluster: Any) -> tuple[str, ...]:
    return ("--executor", "ray", "--ray-address", cluster.address)


def local_and_ray(
    tmp_path: Path, cluster: Any, inputs: Callable[[Path], None], *args: str
) -> dict[str, subprocess.CompletedProcess[str]]:
    """The command run in ``local/`` and in ``ray/``, each folder given its inputs first."""
    ran = {}
    for executor in ("local", "ray"):
        folder = tmp_path / executor
        folder.mkdir()
        inputs(folder)
        extra = ("--executor", "local") if executor == "local" else on_ray(cluster)
        ran[executor] = data_cli(folder, *args, *extra)
        assert ran[executor].returncode == 0, ran[executor].stderr
    return ran


def same_files(tmp_path: Path, *names: str) -> None:
    for name in names:
        local, remote = (tmp_path / e / name for e in ("local", "ray"))
        assert remote.read_text() == local.read_text(), name


# --------------------------------------------------------------------------- AceCoder


class SeededCoder:
    """A code model whose answer is a function of the request's task and seed: the ground
    truth, one of two mutants, a do-nothing body, or no code."""

    def __init__(self, tasks: list[FunctionTask]) -> None:
        self.answers = {
            f"The body of `{t.target.qualname}` in `{t.repository.target_file}` has been removed": [
                block(t.ground_truth),
                *(block(m.source) for m in generate_mutants(t.ground_truth)[:2]),
                block(do_nothing_candidate(t)),
                NO_CODE,
            ]
            for t in tasks
        }

    def __call__(self, request: RecordedRequest) -> Reply:
        text = request.last_text()
        answers = next(a for marker, a in self.answers.items() if marker in text)
        return Reply(answers[int(request.body["seed"]) % len(answers)])


def test_acecoder_on_ray_equals_a_local_run_and_its_cache_answers_a_second_run(
    cluster: Any, server: ScriptedLLMServer, tmp_path: Path
) -> None:
    names = ("demo/pricing.apply_discount", "demo/money.parse_money")
    tasks = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if t.name in names and isinstance(t, FunctionTask)]
    server.responder = SeededCoder(tasks)
    args = ("acecoder", "tasks.jsonl", "-o", "pairs.jsonl", "--tests-output", "tests.jsonl")
    args += ("--sampler", "deterministic", "--sampler", LLM, "--base-url", server.openai_base_url)
    args += ("--samples", "4", "--tests", "8", "--seed", "3", "-w", "2")
    asked: list[int] = []

    def inputs(folder: Path) -> None:
        asked.append(len(server.requests))
        save_tasks(tasks, folder / "tasks.jsonl")

    ran = local_and_ray(tmp_path, cluster, inputs, *args)
    by_local, by_ray = asked[1] - asked[0], len(server.requests) - asked[1]
    assert ran["ray"].stdout == ran["local"].stdout
    same_files(tmp_path, "pairs.jsonl", "tests.jsonl")
    pairs = [json.loads(line) for line in (tmp_path / "ray" / "pairs.jsonl").read_text().splitlines()]
    assert pairs and all(p["chosen_pass_rate"] > p["rejected_pass_rate"] > 0 for p in pairs)
    assert by_local == by_ray == 2 * 4  # two questions, four programs each
    assert row(ran["ray"].stdout, "LLM calls (cache hits)") == f"{by_ray} (0)"
    assert (tmp_path / "ray" / "pairs-llm-cache").is_dir()  # the workers' cache, where the command said

    again = data_cli(tmp_path / "ray", *args, *on_ray(cluster))
    assert again.returncode == 0, again.stderr
    assert len(server.requests) == asked[1] + by_ray  # every answer came from the cache
    assert row(again.stdout, "LLM calls (cache hits)") == f"{by_ray} ({by_ray})"
    assert (tmp_path / "ray" / "pairs.jsonl").read_text() == (tmp_path / "local" / "pairs.jsonl").read_text()


# --------------------------------------------------------------------------- Repo-Smith test generation

WEAK = "from tinypkg.core import clamp\n\n\ndef test_clamp():\n    assert clamp(5) == 5\n"
TESTGEN_REPLIES = [
    f"<reasoning>clamp only.</reasoning>\n```python\n{WEAK}```",
    f"<reasoning>All four functions.</reasoning>\n```python\n{GROUND_TRUTH}```",
    "<reasoning>Exact values for clamp, fib, check and total.</reasoning>",
]


def answers_testgen(request: RecordedRequest) -> Reply:
    """The replies of :data:`TESTGEN_REPLIES`, chosen by what is asked: generate, repair, compress."""
    text = request.last_text()
    if text.startswith("Below are the notes written while building a test file"):
        return Reply(TESTGEN_REPLIES[2])
    return Reply(TESTGEN_REPLIES[0] if text.startswith("Write the tests of") else TESTGEN_REPLIES[1])


@pytest.fixture(scope="module")
def testgen_task(sandbox: Sandbox) -> TestFileTask:
    """The tiny test-file task with 4 of its 32 mutants (its reference measured from its
    ground truth): mutation testing is most of what scoring a test file costs, and each
    run below scores four test files (two tasks, two rounds)."""
    return measured_testfile_task(sandbox, max_mutants=4)


def records_of_testgen(folder: Path) -> list[dict[str, Any]]:
    """The records a test-generation run wrote, each mutant killed by a failing test or by
    the clock counted as detected: which of the two a slow mutant meets depends on the load
    of the machine (the score, which counts both, does not)."""

    def detected(value: Any) -> Any:
        if isinstance(value, list):
            return [detected(v) for v in value]
        if not isinstance(value, dict):
            return value
        folded = {k: detected(v) for k, v in value.items() if k not in ("mutants_killed", "mutants_timeouts")}
        if "mutants_killed" in value:
            folded["mutants_detected"] = value["mutants_killed"] + value["mutants_timeouts"]
        return folded

    return [detected(json.loads(line)) for line in (folder / "testgen.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("generator", ["scripted", "llm"])
def test_testgen_on_ray_equals_a_local_run(
    generator: str,
    cluster: Any,
    testgen_task: TestFileTask,
    server: ScriptedLLMServer,
    tmp_path: Path,
) -> None:
    tasks = [testgen_task, testgen_task.model_copy(update={"name": "tiny/again"}).with_id()]
    server.responder = answers_testgen

    def inputs(folder: Path) -> None:
        save_tasks(tasks, folder / "tasks.jsonl")
        (folder / "replies.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TESTGEN_REPLIES))

    args = ("testgen", "tasks.jsonl", "-o", "testgen.jsonl", "--rounds", "2", "--seed", "4", "-w", "2")
    spec = ("--generator", "scripted:replies.jsonl")
    if generator == "llm":
        spec = ("--generator", LLM, "--base-url", server.openai_base_url)
    ran = local_and_ray(tmp_path, cluster, inputs, *args, *spec)
    assert ran["ray"].stdout == ran["local"].stdout
    records = records_of_testgen(tmp_path / "ray")
    assert records == records_of_testgen(tmp_path / "local")
    assert [r["task_name"] for r in records] == [t.name for t in tasks]
    assert all(r["test_file"] == GROUND_TRUTH and r["passed"] for r in records)
    assert [r["kind"] for r in records[0]["rounds"]] == ["generate", "repair:coverage"]
    if generator == "scripted":
        return
    calls = 2 * 3  # per task: generate, one repair, compress
    assert len(server.requests) == 2 * calls and row(ran["ray"].stdout, "LLM calls (cache hits)") == f"{calls} (0)"
    again = data_cli(tmp_path / "ray", *args, *spec, *on_ray(cluster))
    assert again.returncode == 0, again.stderr
    assert len(server.requests) == 2 * calls and row(again.stdout, "LLM calls (cache hits)") == f"{calls} ({calls})"
    assert records_of_testgen(tmp_path / "ray") == records


# --------------------------------------------------------------------------- rejection sampling


def repairs_a_only(request: RecordedRequest) -> Reply:
    """A repair model that fixes one of the two failed answers and not the other: in one
    answer (no code for the other), or, asked as an agent, by writing the fix then submitting
    (submitting at once for the other)."""
    if not request.body.get("tools"):
        return Reply(block(FIX_SCORE) if WRONG_A in request.last_text() else NO_CODE)
    first_turn = not any(m["role"] == "assistant" for m in request.messages)
    if first_turn and WRONG_A in request.text():
        return Reply.calling("write_code", {"code": FIX_SCORE})
    return Reply.calling("submit")


@pytest.mark.parametrize(
    ("repairer", "calls"),
    [((), 2), (("--repair-policy", LLM, "--repair-policy-arg", "mode=agentic"), 3)],
    ids=["one-answer", "agentic"],
)
def test_rejection_with_an_llm_repairer_on_ray_equals_a_local_run(
    repairer: tuple[str, ...],
    calls: int,
    cluster: Any,
    llm_run: tuple[Path, Any],  # noqa: F811
    server: ScriptedLLMServer,
    tmp_path: Path,
) -> None:
    """The run's own model repairs in one answer per failure (2 calls); an agentic one writes
    and submits for one failure, submits for the other (3 calls)."""
    run, _ = llm_run
    server.responder = repairs_a_only
    before = len(server.requests)
    args = ("rejection", str(run), "-o", "sft.jsonl", "--debug-failures", "--base-url", server.openai_base_url)
    args += (*repairer, "-w", "2")
    ran = local_and_ray(tmp_path, cluster, lambda _folder: None, *args)
    assert ran["ray"].stdout == ran["local"].stdout
    same_files(tmp_path, "sft.jsonl")
    (record,) = [json.loads(line) for line in (tmp_path / "ray" / "sft.jsonl").read_text().splitlines()]
    assert record["origin"] == "repaired"
    assert len(server.requests) - before == 2 * calls
    assert row(ran["ray"].stdout, "LLM calls (cache hits)") == f"{calls} (0)"
    assert (tmp_path / "ray" / "sft-llm-cache").is_dir()

    again = data_cli(tmp_path / "ray", *args, *on_ray(cluster))
    assert again.returncode == 0, again.stderr
    assert len(server.requests) - before == 2 * calls
    assert row(again.stdout, "LLM calls (cache hits)") == f"{calls} ({calls})"


REPAIRER = """
import os


class Repairer(FixFromReport):
    \"\"\"FixFromReport; on Ray, its first repair (of all workers) kills the process it runs in.\"\"\"

    def reset(self, task, observation, info, *, seed):
        super().reset(task, observation, info, seed=seed)
        if {kills}:
            try:
                os.close(os.open({marker!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
            os._exit(1)
"""


def test_a_killed_worker_loses_and_duplicates_no_rejection_record(
    cluster: Any,
    runs: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The Ray run's repair policy kills its worker at its first repair: that task's unit is
    rerun, and the records and counts are those of the local run, whose policy makes the
    same repairs without dying."""
    marker = tmp_path / "killed"

    def inputs(folder: Path) -> None:
        agent = REPAIR_AGENT % (FIX_SCORE, str(runs["log"]))
        agent += REPAIRER.format(kills=folder.name == "ray", marker=str(marker))
        (folder / "repairer.py").write_text(agent)

    args = ("rejection", str(runs["mutant"]), "-o", "sft.jsonl", "--ground-truth", "--debug-failures")
    ran = local_and_ray(tmp_path, cluster, inputs, *args, "--repair-policy", "repairer.py:Repairer", "-w", "2")
    assert marker.exists()  # a worker did die mid-run
    printed = [line for line in ran["ray"].stdout.splitlines(keepends=True) if "(raylet)" not in line]
    assert "".join(printed) == ran["local"].stdout  # Ray's driver prints the worker's death on stdout
    assert "failed samples: 4; repair attempts: 4; repaired and passing: 2" in " ".join(ran["local"].stdout.split())
    same_files(tmp_path, "sft.jsonl")
    records = [json.loads(line) for line in (tmp_path / "ray" / "sft.jsonl").read_text().splitlines()]
    assert sorted(r["origin"] for r in records) == ["ground_truth", "ground_truth", "repaired"]
    repairs = runs["log"].read_text().splitlines()
    assert len(repairs) == 4 + 4 + 1  # local, Ray, and the Ray repair that died (its task's unit rerun)
