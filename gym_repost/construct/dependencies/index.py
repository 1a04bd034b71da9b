"""The repository index: every module parsed once into units (top-level statements) and
import bindings, ranked in import order."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gym_repost.analysis.parsing import parse_python
from gym_repost.construct.extract import ast_error, garbage_collector_paused, module_name
from gym_repost.construct.stages import SourceRepository

if TYPE_CHECKING:
    from gym_repost.construct.dependencies.collect import Link
    from gym_repost.construct.dependencies.resolve import Resolution

from gym_repost.construct.dependencies.names import (
    COLLECTION_ABC_METHODS,
    FUNCTIONS,
    SCOPES,
    STDLIB,
    TEMPLATE_FREE_MODULES,
    CodeNames,
    FragmentKind,
    ReferenceWalker,
    Scope,
    bound_names,
    code_names,
)


@dataclass(frozen=True)
class ImportBinding:
    """One name bound by an import statement.

    ``import a.b`` binds ``a`` to the module ``a`` (``attr`` None, ``dotted`` ``a.b``);
    ``import a.b as m`` binds ``m`` to ``a.b``; ``from a import x as y`` binds ``y`` to
    attribute ``x`` of ``a``. ``module`` is absolute (relative imports resolved), or
    empty when a relative import climbs out of the repository.
    """

    local: str
    module: str
    attr: str | None
    dotted: str
    repository: bool

    @property
    def statement(self) -> str:
        """The import as one normalised statement binding ``local``."""
        if self.attr is not None:
            alias = "" if self.local == self.attr else f" as {self.local}"
            return f"from {self.module} import {self.attr}{alias}"
        if self.module == self.local:
            return f"import {self.dotted}"
        if self.module == self.dotted:
            return f"import {self.dotted} as {self.local}"
        return f'{self.local} = __import__("{self.dotted}")'


@dataclass(eq=False)
class Unit:
    """A top-level statement of a module (or of a ``try`` branch chosen for it)."""

    module: str
    file: str
    position: int
    node: ast.stmt
    start_line: int
    end_line: int
    binds: frozenset[str]
    mutates: frozenset[str]
    imports: tuple[ImportBinding, ...] = ()
    """For a plain import statement: what it binds. Empty for every other unit."""
    conditional_import: bool = False
    """A compound statement holding a repository import (it cannot be sandboxed)."""
    kind: FragmentKind = "other"
    imported: tuple[str, ...] = ()
    """Top-level names of the modules imported inside the statement (absolute imports)."""


def _kind(node: ast.stmt, imports: list[ast.Import | ast.ImportFrom]) -> FragmentKind:
    if isinstance(node, FUNCTIONS):
        return "function"
    if isinstance(node, ast.ClassDef):
        return "class"
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return "assign"
    return "import" if imports else "other"


@dataclass(eq=False)
class ModuleInfo:
    """One parsed module of the repository."""

    name: str
    file: str
    is_package: bool
    lines: list[str]
    units: list[Unit]
    bindings: dict[str, list[Unit]]
    """Name -> the units binding it, in file order."""
    mutators: dict[str, list[Unit]]
    stars: list[ImportBinding]
    exports: frozenset[str] | None
    """``__all__`` when it is a literal list or tuple of strings."""
    futures: tuple[str, ...]
    typing_only: frozenset[str]
    rank: int = 0
    """Position in import order: a module comes after the modules it imports."""

    @property
    def lazy_annotations(self) -> bool:
        """``from __future__ import annotations`` is in effect."""
        return "annotations" in self.futures


@dataclass(eq=False)
class RepositoryIndex:
    """Every module of a repository, parsed once.

    Attributes:
        modules: dotted module name -> module.
        files: repository path -> module.
        top_level: first components of the repository's modules (an absolute import
            starting with one of them is a repository import).
        rejected: files ``ast`` cannot parse -> why (``line N: message``).
    """

    modules: dict[str, ModuleInfo]
    files: dict[str, ModuleInfo]
    top_level: frozenset[str]
    rejected: dict[str, str] = field(default_factory=dict)
    _names: dict[int, CodeNames] = field(default_factory=dict, repr=False)
    _members: dict[int, dict[str, list[ast.stmt]]] = field(default_factory=dict, repr=False)
    _member_names: dict[tuple[int, str], CodeNames] = field(default_factory=dict, repr=False)
    _class_scopes: dict[int, frozenset[str]] = field(default_factory=dict, repr=False)
    _texts: dict[tuple[int, frozenset[str] | None], str] = field(default_factory=dict, repr=False)
    _definitions: dict[tuple[str, str], list[Unit]] = field(default_factory=dict, repr=False)
    _external_bases: dict[int, bool] = field(default_factory=dict, repr=False)
    _template_methods: dict[int, frozenset[str]] = field(default_factory=dict, repr=False)
    _links: dict[tuple[int, str | None], list[Link]] = field(default_factory=dict, repr=False)
    _resolved: dict[tuple[str, str], Resolution] = field(default_factory=dict, repr=False)

    def definition_units(self, module: str, name: str) -> list[Unit]:
        """The units of ``module`` binding ``name`` (imports aside) and those mutating it."""
        key = (module, name)
        if key not in self._definitions:
            info = self.modules[module]
            self._definitions[key] = [u for u in info.bindings.get(name, []) if not u.imports] + info.mutators.get(
                name, []
            )
        return self._definitions[key]

    def extends_external(self, unit: Unit) -> bool:
        """Whether a class unit derives (maybe through repository classes) from a class
        outside the repository other than builtins and typing/abc helpers: code there
        may call any of its methods (``tzinfo.utcoffset``, ``JSONEncoder.default``)."""
        key = id(unit)
        if key not in self._external_bases:
            self._external_bases[key] = False  # a cycle of bases derives from nothing
            self._external_bases[key] = any(
                self._external_base(unit.module, base) for base in getattr(unit.node, "bases", [])
            )
        return self._external_bases[key]

    def _external_base(self, module: str, base: ast.expr) -> bool:
        resolution, _ = self._resolve_base(module, base)
        if resolution is None:
            return False
        if resolution.kind == "external" and resolution.binding is not None:
            return resolution.binding.module.split(".")[0] not in TEMPLATE_FREE_MODULES
        if resolution.kind == "definition":
            return any(
                self.extends_external(u)
                for u in self.definition_units(resolution.module, resolution.name)
                if isinstance(u.node, ast.ClassDef)
            )
        return False

    def _resolve_base(self, module: str, base: ast.expr) -> tuple[Resolution | None, tuple[str, ...]]:
        """What a base class expression names (``Base``, ``m.Base``, ``Base[T]``), and the
        attribute chain written after its name; None for another expression."""
        while isinstance(base, ast.Subscript):
            base = base.value
        attrs: list[str] = []
        while isinstance(base, ast.Attribute):
            attrs.insert(0, base.attr)
            base = base.value
        if not isinstance(base, ast.Name):
            return None, ()
        from gym_repost.construct.dependencies.resolve import resolve_reference  # resolution reads the index

        return resolve_reference(self, module, base.id, tuple(attrs))[0], tuple(attrs)

    def template_methods(self, unit: Unit) -> frozenset[str]:
        """The methods other than dunders that the collection ABCs a class unit derives from
        (maybe through repository classes) define (:data:`COLLECTION_ABC_METHODS`): ordered-set's
        ``OrderedSet(MutableSet[T], Sequence[T])`` cannot be instantiated without its
        ``discard``, which no code of a slice for ``add`` calls."""
        key = id(unit)
        if key not in self._template_methods:
            self._template_methods[key] = frozenset()  # a cycle of bases derives from nothing
            found: set[str] = set()
            for base in getattr(unit.node, "bases", []):
                resolution, attrs = self._resolve_base(unit.module, base)
                if resolution is None:
                    continue
                binding = resolution.binding
                if resolution.kind == "external" and binding is not None:
                    named = attrs[-1] if attrs else (binding.attr or binding.local)
                    if binding.module.split(".")[0] in (
                        "collections",
                        "typing",
                        "typing_extensions",
                        "_collections_abc",
                    ):
                        found |= COLLECTION_ABC_METHODS.get(named, frozenset())
                elif resolution.kind == "definition":
                    for u in self.definition_units(resolution.module, resolution.name):
                        if isinstance(u.node, ast.ClassDef):
                            found |= self.template_methods(u)
            self._template_methods[key] = frozenset(found)
        return self._template_methods[key]

    def links(self, unit: Unit, member: str | None) -> list[Link]:
        """The references of a unit (or of one of its methods), resolved."""
        key = (id(unit), member)
        if key not in self._links:
            from gym_repost.construct.dependencies.collect import link_reference  # linking reads the index

            names = self.unit_names(unit) if member is None else self.member_names(unit, member)
            self._links[key] = [link_reference(self, unit, ref) for ref in names.refs]
        return self._links[key]

    def unit_names(self, unit: Unit) -> CodeNames:
        """What a unit reads (for a class: its header and class-level statements only)."""
        key = id(unit)
        if key not in self._names:
            lazy = self.modules[unit.module].lazy_annotations
            if isinstance(unit.node, ast.ClassDef):
                self._names[key] = _class_header_names(unit.node, lazy)
            else:
                self._names[key] = code_names([unit.node], lazy)
        return self._names[key]

    def members(self, unit: Unit) -> dict[str, list[ast.stmt]]:
        """The methods of a class unit by name (several for a property with a setter)."""
        key = id(unit)
        if key not in self._members:
            found: dict[str, list[ast.stmt]] = {}
            if isinstance(unit.node, ast.ClassDef):
                for stmt in unit.node.body:
                    if isinstance(stmt, FUNCTIONS):
                        found.setdefault(stmt.name, []).append(stmt)
            self._members[key] = found
        return self._members[key]

    def member_names(self, unit: Unit, member: str) -> CodeNames:
        """What the methods named ``member`` of a class unit read."""
        key = (id(unit), member)
        if key not in self._member_names:
            assert isinstance(unit.node, ast.ClassDef)
            lazy = self.modules[unit.module].lazy_annotations
            scope = self._class_scopes.get(id(unit))
            if scope is None:
                scope = self._class_scopes[id(unit)] = frozenset(bound_names(unit.node.body))
            self._member_names[key] = code_names(self.members(unit)[member], lazy, scope)
        return self._member_names[key]


def _class_header_names(node: ast.ClassDef, lazy: bool) -> CodeNames:
    """Decorators, bases, keywords and class-level statements other than methods."""
    walker = ReferenceWalker(lazy)
    module = Scope("module", frozenset(), None, True)
    for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
        walker.visit(expr, module)
    scope = Scope("class", frozenset(bound_names(node.body)), module, True)
    walker.top_class = scope
    for stmt in node.body:
        if not isinstance(stmt, FUNCTIONS):
            walker.visit(stmt, scope)
    return walker.out


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module a (relative) import names; empty when it leaves the tree."""
    if level == 0:
        return target or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 > len(parts) or (level - 1 == len(parts) and not target):
        return ""
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _import_bindings(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, top_level: frozenset[str]
) -> list[ImportBinding]:
    def repo(name: str) -> bool:
        return bool(name) and name.split(".")[0] in top_level

    if isinstance(node, ast.Import):
        out = []
        for alias in node.names:
            if alias.asname:
                out.append(ImportBinding(alias.asname, alias.name, None, alias.name, repo(alias.name)))
            else:
                top = alias.name.split(".")[0]
                out.append(ImportBinding(top, top, None, alias.name, repo(alias.name)))
        return out
    source = _absolute(module, is_package, node.level, node.module)
    is_repo = node.level > 0 or repo(source)
    return [ImportBinding(alias.asname or alias.name, source, alias.name, source, is_repo) for alias in node.names]


