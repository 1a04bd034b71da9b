"""The package's shape: no import cycles between its subpackages.

Only module-level imports count (what runs when a module is imported); imports under
``if TYPE_CHECKING:`` and inside functions do not. A subpackage is a directory of
``gym_repost`` or a top-level module (``gym_repost/tools.py`` is ``tools``).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gym_repost"


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "gym_repost" or len(parts) < 2:
        return None
    return parts[1]


def _module_level_imports(tree: ast.Module) -> list[str]:
    found: list[str] = []

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append(node.module)
                found.extend(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return found


def import_graph() -> dict[str, dict[str, set[str]]]:
    """Subpackage -> imported subpackage -> the modules that import it."""
    units = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    units |= {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, dict[str, set[str]]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        source = _unit(module)
        if source is None or source == "__init__":
            continue
        for name in _module_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            target = _unit(name)
            if target in units and target != source:
                graph.setdefault(source, {}).setdefault(target, set()).add(module)
    return graph


def cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The strongly connected components with more than one subpackage (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, {}):
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            strong(node)
    return found


def test_no_import_cycles_between_subpackages() -> None:
    graph = import_graph()
    found = cycles(graph)
    detail = [
        f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})"
        for component in found
        for a in component
        for b in component
        if b in graph.get(a, {})
    ]
    assert not found, "import cycles between subpackages:\n" + "\n".join(detail)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {
        "a": {"b": {"gym_repost.a.x"}},
        "b": {"c": {"gym_repost.b.y"}},
        "c": {"a": {"gym_repost.c.z"}},
        "d": {"a": {"gym_repost.d.w"}},
    }
    assert cycles(graph) == [["a", "b", "c"]]


def declared_imports() -> dict[str, set[str] | None]:
    """Each subpackage's "May import: a, b." line from its ``__init__`` docstring (None: any)."""
    declared: dict[str, set[str] | None] = {}
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        lines = [ln for ln in doc.splitlines() if ln.startswith("May import: ")]
        assert len(lines) == 1, (
            f"{init}: the docstring must say once what the subpackage may import ('May import: ...')"
        )
        names = lines[0].removeprefix("May import: ").rstrip(".")
        if names.startswith("any part"):
            declared[init.parent.name] = None
        elif names.startswith("nothing"):
            declared[init.parent.name] = set()
        else:
            declared[init.parent.name] = {n.strip() for n in names.split(",")}
    return declared


def test_each_subpackage_imports_only_what_its_docstring_allows() -> None:
    graph = import_graph()
    declared = declared_imports()
    wrong = [
        f"{unit} imports {target} ({', '.join(sorted(modules))}) but its docstring allows {sorted(allowed)}"
        for unit, allowed in declared.items()
        if allowed is not None
        for target, modules in graph.get(unit, {}).items()
        if target not in allowed
    ]
    assert not wrong, "\n".join(wrong)


def test_nothing_imports_the_cli() -> None:
    graph = import_graph()
    assert not [unit for unit, targets in graph.items() if "cli" in targets and unit != "cli"]


def test_the_bottom_layer_imports_nothing_above_it() -> None:
    """Pure source analysis (parsing, source edits, packages, mutation) runs nothing and knows no task."""
    assert set(import_graph().get("analysis", {})) <= {"errors"}


def test_only_validation_and_the_audit_judge_host_made_candidates_in_batches() -> None:
    """``run_host_made`` runs candidates beside the tests, which a policy's code could fool
    (tests/harness/test_playback.py shows one that does): no reward path may call it. Its
    users judge mutants the host made of the ground truth: ``validate``'s kill rate, and
    the audit's known-wrong mutants (whose batch verdicts ``benchmarks/audit_speed.py``
    checks against runs of their own)."""
    users = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "run_host_made" in path.read_text("utf-8") and path.name != "__init__.py"
    )
    assert users == ["construct/audit.py", "harness/validation.py"]
