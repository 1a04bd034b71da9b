"""Assemble a :class:`~gym_repost.task.FunctionTask` from an evaluation script.

Every importer and builder ends here: given the evaluation script (the original target,
its dependencies, mocks and ``test_{name}``), the target's qualified name and the
repository files, it locates the target, records where the candidate goes, removes the
target's body from the agent's view of the repository and measures the metadata.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source import (
    decorators_text,
    find_function,
    function_source,
    replace_body,
    signature_text,
)
from gym_repost.context import BODY_PLACEHOLDER, redact_target
from gym_repost.errors import BuildError
from gym_repost.task import (
    Evaluation,
    FunctionTask,
    Provenance,
    RepositoryView,
    Target,
    TaskMetadata,
)

_STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def external_imports(tree: ast.Module, local: frozenset[str] = frozenset()) -> list[str]:
    """Top-level import names of a module outside the standard library and ``local``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if n not in _STDLIB and n not in local)


def _is_assertion(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("assert")


def count_tests(tree: ast.Module) -> tuple[int, int]:
    """``(test functions, assertions)`` of a script.

    Assertions count inside the test functions and inside the top-level functions those
    call by name (HumanEval's ``check``).
    """
    top = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    tests = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
    ]
    scope: dict[int, ast.AST] = {id(t): t for t in tests}
    for t in tests:
        for call in ast.walk(t):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in top:
                helper = top[call.func.id]
                if not helper.name.endswith("_new_implementation"):
                    scope.setdefault(id(helper), helper)
    asserts = sum(1 for node in scope.values() for n in ast.walk(node) if _is_assertion(n))
    return len(tests), asserts


