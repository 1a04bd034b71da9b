"""References kept on disk: made once, read by a later process, remade when anything they depend on changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from sandboxes import CountingSandbox

import gym_repost.harness as harness
from gym_repost.harness import reference_for, reference_store, run_function_tests
from gym_repost.harness.verdict import ReferenceCache
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask
from tests.conftest import FUNCTION_SCRIPT, REPO_FILE, build_task


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GYM_REPOST_REFERENCES", str(tmp_path / "references"))
    monkeypatch.setattr(harness, "_REFERENCES", ReferenceCache())
    return tmp_path / "references"


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a later process sees: nothing in memory, the store on disk."""
    monkeypatch.setattr(harness, "_REFERENCES", ReferenceCache())


def test_a_later_process_reads_the_reference_instead_of_making_it(
    store: Path, sandbox: Sandbox, function_task: FunctionTask, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = CountingSandbox(sandbox)
    made = reference_for(first, function_task)
    assert made.passed and first.runs == 2 and len(list(store.rglob("*.json"))) == 1  # a run and its replay
    _new_process(monkeypatch)
    later = CountingSandbox(sandbox)
    assert reference_for(later, function_task) == made and later.runs == 0
    wrong = function_task.ground_truth.replace("total += clamp(v * SCALE, 0, cap)", "total += 1")
    assert not run_function_tests(later, function_task, wrong).passed and later.runs == 1


def _score_task(script: str) -> FunctionTask:
    files = {
        "tiny/score.py": REPO_FILE,
        "tiny/util.py": "def clamp(x, low, high):\n    return x\n",
        "tiny/__init__.py": "",
    }
    return build_task(script, "score", files, "tiny/score.py")


def test_a_reference_that_timed_out_is_not_made_again_by_the_process_nor_kept_on_disk(
    store: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = _score_task("import time\n" + FUNCTION_SCRIPT.replace("    test_score()", "    time.sleep(30)"))
    slow = slow.model_copy(update={"evaluation": slow.evaluation.model_copy(update={"timeout": 1.0})})
    counting = CountingSandbox(sandbox)
    first = run_function_tests(counting, slow, "def score(values, cap=100):\n    return 0\n")
    assert first.status == "timeout" and counting.runs == 1
    second = run_function_tests(counting, slow, "def score(values, cap=100):\n    return 1\n")
    assert second.status == "timeout" and counting.runs == 1  # the other samples do not wait again
    assert not list(store.rglob("*.json"))
    _new_process(monkeypatch)
    assert run_function_tests(counting, slow, slow.ground_truth).status == "timeout" and counting.runs == 2


def test_a_failing_reference_other_than_a_timeout_is_tried_again(store: Path, sandbox: Sandbox) -> None:
    broken = _score_task("import not_installed_here\n" + FUNCTION_SCRIPT)
    counting = CountingSandbox(sandbox)
    assert not reference_for(counting, broken).passed and counting.runs == 1
    assert not reference_for(counting, broken).passed and counting.runs == 2  # an install may have fixed it


def test_a_changed_ground_truth_or_limits_make_a_new_reference(
    store: Path, sandbox: Sandbox, function_task: FunctionTask, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference_for(sandbox, function_task)
    target = function_task.target.model_copy(update={"source": function_task.target.source + "\n"})
    changed = function_task.model_copy(update={"target": target})
    assert changed.ground_truth != function_task.ground_truth
    assert reference_store.disk_key(sandbox, changed) != reference_store.disk_key(sandbox, function_task)
    tighter = {**sandbox.describe(), "limits": {"cpu_seconds": 1.0}}
    assert reference_store.disk_key(CountingSandbox(sandbox, tighter), function_task) != reference_store.disk_key(
        sandbox, function_task
    )
    other_process = {**sandbox.describe(), "workers": 7, "memory_cap": {"cgroup_parent": "/elsewhere"}}
    assert reference_store.disk_key(CountingSandbox(sandbox, other_process), function_task) == reference_store.disk_key(
        sandbox, function_task
    )


def test_a_docker_sandbox_keeps_references_in_memory_only(sandbox: Sandbox, function_task: FunctionTask) -> None:
    docker_like = {**sandbox.describe(), "backend": "docker"}
    assert reference_store.disk_key(CountingSandbox(sandbox, docker_like), function_task) is None


def test_an_unreadable_file_is_made_again_and_the_store_can_be_turned_off(
    store: Path, sandbox: Sandbox, function_task: FunctionTask, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference_for(sandbox, function_task)
    (path,) = store.rglob("*.json")
    path.write_text("{not json")
    _new_process(monkeypatch)
    counting = CountingSandbox(sandbox)
    assert reference_for(counting, function_task).passed and counting.runs == 2
    monkeypatch.setenv("GYM_REPOST_REFERENCES", "off")
    _new_process(monkeypatch)
    path.unlink()
    reference_for(sandbox, function_task)
    assert not path.exists()


def test_the_code_under_test_cannot_see_the_stored_references(
    store: Path, sandbox: Sandbox, function_task: FunctionTask
) -> None:
    reference_for(sandbox, function_task)
    (path,) = store.rglob("*.json")
    probe = "import os, sys\nfor p in sys.argv[1:]:\n    print(p, os.path.exists(p))\n"
    run = sandbox.run({"probe.py": probe}, ["python3", "probe.py", str(path), str(store)], timeout=20.0)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(path), "False", str(store), "False"]
    stealer = function_task.ground_truth.replace(
        '"""Sum of scaled values, each clamped to [0, cap]."""',
        f'"""Sum."""\n    import glob\n    return len(glob.glob({str(store)!r} + "/*/*.json")) * 1000',
    )
    assert not run_function_tests(sandbox, function_task, stealer).passed
