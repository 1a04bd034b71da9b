"""The shipped demo task set (tasks/demo.jsonl, built from tasks/demo/manifest.toml).

These checks need no sandbox: the evaluation scripts are run, where needed, as plain
subprocesses in a temporary directory (the scripts are our own, so they are trusted).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gym_repost.analysis.source import find_function, function_source
from gym_repost.construct.importers.manifest import import_manifest
from gym_repost.harness import do_nothing_candidate, reference_for, run_function_tests
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask, load_tasks

ROOT = Path(__file__).resolve().parents[1]
DEMO_JSONL = ROOT / "tasks" / "demo.jsonl"
MANIFEST = ROOT / "tasks" / "demo" / "manifest.toml"
REPO = ROOT / "tasks" / "demo" / "repo"


@pytest.fixture(scope="module")
def tasks() -> list[FunctionTask]:
    loaded = load_tasks(DEMO_JSONL, strict=True)
    return list(loaded)


def _target_node(task: FunctionTask) -> ast.FunctionDef:
    span = find_function(task.evaluation.script, task.target.qualname)
    assert span is not None
    return span.node  # type: ignore[return-value]


def test_at_least_twelve_tasks_with_unique_names(tasks: list[FunctionTask]) -> None:
    assert len(tasks) >= 12
    names = [t.name for t in tasks]
    assert len(set(names)) == len(names)
    assert all(name.startswith("demo/") for name in names)


def test_ids_are_content_hashes(tasks: list[FunctionTask]) -> None:
    for task in tasks:
        assert re.fullmatch(r"[0-9a-f]{16}", task.id)
        assert task.id == task.content_hash(), task.name


def test_jsonl_is_up_to_date_with_the_manifest(tasks: list[FunctionTask]) -> None:
    built = list(import_manifest(MANIFEST))
    errors = [item for item in built if isinstance(item, Exception)]
    assert not errors
    rebuilt = [item.with_id().id for item in built]  # type: ignore[union-attr]
    assert rebuilt == [t.id for t in tasks], (
        "tasks/demo.jsonl is stale: run `gym-repost build tasks/demo/manifest.toml -o tasks/demo.jsonl`"
    )


def test_the_task_mix_is_present(tasks: list[FunctionTask]) -> None:
    methods = [t for t in tasks if t.target.class_name]
    assert methods
    assert {"staticmethod", "classmethod"} <= {d for t in tasks for d in t.target.decorators}
    assert any(t.evaluation.files for t in tasks)
    assert any("urlopen" in t.evaluation.script and "mock" in t.evaluation.script for t in tasks)
    generators = [t for t in tasks if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(_target_node(t)))]
    assert generators
    recursive = [
        t for t in tasks if any(isinstance(n, ast.Name) and n.id == t.target.name for n in ast.walk(_target_node(t)))
    ]
    assert recursive
    assert any("@dataclass" in t.evaluation.script for t in tasks)
    assert any("open(" in t.target.source for t in tasks)
    # a method whose class inherits from another class of the repository
    inherited = []
    for task in methods:
        tree = ast.parse(task.evaluation.script)
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        owner = classes.get(task.target.class_name or "")
        if owner and any(isinstance(b, ast.Name) and b.id in classes for b in owner.bases):
            inherited.append(task)
    assert inherited
    # a few targets are substantial
    assert sum(1 for t in tasks if t.target.source.count("\n") >= 20) >= 3


def test_every_task_has_enough_assertions(tasks: list[FunctionTask]) -> None:
    for task in tasks:
        assert task.metadata.num_tests >= 1, task.name
        assert task.metadata.num_asserts >= 3, task.name
        assert task.evaluation.test_function == f"test_{task.target.name}"


def test_scripts_are_standalone_and_end_with_the_main_block(tasks: list[FunctionTask]) -> None:
    for task in tasks:
        script = task.evaluation.script
        assert not re.search(r"^\s*(from|import)\s+shopkit\b", script, re.MULTILINE), task.name
        assert task.metadata.external_packages == [], task.name
        last = ast.parse(script).body[-1]
        assert isinstance(last, ast.If) and "__main__" in ast.unparse(last.test), task.name
        calls = [s for s in last.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)]
        assert [ast.unparse(c.value.func) for c in calls] == [task.evaluation.test_function]


def test_targets_are_copied_byte_for_byte_from_the_repository(tasks: list[FunctionTask]) -> None:
    for task in tasks:
        source = (REPO / task.provenance.file).read_text(encoding="utf-8")
        span = find_function(source, task.provenance.qualname)
        assert span is not None, task.name
        assert function_source(source, span) == task.target.source, task.name
        view = task.repository.files[task.repository.target_file]
        assert "writing this function is the task" in view
        assert task.target.source not in view


def _top_level_definitions(source: str) -> dict[str, str]:
    """Name to source text of every top-level def, class and single-name assignment."""
    lines = source.split("\n")
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        name = getattr(node, "name", None)
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        if name is None:
            continue
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
        found[name] = "\n".join(lines[start - 1 : node.end_lineno])
    return found


def test_dependencies_are_copied_byte_for_byte_from_the_repository(tasks: list[FunctionTask]) -> None:
    repository: dict[str, str] = {}
    for path in sorted((REPO / "shopkit").glob("*.py")):
        for name, text in _top_level_definitions(path.read_text(encoding="utf-8")).items():
            assert name not in repository, f"{name} is defined twice in shopkit"
            repository[name] = text
    for task in tasks:
        copied = _top_level_definitions(task.evaluation.script)
        shared = sorted(set(copied) & set(repository))
        assert (task.target.class_name or task.target.name) in shared, task.name
        for name in shared:
            assert copied[name] == repository[name], f"{task.name}: {name} differs from shopkit"


def test_provenance_and_license(tasks: list[FunctionTask]) -> None:
    assert "gym-repost authors" in (REPO / "LICENSE").read_text(encoding="utf-8")
    for task in tasks:
        assert task.provenance.license == "MIT"
        assert task.provenance.repo == "shopkit"
        assert task.repository.complete
        assert "LICENSE" in task.repository.files


def test_ground_truth_passes_and_a_do_nothing_candidate_fails(tasks: list[FunctionTask], sandbox: Sandbox) -> None:
    for task in tasks:
        good = run_function_tests(sandbox, task, task.ground_truth)
        assert good.passed, f"{task.name}: {good.to_text()}"
        assert not reference_for(sandbox, task).nondeterministic, task.name
        bad = run_function_tests(sandbox, task, do_nothing_candidate(task))
        assert not bad.passed, task.name


def test_demo_repository_imports_and_its_doctests_pass() -> None:
    code = (
        "import doctest, decimal, shopkit, shopkit.money, shopkit.pricing\n"
        "failed = 0\n"
        "for module in (shopkit, shopkit.money, shopkit.pricing):\n"
        "    failed += doctest.testmod(module, optionflags=doctest.ELLIPSIS,\n"
        "                              extraglobs={'Decimal': decimal.Decimal}).failed\n"
        "raise SystemExit(failed)\n"
    )
    result = subprocess.run(
        [sys.executable, "-B", "-c", code], check=False, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