def _is_type_checking(node: ast.stmt) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _is_main_block(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    return any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts) and any(
        isinstance(p, ast.Constant) and p.value == "__main__" for p in parts
    )


def _imports_in(nodes: Iterable[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not isinstance(node, (*SCOPES, ast.expr)):
            stack.extend(ast.iter_child_nodes(node))


def _mutation_base(node: ast.expr) -> str | None:
    """``X`` of ``X.a``, ``X[k]``, ``X.a[k].b`` (the name a store or a method call changes)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _mutated_names(node: ast.stmt) -> set[str]:
    """Module-level names a top-level statement changes without rebinding them."""
    found: set[str] = set()
    if isinstance(node, (*FUNCTIONS, ast.ClassDef)):
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if isinstance(target, ast.Attribute):
                found.add(_mutation_base(target) or "")
        return found - {""}
    stack: list[ast.AST] = [node]
    while stack:
        current = stack.pop()
        targets: list[ast.expr] = []
        if isinstance(current, ast.Assign):
            targets = current.targets
        elif isinstance(current, (ast.AugAssign, ast.AnnAssign)):
            targets = [current.target]
        elif isinstance(current, ast.Delete):
            targets = current.targets
        elif isinstance(current, ast.Expr) and isinstance(current.value, ast.Call):
            targets = [current.value.func]
        found.update(
            b for t in targets if isinstance(t, (ast.Attribute, ast.Subscript)) for b in [_mutation_base(t)] if b
        )
        if isinstance(current, ast.stmt) and not isinstance(current, SCOPES):
            stack.extend(c for c in ast.iter_child_nodes(current) if isinstance(c, ast.stmt))
    return found


@dataclass
class _ModuleBuilder:
    """Turns one parsed module into units (see "Units" in the module docstring)."""

    name: str
    file: str
    is_package: bool
    modules: frozenset[str]
    top_level: frozenset[str]
    units: list[Unit] = field(default_factory=list)
    typing_only: set[str] = field(default_factory=set)
    futures: list[str] = field(default_factory=list)

    def add_block(self, body: list[ast.stmt]) -> None:
        for node in body:
            if _is_main_block(node):
                continue
            if _is_type_checking(node):
                self.typing_only.update(bound_names(node.body))  # type: ignore[attr-defined]
                self.add_block(node.orelse)  # type: ignore[attr-defined]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.add_import(node)
            elif self.has_repository_import(node):
                if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                    self.add_block(self.import_branch(node))  # type: ignore[arg-type]
                else:
                    self.add_unit(node, conditional_import=True)
            else:
                self.add_unit(node)

    def add_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            self.futures.extend(a.name for a in node.names)
            return
        bindings = _import_bindings(node, self.name, self.is_package, self.top_level)
        self.add_unit(node, imports=tuple(bindings))

    def add_unit(
        self, node: ast.stmt, imports: tuple[ImportBinding, ...] = (), conditional_import: bool = False
    ) -> None:
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            binds = frozenset(b.local for b in imports if b.attr != "*")
        else:
            binds = frozenset(bound_names([node], deletes=False))
        inner = list(_imports_in([node]))
        modules = {
            n.module or "" if isinstance(n, ast.ImportFrom) else a.name
            for n in inner
            if getattr(n, "level", 0) == 0
            for a in n.names
        }
        self.units.append(
            Unit(
                self.name,
                self.file,
                len(self.units),
                node,
                start,
                node.end_lineno or node.lineno,
                binds,
                frozenset(_mutated_names(node)),
                imports,
                conditional_import,
                _kind(node, inner),
                tuple(sorted({m.split(".")[0] for m in modules if m})),
            )
        )

    def has_repository_import(self, node: ast.stmt) -> bool:
        return any(
            b.repository
            for imp in _imports_in([node])
            for b in _import_bindings(imp, self.name, self.is_package, self.top_level)
        )

    def import_branch(self, node: ast.Try) -> list[ast.stmt]:
        """The first branch of a ``try`` whose repository imports all exist."""
        branches = [[*node.body, *node.orelse]] + [h.body for h in node.handlers]
        for branch in branches:
            if all(self.module_exists(imp) for imp in _imports_in(branch)):
                return [*branch, *node.finalbody]
        return [*branches[0], *node.finalbody]

    def module_exists(self, node: ast.Import | ast.ImportFrom) -> bool:
        for binding in _import_bindings(node, self.name, self.is_package, self.top_level):
            if not binding.repository:
                continue
            if binding.attr is None and binding.dotted not in self.modules:
                return False
            if binding.attr is not None and binding.module not in self.modules:
                return False
        return True


def _exports(units: list[Unit]) -> frozenset[str] | None:
    names: list[str] = []
    found = False
    for unit in units:
        node = unit.node
        value = None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            value, names, found = node.value, [], True
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == "__all__":
            value = node.value
        if value is None:
            continue
        if not isinstance(value, (ast.List, ast.Tuple)) or not all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
        ):
            return None
        names.extend(e.value for e in value.elts)  # type: ignore[attr-defined]
    return frozenset(names) if found else None


def _module_info(builder: _ModuleBuilder, tree: ast.Module, text: str) -> ModuleInfo:
    builder.add_block(tree.body)
    bindings: dict[str, list[Unit]] = {}
    mutators: dict[str, list[Unit]] = {}
    for unit in builder.units:
        for name in unit.binds:
            bindings.setdefault(name, []).append(unit)
        for name in unit.mutates - unit.binds:
            mutators.setdefault(name, []).append(unit)
    stars = [b for u in builder.units for b in u.imports if b.attr == "*"]
    # try: from _speedups import * / except ImportError: ... kept whole, still a star source
    stars += [
        b
        for u in builder.units
        if not u.imports and u.kind == "import"
        for node in _imports_in([u.node])
        if isinstance(node, ast.ImportFrom)
        for b in _import_bindings(node, builder.name, builder.is_package, builder.top_level)
        if b.attr == "*" and not b.repository
    ]
    return ModuleInfo(
        name=builder.name,
        file=builder.file,
        is_package=builder.is_package,
        lines=text.split("\n"),
        units=builder.units,
        bindings=bindings,
        mutators=mutators,
        stars=stars,
        exports=_exports(builder.units),
        futures=tuple(builder.futures),
        typing_only=frozenset(builder.typing_only - set(bindings)),
    )


def _top_level_names(names: dict[str, str], files: Iterable[str]) -> frozenset[str]:
    """First components of the modules; a stand-alone script named like a standard
    library module (``types.py`` outside any package) does not shadow it."""
    packages = {n.split(".")[0] for n, f in names.items() if "." in n or f.endswith("__init__.py")}
    singles = {n for n in names if "." not in n and n not in STDLIB}
    return frozenset(packages | singles)


def _assign_ranks(modules: dict[str, ModuleInfo]) -> None:
    """Post-order of the repository's import graph, from the modules in path order."""
    rank = 0
    done: set[str] = set()

    def imported(info: ModuleInfo) -> list[str]:
        found = []
        for unit in info.units:
            for binding in unit.imports:
                names = (
                    (f"{binding.module}.{binding.attr}", binding.module)
                    if binding.attr
                    else (binding.dotted, binding.module)
                )
                found.extend(next(([n] for n in names if n in modules and n != info.name), []))
        return found

    for start in sorted(modules.values(), key=lambda m: m.file):
        stack: list[tuple[str, Iterator[str]]] = []
        if start.name in done:
            continue
        done.add(start.name)
        stack.append((start.name, iter(imported(start))))
        while stack:
            name, children = stack[-1]
            child = next((c for c in children if c not in done), None)
            if child is None:
                stack.pop()
                modules[name].rank = rank
                rank += 1
            else:
                done.add(child)
                stack.append((child, iter(imported(modules[child]))))


def build_index(repo: SourceRepository) -> RepositoryIndex:
    """Parse every Python module of ``repo`` (never importing it).

    A module name maps to the first file (in path order) that has it. Files ``ast``
    rejects are listed in :attr:`RepositoryIndex.rejected`.
    """
    names: dict[str, str] = {}
    for path in repo.python_files:
        names.setdefault(module_name(path, repo.files), path)
    top_level = _top_level_names(names, repo.python_files)
    index = RepositoryIndex(modules={}, files={}, top_level=top_level)
    with garbage_collector_paused():
        _parse_modules(index, repo, names, frozenset(names))
    _assign_ranks(index.modules)
    return index


def _parse_modules(
    index: RepositoryIndex, repo: SourceRepository, names: dict[str, str], module_set: frozenset[str]
) -> None:
    for name, path in names.items():
        text = repo.files[path]
        try:
            tree = parse_python(text)
        except (SyntaxError, ValueError):
            index.rejected[path] = ast_error(text) or "ast rejects the file"
            continue
        builder = _ModuleBuilder(name, path, path.endswith("__init__.py"), module_set, index.top_level)
        info = _module_info(builder, tree, text)
        index.modules[name] = info
        index.files[path] = info