def _defines(node: ast.stmt, name: str) -> bool:
    """True for ``def name`` and for assignments that bind ``name`` or ``X.name``."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name == name
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    return any(
        (isinstance(t, ast.Name) and t.id == name) or (isinstance(t, ast.Attribute) and t.attr == name) for t in targets
    )


def drop_definition(script: str, name: str, tree: ast.Module | None = None) -> tuple[str, int]:
    """Remove every definition of ``name`` at any depth (``def name``, ``name = ...``,
    ``Cls.name = ...``); return the script and how many were removed.

    A block left empty gets a ``pass`` so the script still parses. ``tree``: the script's
    syntax tree, when the caller has it.
    """
    tree = tree if tree is not None else parse_python(script)
    spans: list[tuple[int, int, bool]] = []
    for parent in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if not isinstance(block, list):
                continue
            for node in block:
                if _defines(node, name):
                    start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
                    alone = all(_defines(n, name) for n in block)
                    spans.append((start, node.end_lineno or node.lineno, alone))
    lines = script.split("\n")
    for start, end, alone in sorted(spans, reverse=True):
        indent = lines[start - 1][: len(lines[start - 1]) - len(lines[start - 1].lstrip())]
        lines[start - 1 : end] = [indent + "pass"] if alone else []
    return "\n".join(lines), len(spans)


def repository_view(files: Mapping[str, str], target_file: str, qualname: str, complete: bool) -> RepositoryView:
    """The repository as the agent sees it: the target's body replaced by a placeholder.

    Raises:
        BuildError: the target file is missing or the target is not found in it.
    """
    if target_file not in files:
        raise BuildError(f"the repository has no file {target_file!r} holding the target")
    source = files[target_file]
    span = find_function(source, qualname)
    if span is None:
        raise BuildError(f"{qualname} not found in {target_file}")
    view = dict(files)
    view[target_file] = replace_body(source, span, BODY_PLACEHOLDER)
    return RepositoryView(files=view, target_file=target_file, complete=complete)


def target_from_script(script: str, qualname: str, tree: ast.Module | None = None) -> tuple[Target, int, str]:
    """The target as written in the script, the candidate's insertion line and indent.

    Raises:
        BuildError: the script does not define ``qualname``.
    """
    span = find_function(script, qualname, tree)
    if span is None:
        raise BuildError(f"the evaluation script does not define {qualname}")
    target = Target(
        name=span.name,
        qualname=qualname,
        class_name=span.class_name,
        signature=signature_text(script, span),
        decorators=decorators_text(span),
        docstring=span.docstring,
        source=function_source(script, span),
    )
    return target, span.end, span.indent


@dataclass(frozen=True)
class ScriptFacts:
    """What a task takes from its evaluation script alone (see :func:`script_facts`)."""

    script: str
    """The script without a ``{name}_new_implementation`` of its own."""
    removed: int
    """Definitions of ``{name}_new_implementation`` removed."""
    target: Target
    insert_line: int
    indent: str
    test_function: str
    num_tests: int
    num_asserts: int
    imports: tuple[str, ...]
    """Top-level import names outside the standard library, sorted."""


@lru_cache(maxsize=64)
def script_facts(script: str, qualname: str) -> ScriptFacts:
    """The script's analysis for the target ``qualname``, made once per script: a build
    makes a task from the same script several times (the test generator's check, the
    builder's run and its submission), and the analysis of a long script is most of the cost.

    Raises:
        BuildError: the script does not parse, or lacks the target or its test function.
    """
    short = qualname.split(".")[-1]
    try:
        tree = parse_python(script)
        script, removed = drop_definition(script, f"{short}_new_implementation", tree)
        if removed:
            tree = parse_python(script)
    except SyntaxError as exc:
        raise BuildError(f"the evaluation script does not parse: line {exc.lineno}: {exc.msg}") from None
    target, insert_line, indent = target_from_script(script, qualname, tree)
    test_function = f"test_{short}"
    if not any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == test_function for n in ast.walk(tree)
    ):
        raise BuildError(f"the evaluation script has no {test_function}()")
    num_tests, num_asserts = count_tests(tree)
    imports = tuple(external_imports(tree))
    return ScriptFacts(script, removed, target, insert_line, indent, test_function, num_tests, num_asserts, imports)


def make_function_task(
    *,
    name: str,
    provenance: Provenance,
    script: str,
    repository: RepositoryView,
    context: str = "",
    prompt: str | None = None,
    extra_files: Mapping[str, str] | None = None,
    requirements: list[str] | None = None,
    timeout: float = 10.0,
    standalone: bool = True,
    local_modules: frozenset[str] = frozenset(),
    metadata: Mapping[str, object] | None = None,
) -> FunctionTask:
    """Build a function task from its evaluation script.

    If the script already defines ``{name}_new_implementation`` (some published scripts
    do), that definition is removed so the candidate is what gets tested; a note says so.

    Raises:
        BuildError: the script does not parse, or lacks the target or its test function.
    """
    qualname = provenance.qualname
    notes = list((metadata or {}).get("notes", []))  # type: ignore[call-overload]
    facts = script_facts(script, qualname)
    if facts.removed:
        notes.append(
            f"the published script defined {qualname.split('.')[-1]}_new_implementation itself "
            f"({facts.removed}x); removed, so that the candidate is what gets tested"
        )
    extra: dict[str, Any] = {k: v for k, v in (metadata or {}).items() if k != "notes"}
    return FunctionTask(
        name=name,
        provenance=provenance,
        target=facts.target.model_copy(deep=True),
        repository=repository,
        evaluation=Evaluation(
            script=facts.script,
            insert_line=facts.insert_line,
            indent=facts.indent,
            test_function=facts.test_function,
            timeout=timeout,
            files=dict(extra_files or {}),
            requirements=list(requirements or []),
        ),
        context=redact_target(context, repository.target_file, qualname),
        prompt=prompt,
        metadata=TaskMetadata(
            num_tests=facts.num_tests,
            num_asserts=facts.num_asserts,
            standalone=standalone,
            external_packages=[n for n in facts.imports if n not in local_modules],
            notes=notes,
            **extra,
        ),
    ).with_id()
