"""The executor seam: results in input order, one callback per item, errors propagate."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gym_repost.errors import ConfigError
from gym_repost.executor import LocalExecutor, get_executor, need_sandbox
from gym_repost.sandbox import Sandbox
from gym_repost.sandbox.local import LocalSandbox

ROOT = Path(__file__).resolve().parents[1]


def test_results_come_back_in_input_order_whatever_finishes_first() -> None:
    def work(n: int, _sandbox: object) -> int:
        time.sleep(0.01 * (5 - n))  # the first items finish last
        return n * n

    done: list[int] = []
    assert LocalExecutor(3).map(work, list(range(5)), done.append) == [0, 1, 4, 9, 16]
    assert sorted(done) == [0, 1, 4, 9, 16]


def test_workers_bound_the_concurrency() -> None:
    running, peak, lock = 0, 0, threading.Lock()

    def work(_: int, _sandbox: object) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    LocalExecutor(2).map(work, list(range(8)))
    assert peak <= 2


def test_an_error_in_a_unit_of_work_reaches_the_caller() -> None:
    def work(n: int, _sandbox: object) -> int:
        if n == 2:
            raise ValueError("unit 2 failed")
        return n

    with pytest.raises(ValueError, match="unit 2 failed"):
        LocalExecutor(2).map(work, [1, 2, 3])


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LocalExecutor(0)


def test_every_unit_of_work_pickles_with_the_standard_library(function_task: Any) -> None:
    """What travels to a Ray actor: settings, specs and sandbox configs, never a live object."""
    from gym_repost.construct.corpus import RepositoryWork
    from gym_repost.construct.llm_builder import LLMBuildWork
    from gym_repost.construct.pipeline import BuildSettings, BuildWork
    from gym_repost.data.acecoder import AcecoderWork
    from gym_repost.data.dstc import DstcWork
    from gym_repost.data.rejection import RejectionWork, RepairerSpec
    from gym_repost.data.repo_smith import TestGenWork
    from gym_repost.evaluate import RunConfig
    from gym_repost.evaluate.runner import EpisodeWork
    from gym_repost.harness.validation import ValidateWork
    from gym_repost.llm import llm_config
    from gym_repost.policy import load_policy
    from gym_repost.sandbox import sandbox_config

    config = RunConfig(tasks="t", tasks_digest="d", policy="oracle")
    units = [
        EpisodeWork(load_policy("oracle"), config),
        EpisodeWork(load_policy("mutant", max_mutants=3), config),
        ValidateWork(mutants=4, seed=1, coverage=True),
        DstcWork("deterministic", {}, 4, 0, 2.0),
        AcecoderWork("deterministic", ("deterministic",), "ground-truth", {}, 20, 8, 5, True, 0, 2.0),
        TestGenWork("llm:openai/gpt-4o-mini", {"base_url": "http://127.0.0.1:1/v1"}, 2, 0),
        RejectionWork(RepairerSpec("oracle"), ground_truth=True, dedupe=True),
        BuildWork(BuildSettings(max_candidates=3)),
        RepositoryWork(BuildSettings()),
        LLMBuildWork(llm_config("openai/gpt-4o-mini", cache_dir="llm-cache"), BuildSettings()),
    ]
    for unit in units:
        assert pickle.loads(pickle.dumps(unit)) == unit or isinstance(unit, EpisodeWork)
    factory = pickle.loads(pickle.dumps(units[1])).factory  # loaded again by spec where it lands
    assert (factory.spec, factory.options, factory.by_spec) == ("mutant", {"max_mutants": 3}, True)
    assert pickle.loads(pickle.dumps(sandbox_config("local", workers=3))).workers == 3
    # a relative cache folder is the driver's: made absolute before it travels
    assert units[-1].config.cache_dir == Path("llm-cache").resolve()


@dataclass(frozen=True)
class RunsNothing:
    """A unit that says it runs no code: it is handed no sandbox."""

    runs_code = False

    def __call__(self, item: int, box: Sandbox | None) -> int:
        assert box is None
        return item


def test_a_sandbox_that_cannot_start_stops_the_map_before_any_unit_that_may_run_code() -> None:
    """A sandbox that cannot start stops the map before its first unit; units that say
    they run no code are handed no sandbox, so they do not need one that starts."""
    from gym_repost.errors import SandboxUnavailableError
    from gym_repost.sandbox import sandbox_config

    def runs(item: int, box: Sandbox | None) -> int:
        assert box is not None
        box.run(files={}, command=["python3", "-c", "pass"], timeout=30.0)
        return item

    done: list[int] = []
    with LocalExecutor(1, sandbox_config("local", python="/nonexistent/python3")) as executor:
        for _ in range(2):  # not remembered: the next map tries again, and says why again
            with pytest.raises(SandboxUnavailableError, match="interpreter not found"):
                executor.map(runs, [1, 2, 3], done.append)
        assert done == [] and executor.sandbox is None  # stopped before the first unit
        assert executor.map(RunsNothing(), [1, 2, 3], done.append) == [1, 2, 3] and done == [1, 2, 3]


def test_a_missing_ray_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(ConfigError, match=re.escape('pip install "gym-repost[ray]"')):
        get_executor("ray")
    with pytest.raises(ConfigError, match="--ray-address applies to --executor ray"):
        get_executor("local", address="auto")
    with pytest.raises(ConfigError, match="choose local or ray"):
        get_executor("dask")


def test_the_command_line_prints_the_install_command_unmangled(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['ray'] = None; from gym_repost.cli import main; "
        f"sys.argv = ['gym-repost', 'validate', {str(ROOT / 'tasks' / 'demo.jsonl')!r}, '--executor', 'ray']; main()"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and 'pip install "gym-repost[ray]"' in result.stderr


def test_importing_a_benchmark_on_ray_is_refused_by_name(tmp_path: Path) -> None:
    """An import runs nothing: ``--executor ray`` would be ignored, so it is refused."""
    command = [sys.executable, "-m", "gym_repost.cli", "build", "humaneval", "-o", str(tmp_path / "t.jsonl")]
    result = subprocess.run([*command, "--executor", "ray"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "--executor ray builds repositories" in result.stderr
    assert "not humaneval" in result.stderr and not (tmp_path / "t.jsonl").exists()


def test_a_local_executor_owns_the_sandbox_it_builds_and_borrows_one_it_is_given(sandbox: Sandbox) -> None:
    from gym_repost.sandbox import sandbox_config

    def echo(item: int, box: Sandbox | None) -> str:
        assert box is not None
        return box.run(files={}, command=["python3", "-c", f"print({item})"], timeout=30.0).stdout.strip()

    with LocalExecutor(2, sandbox_config("local", workers=2)) as owner:
        assert owner.map(RunsNothing(), [1, 2]) == [1, 2] and owner.sandbox is None  # it says so: no start
        assert owner.map(echo, [1, 2, 3]) == ["1", "2", "3"]
        built = owner.sandbox
        assert isinstance(built, LocalSandbox) and built is not sandbox and built.worker_pids()
        assert owner.map(echo, [4]) == ["4"] and owner.sandbox is built  # started once
    assert owner.sandbox is None and not built.worker_pids()  # closed with the executor
    with LocalExecutor(2, sandbox) as borrower:
        assert borrower.map(echo, [4]) == ["4"] and borrower.sandbox is sandbox
        assert borrower.map(RunsNothing(), [5]) == [5]
    assert sandbox.run(files={}, command=["true"], timeout=30.0).returncode == 0  # still open
    with pytest.raises(ConfigError, match="runs code in a sandbox"):
        need_sandbox(None, "validation")
