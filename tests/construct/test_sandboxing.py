"""Stage 4, sandboxing: the standalone module, its checks, and real runs in the sandbox."""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from pathlib import Path

from gym_repost.analysis.source import dedent_code, find_function, function_source
from gym_repost.construct.dependencies import build_index, slice_dependencies
from gym_repost.construct.extract import KEEP_OPTIONS, extract_candidates
from gym_repost.construct.sandboxing import assemble_module, sandbox_script
from gym_repost.construct.stages import (
    Candidate,
    DependencySlice,
    Drop,
    Fragment,
    SandboxedScript,
    SourceRepository,
)
from gym_repost.sandbox import Sandbox
from tests.construct.test_dependencies import GEO

DEMO = Path(__file__).resolve().parents[2] / "tasks" / "demo" / "repo"


def repository(files: dict[str, str], root: Path) -> SourceRepository:
    return SourceRepository(name="t", version=None, source=str(root), root=root, files=files)


def scripts_of(repo: SourceRepository) -> dict[str, SandboxedScript]:
    candidates, _, _ = extract_candidates(repo, max_candidates=1000, keep=KEEP_OPTIONS)
    index = build_index(repo)
    out = {}
    for candidate in candidates:
        sliced = slice_dependencies(index, candidate)
        assert isinstance(sliced, DependencySlice), sliced
        script = sandbox_script(sliced)
        assert isinstance(script, SandboxedScript), script
        out[candidate.key] = script
    return out


def _target(source: str = "def f(x):\n    return g(x) + 1") -> Candidate:
    return Candidate(
        file="pkg/m.py",
        module="pkg.m",
        qualname="f",
        name="f",
        class_name=None,
        kind="function",
        start_line=3,
        def_line=3,
        end_line=4,
        signature="def f(x):",
        decorators=(),
        docstring=None,
        source=source,
        body_statements=1,
    )


def test_the_module_layout() -> None:
    target = _target()
    sliced = DependencySlice(
        target=target,
        fragments=[
            Fragment("pkg/h.py", "pkg.h", "h", "function", "def h(y):\n    return y", 1, 2),
            Fragment("pkg/m.py", "pkg.m", "f", "function", target.source, 3, 4),
        ],
        external_imports=["from __future__ import annotations", "import math"],
        shims=["g = h"],
    )
    module = assemble_module(sliced)
    assert module == textwrap.dedent("""\
        # Sandboxed module for pkg/m.py::f (module pkg.m), assembled by
        # gym-repost from the repository's own code: the fragments below are copied from
        # pkg/h.py, pkg/m.py in dependency order,
        # with the repository's imports resolved inside this file.

        from __future__ import annotations


        import math


        # from pkg/h.py:1
        def h(y):
            return y


        # from pkg/m.py:3
        def f(x):
            return g(x) + 1


        # names the fragments use under another spelling
        g = h
        """)
    script = sandbox_script(sliced)
    assert isinstance(script, SandboxedScript) and script.module == module


def test_a_changed_target_or_a_module_that_does_not_compile_is_a_drop() -> None:
    target = _target()
    altered = DependencySlice(
        target=target,
        fragments=[Fragment("pkg/m.py", "pkg.m", "f", "function", "def f(x):\n    return g(x) + 2", 3, 4)],
    )
    drop = sandbox_script(altered)
    assert isinstance(drop, Drop) and (drop.stage, drop.reason) == ("sandboxing", "target altered")
    missing = DependencySlice(target=target, fragments=[])
    assert sandbox_script(missing).reason == "target altered"  # type: ignore[union-attr]
    # parses, but does not compile: the target text is fine, a fragment is not
    bad = DependencySlice(
        target=target,
        fragments=[
            Fragment("pkg/z.py", "pkg.z", "z", "other", "nonlocal q", 1, 1),
            Fragment("pkg/m.py", "pkg.m", "f", "function", target.source, 3, 4),
        ],
    )
    drop = sandbox_script(bad)
    assert isinstance(drop, Drop) and drop.reason == "script does not compile"
    assert "nonlocal" in drop.detail


def test_the_target_text_is_the_original(tmp_path: Path) -> None:
    repo = repository({k: textwrap.dedent(v) for k, v in GEO.items()}, tmp_path)
    for key, script in scripts_of(repo).items():
        target = script.target
        span = find_function(script.module, target.qualname)
        assert span is not None, key
        assert function_source(script.module, span) == dedent_code(target.source), key
        ast.parse(script.module)


def test_scripts_run_alone_and_behave_like_the_repository(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = repository({k: textwrap.dedent(v) for k, v in GEO.items()}, tmp_path)
    scripts = scripts_of(repo)
    calls = {  # hand-computed from the repository's code
        "app/fmt.py::summary": ("summary([3, 0, 1])", "0 3 9"),  # sorted, scaled by 3, clamped to 30
        "app/report.py::square_text": ("square_text(2)", "Shape: 4"),
        "geo/core.py::scale": ("scale(4, 'km')", "30"),
        "geo/shapes.py::Square.describe": ("(Square(0.5).describe(), REGISTRY)", "('Shape: 0.25', ['Square'])"),
    }
    for key, (call, expected) in calls.items():
        run = sandbox.run(
            files={"m.py": scripts[key].module + f"\nprint({call})\n"}, command=["python3", "m.py"], timeout=10
        )
        assert (run.returncode, run.stdout.strip()) == (0, expected), (key, run.stderr)
    for key, script in scripts.items():
        run = sandbox.run(files={"m.py": script.module}, command=["python3", "m.py"], timeout=10)
        assert run.returncode == 0, (key, run.stderr)


def test_every_demo_candidate_becomes_a_module_that_runs_in_the_sandbox(sandbox: Sandbox) -> None:
    files = {str(p.relative_to(DEMO)): p.read_text(encoding="utf-8") for p in DEMO.rglob("*.py")}
    scripts = scripts_of(repository(files, DEMO))
    assert len(scripts) == 33
    for key, script in scripts.items():
        run = sandbox.run(files={"m.py": script.module}, command=["python3", "m.py"], timeout=10)
        assert run.returncode == 0, (key, run.stderr)
    # the module holds what the demo's hand-written script needs, and runs its test
    reserve = scripts["shopkit/inventory.py::Inventory.reserve"].module
    hand_written = (DEMO.parent / "scripts" / "inventory_reserve.py").read_text(encoding="utf-8")
    test = "import copy\n\n\n" + hand_written[hand_written.index("def _make_inventory") :]
    candidate = _copy_as_candidate(reserve, "Inventory.reserve")
    run = sandbox.run(files={"m.py": candidate + "\n\n" + test}, command=["python3", "m.py"], timeout=10)
    assert run.returncode == 0, run.stderr


def _copy_as_candidate(module: str, qualname: str) -> str:
    """The module with the ground truth inserted as ``{name}_new_implementation`` (what
    the harness does with a correct candidate)."""
    from gym_repost.analysis.source import indent_code, rename_definition

    span = find_function(module, qualname)
    assert span is not None
    text = function_source(module, span)
    renamed = rename_definition(
        text, dataclasses.replace(span, def_line=span.def_line - span.start + 1), f"{span.name}_new_implementation"
    )
    lines = module.split("\n")
    lines[span.end : span.end] = ["", indent_code(renamed, span.indent)]
    return "\n".join(lines)
