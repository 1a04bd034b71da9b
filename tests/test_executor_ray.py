"""The Ray executor on a real, simulated two-node cluster (``ray.cluster_utils.Cluster``).

One cluster serves the module (the ``cluster`` fixture of ``tests/conftest.py``: starting
Ray costs seconds on a loaded 2-core machine); a test that removes a node adds one back.
Nothing here depends on timing: a worker is killed by the unit it runs, a node is removed
once a unit on it says it has started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from llm_builds import DEMO, RATES_MODULE, RATES_TESTS, block, cli_llm_build, verdicts
from testfile_tasks import FILES, GROUND_TRUTH, TEST_PATH

from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.executor import RayExecutor
from gym_repost.llm.scripted_server import Fault, RecordedRequest, Reply, ScriptedLLMServer
from gym_repost.policy import load_policy
from gym_repost.sandbox import Sandbox, sandbox_config
from gym_repost.task import FunctionTask, load_tasks, save_tasks

ray = pytest.importorskip("ray", reason='the Ray tests need Ray: pip install "gym-repost[ray]"')
pytestmark = pytest.mark.slow
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the units below travel by value

ROOT = Path(__file__).resolve().parents[1]


def _executor(cluster: Any, workers: int = 2) -> RayExecutor:
    return RayExecutor(workers, sandbox_config("local", workers=1), address=cluster.address)


@dataclass(frozen=True)
class WhereItRuns:
    """A unit that says where it ran."""

    def __call__(self, item: int, sandbox: Sandbox | None) -> tuple[int, str, int, bool]:
        ran = sandbox.run(files={}, command=["python3", "-c", "print(6 * 7)"], timeout=30.0) if sandbox else None
        return item, ray.get_runtime_context().get_node_id(), os.getpid(), bool(ran and ran.stdout.strip() == "42")


def test_units_spread_over_both_nodes_with_a_warm_sandbox_each_results_in_input_order(cluster: Any) -> None:
    done: list[Any] = []
    with _executor(cluster, workers=3) as executor:  # three actors fill the three CPUs of the two nodes
        results = executor.map(WhereItRuns(), list(range(8)), done.append)
        again = executor.map(WhereItRuns(), [8, 9])
    assert [r[0] for r in results] == list(range(8)) and sorted(done) == sorted(results)
    assert all(r[3] for r in results + again)  # each actor's own sandbox ran the command
    assert len({r[1] for r in results}) == 2  # both nodes
    assert {r[2] for r in again} <= {r[2] for r in results}  # the same actors, kept warm between maps


def _demo_tasks(count: int) -> list[FunctionTask]:
    return [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if isinstance(t, FunctionTask)][:count]


def _config(tasks: list[FunctionTask], policy: str, n: int) -> RunConfig:
    return RunConfig(tasks="demo", tasks_digest=tasks_digest(tasks), policy=policy, n=n, seed=7, workers=2)


def _episodes(run: Path) -> list[tuple[Any, ...]]:
    return sorted(
        (e.task_id, e.sample, e.seed, e.status, e.code, e.reward, e.submissions) for e in RunDir(run).episodes()
    )


def test_an_evaluation_on_the_cluster_equals_a_local_one(cluster: Any, sandbox: Sandbox, tmp_path: Path) -> None:
    tasks = _demo_tasks(5)
    for policy in ("oracle", "mutant"):
        config = _config(tasks, policy, 2)
        local = evaluate(tasks, load_policy(policy), config, RunDir(tmp_path / f"local-{policy}"), sandbox)
        with _executor(cluster) as executor:
            remote = evaluate(tasks, load_policy(policy), config, RunDir(tmp_path / f"ray-{policy}"), executor=executor)
        assert remote == local
        assert _episodes(tmp_path / f"ray-{policy}") == _episodes(tmp_path / f"local-{policy}")
        assert len(_episodes(tmp_path / f"ray-{policy}")) == 10


def test_validation_and_dstc_on_the_cluster_equal_local_runs(cluster: Any, sandbox: Sandbox) -> None:
    from gym_repost.data import dstc
    from gym_repost.harness.validation import validate_tasks

    tasks = _demo_tasks(3)
    with _executor(cluster) as executor:
        remote = validate_tasks(None, tasks, mutants=4, executor=executor)
        remote_dstc = dstc.run(tasks, None, samples=3, seed=5, executor=executor)
    local = validate_tasks(sandbox, tasks, mutants=4)
    assert [r.record() for r in remote] == [r.record() for r in local]
    local_dstc = dstc.run(tasks, sandbox, samples=3, seed=5)
    assert remote_dstc.dpo_records() == local_dstc.dpo_records() and remote_dstc.totals() == local_dstc.totals()


KILLER = textwrap.dedent("""\
    import os
    from pathlib import Path

    LOG = Path({log!r})


    class KillsItsWorkerOnce:
        '''Writes nothing; the first episode of the target task kills the process it runs in.'''

        def reset(self, task, observation, info, *, seed):
            with LOG.open("a") as f:
                f.write(f"{{task.name}} {{info['sample']}} {{os.getpid()}}\\n")
            marker = LOG.with_suffix(".killed")
            if task.name == {target!r} and not marker.exists():
                marker.write_text(str(os.getpid()))
                os._exit(1)

        def act(self, observation, info):
            return {{"tool": "submit", "args": {{}}}}
    """)


def test_a_killed_worker_is_restarted_and_its_episode_recorded_once(cluster: Any, tmp_path: Path) -> None:
    tasks = _demo_tasks(4)
    log = tmp_path / "resets.log"
    agent = tmp_path / "killer.py"
    agent.write_text(KILLER.format(log=str(log), target=tasks[1].name))
    spec = f"{agent}:KillsItsWorkerOnce"
    with _executor(cluster) as executor:
        summary = evaluate(
            tasks, load_policy(spec), _config(tasks, spec, 2), RunDir(tmp_path / "run"), executor=executor
        )
    assert log.with_suffix(".killed").exists()  # a worker did die mid-run
    resets = log.read_text().splitlines()
    assert len(resets) == 9  # 8 episodes, the killed one played twice
    episodes = RunDir(tmp_path / "run").episodes()
    assert sorted((e.task_id, e.sample) for e in episodes) == sorted((t.id, s) for t in tasks for s in range(2))
    assert all(e.status == "failed" for e in episodes)  # none lost, none an infrastructure error
    assert summary["episodes"] == 8 and summary["infra_errors"] == 0


@dataclass(frozen=True)
class WaitsForRelease:
    """A unit that says it started (on which node) and waits until the test releases it."""

    folder: str

    def __call__(self, item: int, sandbox: Sandbox | None) -> tuple[int, str]:
        node = ray.get_runtime_context().get_node_id()
        Path(self.folder, f"started-{item}-{node}-{os.getpid()}").write_text("")
        release = Path(self.folder, "release")
        for _ in range(1200):
            if release.exists():
                break
            time.sleep(0.1)
        return item, node


def test_a_unit_lost_with_a_dead_node_is_rerun_and_counted_once(cluster: Any, tmp_path: Path) -> None:
    (doomed,) = list(cluster.worker_nodes)
    folder = tmp_path / "signals"
    folder.mkdir()
    done: list[Any] = []
    outcome: dict[str, Any] = {}

    def run() -> None:  # three actors fill the cluster's three CPUs: one of them is on the doomed node
        try:
            with _executor(cluster, workers=3) as executor:
                outcome["results"] = executor.map(WaitsForRelease(str(folder)), [0, 1, 2], done.append)
        except BaseException as exc:
            outcome["error"] = exc

    driver = threading.Thread(target=run)
    driver.start()
    try:  # the cluster is changed from this thread, as Ray's own tests do
        for _ in range(3000):
            if any(doomed.node_id in p.name for p in folder.iterdir()):
                cluster.add_node(num_cpus=1)  # where the lost actor can come back
                cluster.remove_node(doomed)
                (folder / "removed").write_text("")
                break
            time.sleep(0.1)
    finally:
        (folder / "release").write_text("")
        driver.join(timeout=600)
    assert "error" not in outcome and (folder / "removed").exists()
    assert [r[0] for r in outcome["results"]] == [0, 1, 2] and len(done) == 3
    assert doomed.node_id not in {r[1] for r in outcome["results"]}  # the lost unit was rerun elsewhere
    started = [p.name for p in folder.iterdir() if p.name.startswith("started-")]
    assert len(started) == 4  # three units, one of them twice


def test_an_llm_policy_creates_its_client_on_the_worker_and_the_ledger_adds_up(
    cluster: Any, sandbox: Sandbox, function_task: FunctionTask, llm_keys: None, tmp_path: Path
) -> None:
    answer = f"```python\n{function_task.ground_truth}\n```"

    def responder(_request: RecordedRequest) -> Reply:
        return Reply(answer)

    save_tasks([function_task], tmp_path / "tasks.jsonl")
    spec = "llm:openai-compatible/scripted-coder"
    config = RunConfig(tasks="t", tasks_digest=tasks_digest([function_task]), policy=spec, n=3, workers=2)
    with ScriptedLLMServer(responder=responder) as server:
        options = {"base_url": server.openai_base_url, "timeout": 5.0, "cache_dir": str(tmp_path / "cache-ray")}
        with _executor(cluster) as executor:
            remote = evaluate(
                [function_task], load_policy(spec, **options), config, RunDir(tmp_path / "ray"), executor=executor
            )
        asked_by_ray = len(server.requests)
        options["cache_dir"] = str(tmp_path / "cache-local")
        local = evaluate([function_task], load_policy(spec, **options), config, RunDir(tmp_path / "local"), sandbox)
        asked_in_all = len(server.requests)
    assert remote["pass@1"] == local["pass@1"] == 1.0
    calls = [sum(e.stats.get("llm_calls", 0) for e in RunDir(tmp_path / run).episodes()) for run in ("ray", "local")]
    assert calls[0] == calls[1] == asked_by_ray == asked_in_all - asked_by_ray > 0
    assert (tmp_path / "cache-ray").is_dir()  # the workers' clients kept the response cache


def test_the_command_line_on_a_local_ray_instance_matches_a_local_run(tmp_path: Path) -> None:
    """``--executor ray`` without an address starts its own Ray instance (not the module's cluster)."""
    tasks = tmp_path / "tasks.jsonl"
    save_tasks(_demo_tasks(4), tasks)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for executor in ("local", "ray"):
        result = subprocess.run(
            [sys.executable, "-m", "gym_repost.cli", "eval", str(tasks), "--policy", "oracle", "-n", "2"]
            + ["-o", str(tmp_path / executor), "--executor", executor, "-w", "2"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert result.returncode == 0, result.stderr
    summaries = [json.loads((tmp_path / e / "summary.json").read_text()) for e in ("local", "ray")]
    assert summaries[0] == summaries[1] and summaries[0]["pass@1"] == 1.0
    assert _episodes(tmp_path / "ray") == _episodes(tmp_path / "local")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    command = [sys.executable, "-m", "gym_repost.cli", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)


TESTFILE_REPO = {
    **FILES,
    TEST_PATH: GROUND_TRUTH,
    "tests/test_util.py": "from tinypkg.util import double\n\n\ndef test_double():\n    assert double(2) == 4\n",
    "tests/test_util_wrong.py": "from tinypkg.util import double\n\n\ndef test_double():\n    assert double(2) == 5\n",
    "tests/test_nothing.py": "def test_x():\n    assert True\n",
    "LICENSE": "MIT License\n\nPermission is hereby granted, free of charge, to any person\n",
    "pyproject.toml": '[project]\nname = "tinypkg"\nversion = "1.0"\nlicense = {text = "MIT"}\n',
}
"""Three pairs (two whose ground truth passes, one that fails) and a test file without a focal file."""


def test_a_test_file_build_on_the_cluster_equals_a_local_one(cluster: Any, tmp_path: Path) -> None:
    """``build --kind testfile --executor ray`` joins the cluster; its pairs are measured by the actors."""
    repo = tmp_path / "tinypkg-1.0"
    for path, text in TESTFILE_REPO.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    runs = {}
    for name, executor in (("local", []), ("ray", ["--executor", "ray", "--ray-address", cluster.address])):
        out, stats = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.stats.json"
        result = _cli(
            *("build", str(repo), "--kind", "testfile", "-o", str(out), "--stats", str(stats)),
            *("--max-mutants", "5", "--max-candidates", "2", "-w", "2", *executor),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "4 test files, 3 paired with a focal file, 3 measured, 2 kept" in result.stdout
        runs[name] = (out.read_text(), json.loads(stats.read_text()))
    assert runs["ray"] == runs["local"]  # the same task file, byte for byte, and the same statistics
    tasks = [json.loads(line) for line in runs["ray"][0].splitlines()]
    assert sorted(t["evaluation"]["test_path"] for t in tasks) == ["tests/test_core.py", "tests/test_util.py"]
    assert {(d["stage"], d["reason"]) for d in runs["ray"][1]["drops"]} == {
        ("extract", "no focal file"),
        ("execution", "ground truth fails"),
    }


def _exchanges(log: Path) -> list[dict[str, Any]]:
    """The exchange log without what differs between two runs of the same build: the time,
    the seconds, and the server's response ids (numbered across the test's runs)."""
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for line in lines:
        del line["time"], line["seconds"]
        if line["response"] is not None:
            del line["response"]["request_id"]
    return lines


def test_an_llm_build_on_the_cluster_equals_a_local_one_totals_log_and_cache(
    cluster: Any, server: ScriptedLLMServer, llm_keys: None, tmp_path: Path
) -> None:
    """``build --builder llm --executor ray``: the client is made on the worker; the ledger's
    totals and every exchange come back to the driver, which writes the log; the worker's
    client uses (and fills) the cache folder it was given."""
    script = [Fault.rate_limit(0.1), Reply(block(RATES_MODULE)), Reply(block(RATES_TESTS)), *verdicts()]
    on_ray = ["--executor", "ray", "--ray-address", cluster.address]
    runs: dict[str, Any] = {}
    plan = [("local", "cache-local", []), ("ray", "cache-ray", on_ray), ("cached", "cache-ray", on_ray)]
    for name, cache, more in plan:
        if name != "cached":
            server.push(*script)
        asked = len(server.requests)
        out, stats = tmp_path / name / "tasks.jsonl", tmp_path / name / "stats.json"
        result = cli_llm_build(
            DEMO / "repo",
            out,
            server.openai_base_url,
            *("--builder-arg", f"cache_dir={tmp_path / cache}", "--stats", str(stats), *more),
            timeout=900,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert server.remaining == 0
        llm_line = next(line for line in result.stdout.splitlines() if line.startswith("LLM "))
        log = _exchanges(out.with_name("tasks.jsonl.llm.jsonl"))
        runs[name] = (out.read_text(), json.loads(stats.read_text()), log, len(server.requests) - asked, llm_line)
    local, ray_run, cached = runs["local"], runs["ray"], runs["cached"]
    assert len(local[0].splitlines()) == 1 and ray_run[0] == local[0] == cached[0]  # the same task
    assert ray_run[1].pop("timings") and local[1].pop("timings")  # seconds: the one statistic that may differ
    assert ray_run[1] == local[1]  # Table 2, drops, safety limits, the LLM totals
    totals = local[1]["llm"]
    assert (totals["llm_calls"], totals["cache_hits"], totals["retries"], totals["llm_failures"]) == (4, 0, 1, 0)
    assert totals["input_tokens"] > 0 and totals["output_tokens"] > 0 and totals["cost_usd"] > 0
    assert ray_run[2] == local[2] and [e["step"] for e in local[2]] == [
        "aggregate",
        "tests",
        "judge functionality",
        "judge tests",
    ]
    assert ray_run[3] == local[3] == 5  # four calls, one of them retried once
    assert ray_run[4] == local[4] and "4 calls (0 cached, 1 retries" in local[4]
    # a second build on the cluster is answered from the cache the first one's worker filled
    assert cached[3] == 0 and len(list((tmp_path / "cache-ray").rglob("*.json"))) == 4
    again = cached[1]["llm"]
    assert (again["llm_calls"], again["cache_hits"], again["input_tokens"], again["retries"]) == (4, 4, 0, 0)
    assert [e["response"]["cached"] for e in cached[2]] == [True] * 4
    assert [e["request"] for e in cached[2]] == [e["request"] for e in local[2]]


class Interrupted(Exception):
    """The driver of a corpus build stopped (a kill) once one repository was saved."""


CORPUS_REPOS = {
    "alpha": 'def clamp(value, low, high):\n    """value limited to [low, high]."""\n'
    "    if value < low:\n        return low\n    if value > high:\n        return high\n    return value\n",
    "beta": 'def initials(name):\n    """First letters of each word."""\n    parts = [p for p in name.split() if p]\n'
    '    if not parts:\n        return ""\n    return "".join(p[0].upper() for p in parts)\n',
    "gamma": 'def sign(x):\n    """-1, 0 or 1."""\n    if x > 0:\n        return 1\n    if x < 0:\n'
    "        return -1\n    return 0\n",
}


def test_a_corpus_build_on_the_cluster_resumes_where_it_stopped_and_equals_a_local_one(
    cluster: Any, sandbox: Sandbox, tmp_path: Path
) -> None:
    """A corpus build on Ray whose driver stops after the first repository is saved; the next
    run builds only the others, and the corpus is byte for byte the one a local build writes."""
    from gym_repost.construct.corpus import build_corpus, corpus_paths
    from gym_repost.construct.pipeline import BuildSettings
    from gym_repost.executor import LocalExecutor

    license_text = (ROOT / "tasks" / "demo" / "repo" / "LICENSE").read_text()
    sources = []
    for name, module in CORPUS_REPOS.items():
        (tmp_path / name / name).mkdir(parents=True)
        (tmp_path / name / name / "__init__.py").write_text("")
        (tmp_path / name / name / "core.py").write_text(module)
        (tmp_path / name / "LICENSE").write_text(license_text)
        sources.append(str(tmp_path / name))
    settings = BuildSettings(max_candidates=0, test_executions=200, trace=False)
    local = tmp_path / "local" / "tasks.jsonl"
    local.parent.mkdir()
    reference = build_corpus(sources, local, settings, LocalExecutor(2, sandbox), eval_fraction=0.34)
    assert reference.totals()["tasks"] == 3

    def stop(build: Any) -> None:
        raise Interrupted(build.source)

    remote = tmp_path / "ray" / "tasks.jsonl"
    remote.parent.mkdir()
    with pytest.raises(Interrupted), _executor(cluster) as executor:
        build_corpus(sources, remote, settings, executor, eval_fraction=0.34, on_repository=stop)
    saved = list((corpus_paths(remote)["state"] / "repos").iterdir())
    assert len(saved) == 1 and not remote.exists()  # one repository on disk, no corpus written
    built: list[str] = []
    with _executor(cluster) as executor:
        resumed = build_corpus(
            sources, remote, settings, executor, eval_fraction=0.34, on_repository=lambda b: built.append(b.source)
        )
    assert resumed.resumed == 1 and len(built) == 2
    for part in ("tasks", "train", "eval"):
        assert corpus_paths(remote)[part].read_bytes() == corpus_paths(local)[part].read_bytes(), part
    assert _timeless(corpus_paths(remote)["stats_json"]) == _timeless(corpus_paths(local)["stats_json"])


def _timeless(path: Path) -> Any:
    """A statistics file without its seconds (the one figure a rerun may change)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if "seconds" not in k}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return strip(json.loads(path.read_text()))
