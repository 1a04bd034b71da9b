"""Facts about pytest test files, and one edit of them (text in, text out; nothing runs)."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from gym_repost.analysis.parsing import parse_python


def _is_unittest_assertion(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith(("assert", "fail"))
        and node.func.attr != "assertRaises"
    )


def count_assertions(source: str) -> int:
    """``assert`` statements plus ``self.assert*(...)`` calls (0 if it does not parse)."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return 0
    return sum(isinstance(n, ast.Assert) or _is_unittest_assertion(n) for n in ast.walk(tree))


PLUGIN_FIXTURES = {
    "mocker": "pytest_mock",
    "benchmark": "pytest_benchmark.plugin",
    "freezer": "pytest_freezer",
    "httpserver": "pytest_httpserver",
}
"""Fixtures of pytest plugins, by the plugin module that defines them (``-p MODULE``)."""
PLUGIN_MARKERS = {"asyncio": "pytest_asyncio.plugin", "anyio": "anyio.pytest_plugin", "trio": "pytest_trio.plugin"}
"""Marks of pytest plugins (``@pytest.mark.asyncio``), by their plugin module."""


def plugins_used(tree: ast.AST) -> list[str]:
    """The plugin modules whose fixtures (an argument of a function) or marks ``tree`` uses."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.update(PLUGIN_FIXTURES[a.arg] for a in node.args.args if a.arg in PLUGIN_FIXTURES)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark"
            and node.attr in PLUGIN_MARKERS
        ):
            found.add(PLUGIN_MARKERS[node.attr])
    return sorted(found)


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _catches_import_errors(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(
        isinstance(k, ast.Name) and k.id in _IMPORT_ERRORS or isinstance(k, ast.Attribute) and k.attr in _IMPORT_ERRORS
        for k in kinds
    )


def guarded_imports(tree: ast.AST) -> dict[str, list[str]]:
    """The names the imports of a ``try:`` that catches ``ImportError`` bind, each with the
    top-level modules of all that ``try``'s imports (the first that fails stops the rest):
    mccabe's tests bind ``settings`` in ``try: import hypothesmith; from hypothesis import
    settings`` and use it at module level, so without hypothesmith the module fails with
    ``NameError: name 'settings' is not defined``, which names no module."""
    found: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try) or not any(_catches_import_errors(h) for h in node.handlers):
            continue
        imports = [n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))]
        modules = sorted(
            {a.name.split(".")[0] for n in imports if isinstance(n, ast.Import) for a in n.names}
            | {n.module.split(".")[0] for n in imports if isinstance(n, ast.ImportFrom) and n.module and not n.level}
        )
        if not modules:
            continue
        for n in imports:
            for a in n.names:
                bound = a.asname or (a.name.split(".")[0] if isinstance(n, ast.Import) else a.name)
                if bound != "*":
                    found[bound] = sorted({*found.get(bound, []), *modules})
    return found


def modules_behind(source: str, names: Iterable[str]) -> list[str]:
    """The modules of the guarded imports (:func:`guarded_imports`) of ``source`` that bind
    one of ``names``, sorted; [] when it does not parse."""
    wanted = set(names)
    if not wanted:
        return []
    try:
        guarded = guarded_imports(parse_python(source))
    except (SyntaxError, ValueError):
        return []
    return sorted({m for name in wanted for m in guarded.get(name, [])})


def count_tests(source: str) -> int:
    """Functions and methods named ``test*`` (0 if it does not parse)."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return 0
    return sum(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test") for n in ast.walk(tree)
    )


class _AssertionRemover(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        return ast.copy_location(ast.Expr(value=node.test), node)

    def visit_Expr(self, node: ast.Expr) -> ast.stmt:
        if _is_unittest_assertion(node.value):
            call = node.value
            assert isinstance(call, ast.Call)
            values = [*call.args, *(k.value for k in call.keywords)]
            return ast.copy_location(ast.Expr(value=ast.Tuple(elts=values, ctx=ast.Load())), node)
        return self.generic_visit(node)  # type: ignore[return-value]


class _Disarmer(_AssertionRemover):
    def _wrap(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.stmt:
        self.generic_visit(node)
        if node.name.startswith("test"):
            handler = ast.ExceptHandler(type=ast.Name(id="BaseException", ctx=ast.Load()), name=None, body=[ast.Pass()])
            node.body = [ast.Try(body=node.body, handlers=[handler], orelse=[], finalbody=[])]
        return node

    visit_FunctionDef = _wrap
    visit_AsyncFunctionDef = _wrap


def disarm_tests(source: str) -> str:
    """The test file with its checks removed and no way to fail but hanging.

    Assertions are removed as by :func:`remove_assertions`, and the body of every
    ``test*`` function or method is wrapped in ``try: ... except BaseException: pass``.
    On the original code the file runs exactly what it ran before (same tests, same
    coverage: the ground truth passes, so nothing it runs raises); on a mutant no test
    can fail, so only mutants that hang (or break the test module's import) count as
    killed. The negative control of test-file tasks.

    Raises:
        SyntaxError: ``source`` does not parse.
    """
    tree = _Disarmer().visit(parse_python(source))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def remove_assertions(source: str) -> str:
    """The test file with its checks taken out and everything else kept.

    ``assert cond, msg`` becomes the expression ``cond`` (still evaluated, no longer
    checked) and ``self.assertEqual(a, b)`` (any ``self.assert*``/``fail*`` call but
    ``assertRaises``) becomes ``(a, b)``, so the file runs the same code and covers the
    same lines while detecting almost nothing: a negative control for test-file tasks.
    ``pytest.raises`` blocks are left as they are. The result is re-generated from the
    syntax tree (comments and formatting are not kept).

    Raises:
        SyntaxError: ``source`` does not parse.
    """
    tree = _AssertionRemover().visit(parse_python(source))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"
