"""Stage 3, local dependencies: everything a target reaches inside its repository.

:func:`build_index` parses every module once with :mod:`ast` (never importing it) into
*units*, its top-level statements, and the import bindings of each module.
:func:`slice_dependencies` walks the target and, transitively, every unit it reaches,
resolving each global name a unit reads:

* a definition of the same module, or one reached through an import of a repository
  module (``from .x import a as b``, ``import pkg.mod as m`` then ``m.f``, re-exports
  through ``__init__`` files, star imports) -> that unit becomes a fragment;
* an import of a module outside the repository -> the import is kept (one normalised
  statement per name used);
* a builtin -> nothing; anything else -> a drop (``unresolved name``).

Decisions worth knowing:

* **Units.** A plain top-level statement is one unit. ``if TYPE_CHECKING:`` bodies are
  left out (their names are typing-only). A ``try`` holding a repository import is
  flattened: the first of its branches (body, then each handler) whose repository
  imports all exist provides the units. An ``if`` holding a repository import stays one
  unit and cannot be sandboxed (``conditional repository import``). ``if __name__ ==
  "__main__":`` blocks are never units.
* **Mutators.** A top-level statement that mutates a needed name (``X[k] = v``,
  ``X.attr = v``, ``X.register(f)``, also inside top-level loops) comes with it.
* **Classes.** A class keeps its header, every class-level statement other than method
  definitions, its dunder methods (the interpreter calls them implicitly), its
  properties, the target, and every method whose name the kept code accesses as an
  attribute anywhere (``self.m()``, ``cls.m``, ``Class.m``, ``super().m()``,
  ``obj.m()``, ``getattr(x, "m")``): a name-based over-approximation, since the type of
  ``obj`` is not known statically. Other methods are cut from the fragment's text, except
  in classes deriving from classes outside the repository (code there may call any
  method: ``tzinfo.utcoffset``) and in slices whose code reads attributes by computed
  names (``getattr(obj, "visit_" + kind)``): those keep every method.
  Repository base classes are fragments ordered before their subclasses.
* **Annotations.** In a module with ``from __future__ import annotations`` they are not
  evaluated, so their names are not needed (the script keeps the future import);
  elsewhere they are walked like any definition-time expression.
* **Order.** Fragments are ordered so that every name used while the module is being
  imported (decorators, bases, default values, class bodies, constants) is defined
  before; functions may refer to later definitions. Ties follow the modules' import
  order (a module after those it imports), then line order. A cycle among definition-time
  uses drops the candidate (``import-time cycle``).
* **Shims.** A name used under another spelling (``from .x import a as b``) becomes the
  statement ``b = a``; a repository module used as ``m.f`` becomes
  ``m = types.SimpleNamespace(f=f)``. A shim some fragment needs while being imported is
  a fragment (kind ``import``) placed before that user; the others go after the
  fragments (:attr:`DependencySlice.shims`).
* **Name clashes.** Every fragment, external import and shim claims script-level names.
  When two claim the same name, the one the target's own text refers to (or else the
  earliest by module order) keeps it; the others are renamed to ``{name}_{module}``
  (``_2``, ``_3``... if taken) and the references to them rewritten, in fragments other
  than the target only. A clash the target's text is part of, a builtin shadowed for a
  fragment that needs it, or a binding that cannot be rewritten safely (an import
  inside a kept compound statement, a ``global`` statement) drops the candidate
  (``name clash``).
* **standalone** means no repository unit besides the target's own statement: for a
  method target, its class (with the methods it keeps) and nothing else.
"""

from __future__ import annotations

import ast
import builtins
import heapq
import logging
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source import dedent_code
from gym_repost.construct.extract import ast_error, garbage_collector_paused, module_name
from gym_repost.construct.model import Candidate, DependencySlice, Drop, Fragment, SourceRepository
from gym_repost.errors import BuildError

log = logging.getLogger(__name__)

_STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
# module attributes every module has (``__path__``: packages) count as builtins
_BUILTINS = frozenset(dir(builtins)) | {
    "__name__",
    "__file__",
    "__doc__",
    "__spec__",
    "__package__",
    "__loader__",
    "__builtins__",
    "__debug__",
    "__annotations__",
    "__path__",
}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "hasattr", "setattr", "delattr"})
# base classes from these modules call no methods of their subclasses but dunders
_TEMPLATE_FREE_MODULES = frozenset({"typing", "typing_extensions", "abc", "collections"})

FragmentKind = Literal["function", "class", "assign", "import", "other"]


# --------------------------------------------------------------------------- references


@dataclass(frozen=True)
class Reference:
    """A global name read (or, after ``global``, written) by some code.

    ``attrs`` is the attribute chain that follows the name (``m.sub.f`` -> ``("sub",
    "f")``); ``line``/``col``/``end_col`` locate the name itself (1-based line, UTF-8
    byte columns) so that it can be rewritten.
    """

    name: str
    attrs: tuple[str, ...]
    import_time: bool
    line: int
    col: int
    end_col: int
    attr_ends: tuple[int, ...] = ()
    """End column of ``name.attrs[0]``, ``name.attrs[0].attrs[1]``...; -1 where the
    chain has left the name's line."""


@dataclass
class CodeNames:
    """What a piece of code reads: global references, attribute names, class-local names."""

    refs: list[Reference] = field(default_factory=list)
    attrs: set[str] = field(default_factory=set)
    class_locals: set[str] = field(default_factory=set)
    """Names of the enclosing class body read by its own statements (``x = property(get_x)``)."""
    global_statements: set[str] = field(default_factory=set)
    dynamic_attributes: bool = False
    """``getattr``/``hasattr`` with a computed name (``getattr(self, "visit_" + kind)``)."""


@dataclass
class _Scope:
    kind: Literal["module", "class", "function"]
    names: frozenset[str]
    parent: _Scope | None
    import_time: bool
    declared_global: frozenset[str] = frozenset()


def _target_names(node: ast.AST) -> Iterator[str]:
    """Names a store target binds (``a``, ``a, (b, *c)``); not ``x.y`` nor ``x[k]``."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _target_names(elt)
    elif isinstance(node, ast.Starred):
        yield from _target_names(node.value)


def bound_names(body: Iterable[ast.AST], deletes: bool = True) -> set[str]:
    """Names bound directly in a block: assignments, loop and ``with`` targets, imports,
    ``def``/``class`` names, ``except ... as``, match captures and walruses (also inside
    comprehensions), without looking into nested functions or classes. ``del x`` counts
    unless ``deletes`` is False (it makes ``x`` local to a function, but at module level
    it only unbinds)."""
    return _block_scope(body, deletes)[0]


def _block_scope(body: Iterable[ast.AST], deletes: bool = True) -> tuple[set[str], set[str], set[str]]:
    """``bound_names`` of a block, and the names its ``global`` and ``nonlocal``
    statements declare (not those of nested functions)."""
    names: set[str] = set()
    declared: tuple[set[str], set[str]] = (set(), set())
    stack = list(body)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is ast.Name:
            context = type(node.ctx)  # type: ignore[attr-defined]
            if context is ast.Store or (deletes and context is ast.Del):
                names.add(node.id)  # type: ignore[attr-defined]
            continue
        if kind in _BINDING_SCOPES:
            names.add(node.name)  # type: ignore[attr-defined]
            stack.extend(node.decorator_list)  # type: ignore[attr-defined]
            continue
        if kind is ast.Lambda:
            continue
        if kind in _COMPREHENSION_TYPES:
            names.update(
                n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name)
            )
            continue
        if kind in _NAMED_NODES:
            names.update(_names_bound_by(node))
        elif kind is ast.Global or kind is ast.Nonlocal:
            declared[kind is ast.Nonlocal].update(node.names)  # type: ignore[attr-defined]
        stack.extend(ast.iter_child_nodes(node))
    return names, declared[0], declared[1]


def _names_bound_by(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    if isinstance(node, ast.MatchMapping):
        return [node.rest] if node.rest else []
    name = getattr(node, "name", None)
    return [name] if name else []


_BINDING_SCOPES = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})
_COMPREHENSION_TYPES = frozenset({ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp})
_NAMED_NODES = frozenset({ast.Import, ast.ImportFrom, ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping})


class _ReferenceWalker:
    """Walks code with Python's scoping rules and collects its global references."""

    def __init__(self, lazy_annotations: bool) -> None:
        self.lazy = lazy_annotations
        self.out = CodeNames()
        self.top_class: _Scope | None = None

    def name(self, node: ast.Name, attrs: tuple[str, ...], scope: _Scope, attr_ends: tuple[int, ...] = ()) -> None:
        if self._is_global(node.id, scope):
            self.out.refs.append(
                Reference(
                    node.id,
                    attrs,
                    scope.import_time,
                    node.lineno,
                    node.col_offset,
                    node.end_col_offset or node.col_offset,
                    attr_ends,
                )
            )

    def _is_global(self, name: str, scope: _Scope) -> bool:
        current: _Scope | None = scope
        first = True
        while current is not None and current.kind != "module":
            if current.kind == "function":
                if name in current.declared_global:
                    return True
                if name in current.names:
                    return False
            elif first and name in current.names:
                if current is self.top_class:
                    self.out.class_locals.add(name)
                return False
            first = False
            current = current.parent
        return True

    def visit(self, node: ast.AST, scope: _Scope) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) or scope.kind == "function":
                self.name(node, (), scope)
        elif isinstance(node, ast.Attribute):
            self.attribute(node, scope)
        elif isinstance(node, _FUNCTIONS):
            self.function(node, scope)
        elif isinstance(node, ast.ClassDef):
            self.class_def(node, scope)
        elif isinstance(node, ast.Lambda):
            self.lambda_(node, scope)
        elif isinstance(node, _COMPREHENSIONS):
            self.comprehension(node, scope)
        elif isinstance(node, ast.AnnAssign):
            self.annotated(node, scope)
        else:
            if isinstance(node, ast.Call):
                self.call(node)
            elif isinstance(node, ast.Global):
                self.out.global_statements.update(node.names)
            for child in ast.iter_child_nodes(node):
                self.visit(child, scope)

    def attribute(self, node: ast.Attribute, scope: _Scope) -> None:
        chain: list[ast.Attribute] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            chain.append(base)
            base = base.value
        self.out.attrs.update(a.attr for a in chain)
        if isinstance(base, ast.Name):
            chain.reverse()
            ends = tuple(
                a.end_col_offset if a.end_lineno == base.lineno and a.end_col_offset is not None else -1 for a in chain
            )
            self.name(base, tuple(a.attr for a in chain), scope, ends)
        else:
            self.visit(base, scope)

    def call(self, node: ast.Call) -> None:
        if not (isinstance(node.func, ast.Name) and node.func.id in _ATTRIBUTE_FUNCTIONS and len(node.args) >= 2):
            return
        name = node.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            self.out.attrs.add(name.value)
        else:
            self.out.dynamic_attributes = True

    def annotated(self, node: ast.AnnAssign, scope: _Scope) -> None:
        # annotations of locals are never evaluated; others only without the future import
        if not self.lazy and scope.kind != "function":
            self.visit(node.annotation, scope)
        self.visit(node.target, scope)
        if node.value is not None:
            self.visit(node.value, scope)

    def arguments(self, args: ast.arguments, scope: _Scope) -> None:
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.visit(default, scope)
        if self.lazy:
            return
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        for arg in every:
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation, scope)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: _Scope) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator, scope)
        self.arguments(node.args, scope)
        if node.returns is not None and not self.lazy:
            self.visit(node.returns, scope)
        self.body(node.args, node.body, scope)

    def body(self, args: ast.arguments, body: list[ast.stmt], scope: _Scope) -> None:
        bound, glob, nonlocal_ = _block_scope(body)
        params = {
            a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a is not None
        }
        names = frozenset((params | bound) - glob) | nonlocal_
        inner = _Scope("function", names, scope, False, frozenset(glob))
        for statement in body:
            self.visit(statement, inner)

    def lambda_(self, node: ast.Lambda, scope: _Scope) -> None:
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self.visit(default, scope)
        self.body(node.args, [ast.Expr(node.body)], scope)

    def class_def(self, node: ast.ClassDef, scope: _Scope) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr, scope)
        inner = _Scope("class", frozenset(bound_names(node.body)), scope, scope.import_time)
        for statement in node.body:
            self.visit(statement, inner)

    def comprehension(self, node: ast.expr, scope: _Scope) -> None:
        generators: list[ast.comprehension] = node.generators  # type: ignore[attr-defined]
        self.visit(generators[0].iter, scope)
        names = frozenset(n for g in generators for n in _target_names(g.target))
        inner = _Scope("function", names, scope, scope.import_time)
        for i, generator in enumerate(generators):
            if i:
                self.visit(generator.iter, inner)
            for condition in generator.ifs:
                self.visit(condition, inner)
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]  # type: ignore[attr-defined]
        for part in parts:
            self.visit(part, inner)


def code_names(
    nodes: Iterable[ast.AST], lazy_annotations: bool = False, class_scope: frozenset[str] | None = None
) -> CodeNames:
    """The global references of module-level code (``nodes``), with Python's scoping.

    With ``class_scope`` (the names a class body binds), ``nodes`` are statements of that
    class's body, and the names of the class body they read are in ``class_locals``.
    """
    walker = _ReferenceWalker(lazy_annotations)
    scope = _Scope("module", frozenset(), None, True)
    if class_scope is not None:
        scope = _Scope("class", class_scope, scope, True)
        walker.top_class = scope
    for node in nodes:
        walker.visit(node, scope)
    return walker.out


# --------------------------------------------------------------------------- the index


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
    if isinstance(node, _FUNCTIONS):
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
    _links: dict[tuple[int, str | None], list[_Link]] = field(default_factory=dict, repr=False)
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
        while isinstance(base, ast.Subscript):
            base = base.value
        attrs: list[str] = []
        while isinstance(base, ast.Attribute):
            attrs.insert(0, base.attr)
            base = base.value
        if not isinstance(base, ast.Name):
            return False
        resolution, _ = resolve_reference(self, module, base.id, tuple(attrs))
        if resolution.kind == "external" and resolution.binding is not None:
            return resolution.binding.module.split(".")[0] not in _TEMPLATE_FREE_MODULES
        if resolution.kind == "definition":
            return any(
                self.extends_external(u)
                for u in self.definition_units(resolution.module, resolution.name)
                if isinstance(u.node, ast.ClassDef)
            )
        return False

    def links(self, unit: Unit, member: str | None) -> list[_Link]:
        """The references of a unit (or of one of its methods), resolved."""
        key = (id(unit), member)
        if key not in self._links:
            names = self.unit_names(unit) if member is None else self.member_names(unit, member)
            self._links[key] = [_link(self, unit, ref) for ref in names.refs]
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
                    if isinstance(stmt, _FUNCTIONS):
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
    walker = _ReferenceWalker(lazy)
    module = _Scope("module", frozenset(), None, True)
    for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
        walker.visit(expr, module)
    scope = _Scope("class", frozenset(bound_names(node.body)), module, True)
    walker.top_class = scope
    for stmt in node.body:
        if not isinstance(stmt, _FUNCTIONS):
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
        elif not isinstance(node, (*_SCOPES, ast.expr)):
            stack.extend(ast.iter_child_nodes(node))


def _mutation_base(node: ast.expr) -> str | None:
    """``X`` of ``X.a``, ``X[k]``, ``X.a[k].b`` (the name a store or a method call changes)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _mutated_names(node: ast.stmt) -> set[str]:
    """Module-level names a top-level statement changes without rebinding them."""
    found: set[str] = set()
    if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
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
        if isinstance(current, ast.stmt) and not isinstance(current, _SCOPES):
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
    singles = {n for n in names if "." not in n and n not in _STDLIB}
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


# --------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class Resolution:
    """What a name of a module denotes.

    ``definition``: top-level units of ``module`` binding ``name``; ``module``: a
    repository module object; ``external``: ``binding``, an import from outside the
    repository; ``builtin``; ``typing``: bound only under ``if TYPE_CHECKING:``;
    ``unresolved``.
    """

    kind: Literal["definition", "module", "external", "builtin", "typing", "unresolved"]
    module: str = ""
    name: str = ""
    binding: ImportBinding | None = None


_UNRESOLVED = Resolution("unresolved")


def _module_exists(index: RepositoryIndex, name: str) -> bool:
    """A module, or a namespace package some module lives under."""
    return name in index.modules or any(m.startswith(name + ".") for m in index.modules)


def _exported(index: RepositoryIndex, module: str, name: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``from module import *`` binds ``name``."""
    info = index.modules.get(module)
    if info is None or module in seen:
        return False
    if info.exports is not None:
        return name in info.exports
    if name.startswith("_"):
        return False
    return name in info.bindings or any(
        s.repository and _exported(index, s.module, name, seen | {module}) for s in info.stars
    )


def resolve_name(index: RepositoryIndex, module: str, name: str, *, member: bool = False) -> Resolution:
    """What ``name`` denotes at the top level of ``module`` (``member``: as ``module.name``
    from outside, so builtins do not count and submodules do)."""
    key = (module, name + ("." if member else ""))
    if key not in index._resolved:
        index._resolved[key] = _UNRESOLVED  # an import cycle resolves to nothing
        index._resolved[key] = _resolve_uncached(index, module, name, member)
    return index._resolved[key]


def _resolve_uncached(index: RepositoryIndex, module: str, name: str, member: bool) -> Resolution:
    info = index.modules.get(module)
    if info is None:
        if member and _module_exists(index, f"{module}.{name}"):
            return Resolution("module", f"{module}.{name}")
        return _UNRESOLVED
    units = info.bindings.get(name)
    if units:
        last = units[-1]
        if not last.imports:
            return Resolution("definition", module, name)
        binding = next(b for b in last.imports if b.local == name)
        return _resolve_binding(index, binding)
    if name in info.typing_only:
        return Resolution("typing", module, name)
    for star in info.stars:
        if star.repository and _exported(index, star.module, name):
            return resolve_name(index, star.module, name, member=True)
    if member and _module_exists(index, f"{module}.{name}"):
        return Resolution("module", f"{module}.{name}")
    if not member and name in _BUILTINS:
        return Resolution("builtin", name=name)
    # not defined here: assume the last star import of an outside module binds it
    external_stars = [s for s in info.stars if not s.repository]
    if external_stars:
        return Resolution("external", binding=external_stars[-1])
    return _UNRESOLVED


def _resolve_binding(index: RepositoryIndex, binding: ImportBinding) -> Resolution:
    if not binding.repository:
        return Resolution("external", binding=binding)
    if not binding.module:
        return _UNRESOLVED
    if binding.attr is None:
        return Resolution("module", binding.module) if _module_exists(index, binding.module) else _UNRESOLVED
    return resolve_name(index, binding.module, binding.attr, member=True)


def resolve_reference(
    index: RepositoryIndex, module: str, name: str, attrs: tuple[str, ...] = ()
) -> tuple[Resolution, int]:
    """Resolve ``name.attrs...`` in ``module`` through module objects.

    Returns the resolution and how many attributes were consumed getting there (``m.f``
    with ``m`` a repository module: ``f``'s definition and 1).
    """
    resolution = resolve_name(index, module, name)
    used = 0
    while resolution.kind == "module" and used < len(attrs):
        resolution = resolve_name(index, resolution.module, attrs[used], member=True)
        used += 1
    return resolution, used


# --------------------------------------------------------------------------- collecting

# ("def", module, name) | ("ext", local, module, attr) | ("ns", local, module) | ("builtin", name)
Entity = tuple


class _Unsliceable(BuildError):
    """The target cannot be sliced; becomes a :class:`Drop` before leaving this module."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class _Use(NamedTuple):
    """A global name some kept code reads, and what it denotes in the script.

    ``through`` is the end column of a ``module.attr...`` chain that is rewritten to the
    definition's name in the script (outside the target), -1 for none.
    """

    unit: Unit
    ref: Reference
    entity: Entity
    in_target: bool
    through: int = -1


def _is_property(defs: list[ast.stmt]) -> bool:
    for node in defs:
        for decorator in getattr(node, "decorator_list", []):
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in ("property", "cached_property", "abstractproperty", "setter", "getter", "deleter"):
                return True
    return False


@dataclass
class _Collector:
    """Finds every unit (and method) the target reaches, and every global use in them."""

    index: RepositoryIndex
    target: Candidate
    target_unit: Unit
    needed: dict[int, Unit] = field(default_factory=dict)
    kept: dict[int, set[str]] = field(default_factory=dict)
    uses: list[_Use] = field(default_factory=list)
    namespaces: dict[Entity, dict[tuple[str, ...], Entity]] = field(default_factory=dict)
    attr_names: set[str] = field(default_factory=set)
    globals_declared: set[str] = field(default_factory=set)
    external: dict[Entity, set[ImportBinding]] = field(default_factory=dict)
    """The imports (as written) behind each external entity."""
    every_method: bool = False
    """Some kept code reads attributes by computed names: classes keep all their methods."""
    _by_member: dict[str, list[Unit]] = field(default_factory=dict)
    _queue: list[tuple[Unit, str | None]] = field(default_factory=list)

    def run(self) -> None:
        self.add_unit(self.target_unit)
        parts = self.target.qualname.split(".")
        if len(parts) == 2:
            self.keep(self.target_unit, parts[1])
        while self._queue:
            unit, member = self._queue.pop()
            names = self.index.unit_names(unit) if member is None else self.index.member_names(unit, member)
            self.walk(unit, names, self.index.links(unit, member))

    def add_unit(self, unit: Unit) -> None:
        if id(unit) in self.needed:
            return
        if unit.conditional_import:
            raise _Unsliceable(
                "conditional repository import",
                f"{unit.file}:{unit.start_line} imports from the repository inside an if block",
            )
        self.needed[id(unit)] = unit
        self._queue.append((unit, None))
        if isinstance(unit.node, ast.ClassDef):
            self.kept[id(unit)] = set()
            keep_all = self.every_method or self.index.extends_external(unit)
            for name, defs in self.index.members(unit).items():
                self._by_member.setdefault(name, []).append(unit)
                if (
                    keep_all
                    or (name.startswith("__") and name.endswith("__"))
                    or _is_property(defs)
                    or name in self.attr_names
                ):
                    self.keep(unit, name)

    def keep(self, unit: Unit, member: str) -> None:
        kept = self.kept[id(unit)]
        if member not in kept and member in self.index.members(unit):
            kept.add(member)
            self._queue.append((unit, member))

    def walk(self, unit: Unit, names: CodeNames, links: list[_Link]) -> None:
        for link in links:
            self.use(unit, link)
        if names.dynamic_attributes and not self.every_method:
            # getattr(obj, computed): any method of any kept class may be read
            self.every_method = True
            for owner in [u for u in self.needed.values() if isinstance(u.node, ast.ClassDef)]:
                for member in self.index.members(owner):
                    self.keep(owner, member)
        for member in names.class_locals:
            self.keep(unit, member)
        self.globals_declared |= names.global_statements
        for attr in names.attrs - self.attr_names:
            self.attr_names.add(attr)
            for owner in self._by_member.get(attr, []):
                self.keep(owner, attr)

    def use(self, unit: Unit, link: _Link) -> None:
        if link.problem is not None:
            raise _Unsliceable(*link.problem)
        if link.entity is None:
            return
        for defining in link.units:
            self.add_unit(defining)
        if link.binding is not None:
            self.external.setdefault(link.entity, set()).add(link.binding)
        ref, entity, through = link.ref, link.entity, link.through
        in_target = unit is self.target_unit and self.target.start_line <= ref.line <= self.target.end_line
        if link.namespace is not None and (in_target or through < 0):
            # the target's text is never edited: it reads the module through a namespace
            self.namespaces.setdefault(link.namespace, {})[ref.attrs[: link.consumed]] = entity
            entity, through = link.namespace, -1
        self.uses.append(_Use(unit, ref, entity, in_target, through))


@dataclass(frozen=True)
class _Link:
    """A reference resolved once per index: what it denotes and the units that needs.

    ``entity`` is None for a typing-only name; ``problem`` (a drop's reason and detail)
    is set when the reference cannot be resolved. ``namespace`` is set when the name is
    a repository module and ``consumed`` attributes led to the definition.
    """

    ref: Reference
    entity: Entity | None = None
    units: tuple[Unit, ...] = ()
    namespace: Entity | None = None
    consumed: int = 0
    through: int = -1
    problem: tuple[str, str] | None = None
    binding: ImportBinding | None = None
    """For an external entity: the import as written (``import a.b.c`` binds ``a``)."""


def _link(index: RepositoryIndex, unit: Unit, ref: Reference) -> _Link:
    resolution, used = resolve_reference(index, unit.module, ref.name, ref.attrs)
    dotted = ".".join((ref.name, *ref.attrs))
    kind = resolution.kind
    if kind == "typing":
        return _Link(ref)
    if kind == "module":
        return _Link(
            ref,
            problem=("module object used", f"{unit.file}:{ref.line}: {dotted} is a repository module used as a value"),
        )
    if kind == "unresolved":
        return _Link(ref, problem=("unresolved name", f"{unit.file}:{ref.line}: {dotted}"))
    units: tuple[Unit, ...] = ()
    binding = resolution.binding
    if kind == "definition":
        entity: Entity = ("def", resolution.module, resolution.name)
        units = tuple(index.definition_units(resolution.module, resolution.name))
    elif kind == "external":
        assert binding is not None
        entity = ("ext", binding.local, binding.module, binding.attr)
    else:
        entity = ("builtin", resolution.name)
    if not used:
        return _Link(ref, entity, units, binding=binding)
    namespace = ("ns", ref.name, resolve_name(index, unit.module, ref.name).module)
    return _Link(ref, entity, units, namespace, used, ref.attr_ends[used - 1], binding=binding)


# --------------------------------------------------------------------------- script names

_TYPES_BINDING = ImportBinding("types", "types", None, "types", False)
_TYPES: Entity = ("ext", "types", "types", None)


def _natural(entity: Entity) -> str:
    return entity[2] if entity[0] == "def" else entity[1]


def _suffix(entity: Entity) -> str:
    if entity[0] == "def":
        return entity[1].split(".")[-1]
    if entity[0] == "ext":
        return (entity[2] or "ext").split(".")[-1]
    return "module"


def _binding_sites(unit: Unit, name: str, lines: list[str]) -> list[tuple[int, int, int]] | None:
    """Where a unit binds ``name`` at module level, or None when one of them cannot be
    renamed by a text edit (an import, an ``except ... as``, a match capture)."""
    sites: list[tuple[int, int, int]] = []
    stack: list[ast.AST] = [unit.node]
    while stack:
        node = stack.pop()
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            if node.name == name:
                raw = lines[node.lineno - 1].encode("utf-8")
                keyword = b"class" if isinstance(node, ast.ClassDef) else b"def"
                at = raw.find(name.encode("utf-8"), raw.find(keyword, node.col_offset) + len(keyword))
                sites.append((node.lineno, at, at + len(name.encode("utf-8"))))
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            sites.append((node.lineno, node.col_offset, node.end_col_offset or node.col_offset))
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
            if name in bound_names([node]) or getattr(node, "name", None) == name:
                return None
        if not isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            stack.extend(ast.iter_child_nodes(node))
    return sites


@dataclass
class _Naming:
    """Script-level names: who keeps which name, shims, and the text edits that follow."""

    collector: _Collector
    script: dict[Entity, str] = field(default_factory=dict)
    taken: dict[str, Entity] = field(default_factory=dict)
    shims: dict[str, Entity] = field(default_factory=dict)
    edits: dict[int, list[tuple[int, int, int, str]]] = field(default_factory=dict)
    rewritten: set[int] = field(default_factory=set)
    """Uses whose name was rewritten in its fragment (numbers in ``collector.uses``)."""
    renamed: list[tuple[Entity, str]] = field(default_factory=list)

    @property
    def index(self) -> RepositoryIndex:
        return self.collector.index

    def claim(self, name: str, entity: Entity) -> bool:
        holder = self.taken.get(name)
        if holder is not None and holder != entity:
            return False
        self.taken[name] = entity
        return True

    def run(self) -> None:
        self.protect_target()
        for use in self.collector.uses:
            if use.entity[0] != "builtin":
                continue
            if not self.claim(use.entity[1], use.entity):
                raise _Unsliceable(
                    "name clash", f"{use.entity[1]} would shadow the builtin {use.unit.file}:{use.ref.line} needs"
                )
            self.script[use.entity] = use.entity[1]
        for entity in self.entities():
            if entity not in self.script:
                self.place(entity)
        for number, use in enumerate(self.collector.uses):
            if not use.in_target:
                self.serve(number, use)

    def protect_target(self) -> None:
        """The target's own name and every name its text reads keep their meaning."""
        unit = self.collector.target_unit
        own = self.collector.target.qualname.split(".")[0]
        protected = [(own, ("def", unit.module, own))]
        protected += [(u.ref.name, u.entity) for u in self.collector.uses if u.in_target]
        for local, entity in protected:
            if _natural(entity) == "*":  # a star import binds the name itself
                self.script[entity] = "*"
                continue
            if _natural(entity) == local:
                ok = self.claim(local, entity)
                self.script[entity] = local
            else:
                ok = self.claim(local, ("shim", local, entity))
                self.shims[local] = entity
            if not ok:
                raise _Unsliceable("name clash", f"{local} of the target means two things")

    def entities(self) -> list[Entity]:
        """Every name claimant, in priority order (the target's module first)."""
        found: dict[Entity, tuple[int, int, int, str]] = {}
        target_module = self.collector.target_unit.module
        for unit in self.collector.needed.values():
            rank = self.index.modules[unit.module].rank
            for name in unit.binds:
                key = (unit.module != target_module, rank, unit.start_line, name)
                found[("def", unit.module, name)] = min(found.get(("def", unit.module, name), key), key)
        for use in self.collector.uses:
            if use.entity[0] in ("ext", "ns"):
                found.setdefault(use.entity, (True, 1 << 30, use.ref.line, _natural(use.entity)))
        for members in self.collector.namespaces.values():
            for member in members.values():
                if member[0] == "ext":
                    found.setdefault(member, (True, 1 << 30, 0, _natural(member)))
        if self.collector.namespaces:
            found.setdefault(_TYPES, (True, 1 << 30, 0, "types"))
        return sorted(found, key=lambda e: found[e])

    def place(self, entity: Entity) -> None:
        natural = _natural(entity)
        if natural == "*":  # from x import *: binds unknown names, claims none
            self.script[entity] = natural
            return
        if self.claim(natural, entity):
            self.script[entity] = natural
            return
        number = 1
        fresh = f"{natural}_{_suffix(entity)}"
        while fresh in self.taken or fresh in _BUILTINS:
            number += 1
            fresh = f"{natural}_{_suffix(entity)}_{number}"
        if entity[0] == "def":
            self.rename_bindings(entity, fresh)
        self.claim(fresh, entity)
        self.script[entity] = fresh
        self.renamed.append((entity, fresh))

    def rename_bindings(self, entity: Entity, fresh: str) -> None:
        _, module, name = entity
        if name in self.collector.globals_declared:
            raise _Unsliceable("name clash", f"{module}.{name} is assigned through a global statement")
        info = self.index.modules[module]
        for unit in info.bindings.get(name, []):
            if id(unit) not in self.collector.needed:
                continue
            sites = _binding_sites(unit, name, info.lines)
            if sites is None or unit is self.collector.target_unit:
                raise _Unsliceable("name clash", f"{module}.{name} cannot be renamed ({unit.file}:{unit.start_line})")
            self.edits.setdefault(id(unit), []).extend((*site, fresh) for site in sites)

    def serve(self, number: int, use: _Use) -> None:
        """Make ``use.ref.name`` denote ``use.entity`` for a fragment other than the target."""
        local, wanted = use.ref.name, self.script[use.entity]
        if wanted == "*":  # a star import binds the name (the attribute's, via a module)
            if use.through < 0:
                return
            wanted = use.ref.attrs[use.ref.attr_ends.index(use.through)]
        if use.through >= 0:
            self.rewritten.add(number)
            self.edits.setdefault(id(use.unit), []).append((use.ref.line, use.ref.col, use.through, wanted))
            return
        if local == wanted:
            return
        if self.claim(local, ("shim", local, use.entity)):
            self.shims[local] = use.entity
            return
        ref = use.ref
        self.rewritten.add(number)
        self.edits.setdefault(id(use.unit), []).append((ref.line, ref.col, ref.end_col, wanted))


# --------------------------------------------------------------------------- order and text

Node = tuple[str, object]  # ("unit", id(unit)) or ("shim", name)


@dataclass(frozen=True)
class _Shim:
    name: str
    statement: str
    module: str
    line: int
    entities: tuple[Entity, ...]
    """Definitions the statement reads."""


def _namespace_text(members: dict[tuple[str, ...], Entity], script: dict[Entity, str], types_name: str) -> str:
    tree: dict[str, object] = {}
    for path, entity in sorted(members.items()):
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[path[-1]] = path[-1] if script[entity] == "*" else script[entity]

    def render(node: dict[str, object]) -> str:
        items = ", ".join(f"{k}={render(v) if isinstance(v, dict) else v}" for k, v in node.items())
        return f"{types_name}.SimpleNamespace({items})"

    return render(tree)


def _shims(naming: _Naming) -> dict[str, _Shim]:
    collector, script = naming.collector, naming.script
    first: dict[str, _Use] = {}
    for use in collector.uses:
        if use.through < 0:
            first.setdefault(use.ref.name if use.entity[0] != "ns" else script[use.entity], use)
    shims: dict[str, _Shim] = {}
    for local, entity in naming.shims.items():
        use = first[local]
        shims[local] = _Shim(
            local, f"{local} = {script[entity]}", use.unit.module, _import_line(collector.index, use), (entity,)
        )
    for namespace, members in collector.namespaces.items():
        name = script[namespace]
        use = first[name]
        text = _namespace_text(members, script, script[_TYPES])
        shims[name] = _Shim(
            name, f"{name} = {text}", use.unit.module, _import_line(collector.index, use), tuple(members.values())
        )
    return shims


def _import_line(index: RepositoryIndex, use: _Use) -> int:
    units = index.modules[use.unit.module].bindings.get(use.ref.name, [])
    return units[-1].start_line if units else use.ref.line


def _dependencies(naming: _Naming, shims: dict[str, _Shim]) -> dict[Node, set[Node]]:
    """What must come before what: definition-time uses, and rebinding order."""
    collector, script = naming.collector, naming.script
    before: dict[Node, set[Node]] = {("unit", key): set() for key in collector.needed}

    def units_of(entity: Entity, user: Unit | None) -> set[Node]:
        if entity[0] != "def":
            return set()
        units = collector.index.definition_units(entity[1], entity[2])
        units = [u for u in units if id(u) in collector.needed and u is not user]
        if user is not None and user.module == entity[1]:
            earlier = [u for u in units if u.start_line < user.start_line]
            # a loop at module level reads the variable it binds itself
            units = earlier if earlier or entity[2] in user.binds else units
        return {("unit", id(u)) for u in units}

    for number, use in enumerate(collector.uses):
        if not use.ref.import_time:
            continue
        name = script.get(use.entity, "") if use.entity[0] == "ns" else use.ref.name
        via_shim = name in shims and (
            use.entity[0] == "ns" or (name != script.get(use.entity) and number not in naming.rewritten)
        )
        if via_shim:
            before[("unit", id(use.unit))].add(("shim", name))
            before.setdefault(("shim", name), set()).update(n for e in shims[name].entities for n in units_of(e, None))
        else:
            before[("unit", id(use.unit))].update(units_of(use.entity, use.unit))
    for module in {u.module for u in collector.needed.values()}:
        for units in collector.index.modules[module].bindings.values():
            chain = [u for u in units if id(u) in collector.needed and not u.imports]
            for earlier, later in zip(chain, chain[1:], strict=False):
                before[("unit", id(later))].add(("unit", id(earlier)))
    return before


def _topological(before: dict[Node, set[Node]], keys: dict[Node, tuple]) -> tuple[list[Node], list[Node]]:
    """Kahn's algorithm, the smallest key first among the nodes that are ready.

    Returns the order and the nodes left waiting on a cycle.
    """
    waiting = {node: set(deps) - {node} for node, deps in before.items()}
    users: dict[Node, list[Node]] = {}
    for node, deps in waiting.items():
        for dep in deps:
            users.setdefault(dep, []).append(node)
    ready = [(keys[n], n) for n, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for user in users.get(node, []):
            waiting[user].discard(node)
            if not waiting[user]:
                heapq.heappush(ready, (keys[user], user))
    placed = set(order)
    return order, [n for n in waiting if n not in placed]


def _cuttable(body: list[ast.stmt], member: ast.stmt, lines: list[str]) -> bool:
    """Whether a method's lines hold nothing but the method (no ``;``-joined neighbours)."""
    at = body.index(member)
    start = min([d.lineno for d in getattr(member, "decorator_list", [])] + [member.lineno])
    first = min([d.col_offset for d in getattr(member, "decorator_list", [])] + [member.col_offset])
    if lines[start - 1].encode("utf-8")[:first].strip():
        return False
    if at and (body[at - 1].end_lineno or 0) >= start:
        return False
    return at + 1 >= len(body) or body[at + 1].lineno > (member.end_lineno or 0)


def _unit_text(info: ModuleInfo, unit: Unit, edits: list[tuple[int, int, int, str]], cut: list[ast.stmt]) -> str:
    """The unit's text with ``edits`` applied and the methods in ``cut`` removed, dedented."""
    lines = info.lines[unit.start_line - 1 : unit.end_line]
    for line, col, end, new in sorted(edits, reverse=True):
        raw = lines[line - unit.start_line].encode("utf-8")
        lines[line - unit.start_line] = (raw[:col] + new.encode("utf-8") + raw[end:]).decode("utf-8")
    keep = [True] * len(lines)
    body: list[ast.stmt] = getattr(unit.node, "body", [])
    removed = [m for m in cut if _cuttable(body, m, info.lines)]
    for member in removed:
        start = min([d.lineno for d in getattr(member, "decorator_list", [])] + [member.lineno])
        for number in range(start, (member.end_lineno or start) + 1):
            keep[number - unit.start_line] = False
        number = start - 1
        while number > unit.start_line and not lines[number - unit.start_line].strip():
            keep[number - unit.start_line] = False
            number -= 1
    text_lines = [ln for ln, k in zip(lines, keep, strict=True) if k]
    if removed and len(removed) == len(body):
        first = info.lines[body[0].lineno - 1]
        text_lines.append(first[: len(first) - len(first.lstrip())] + "pass")
    text = "\n".join(text_lines)
    return dedent_code(text) if text[:1] in (" ", "\t") else text


def _fragment_text(
    index: RepositoryIndex, collector: _Collector, unit: Unit, edits: list[tuple[int, int, int, str]]
) -> str:
    """A unit's text in the script (``edits`` applied, unreachable methods cut)."""
    kept = frozenset(collector.kept[id(unit)]) if isinstance(unit.node, ast.ClassDef) else None
    key = (id(unit), kept)
    if not edits and key in index._texts:
        return index._texts[key]
    cut = [] if kept is None else [d for name, defs in index.members(unit).items() if name not in kept for d in defs]
    text = _unit_text(index.modules[unit.module], unit, edits, cut)
    if not edits:
        index._texts[key] = text
    return text


def _fragment_name(unit: Unit, script: dict[Entity, str]) -> str:
    node = unit.node
    if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
        natural = node.name
    elif isinstance(node, ast.Assign) and list(_target_names(node.targets[0])):
        natural = next(_target_names(node.targets[0]))
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        natural = node.target.id
    else:
        natural = min(unit.binds or unit.mutates or {""})
    return script.get(("def", unit.module, natural), natural)


# --------------------------------------------------------------------------- the slice


def _target_unit(index: RepositoryIndex, candidate: Candidate) -> Unit:
    info = index.files.get(candidate.file)
    if info is None:
        why = index.rejected.get(candidate.file, "another file has the same module name")
        raise _Unsliceable("module not indexed", f"{candidate.file}: {why}")
    top = candidate.qualname.split(".")[0]
    for unit in info.units:
        node = unit.node
        if (
            isinstance(node, (*_FUNCTIONS, ast.ClassDef))
            and node.name == top
            and unit.start_line <= candidate.start_line <= unit.end_line
        ):
            return unit
    raise _Unsliceable("target not found", f"{candidate.file}: no top-level statement holds {candidate.qualname}")


@dataclass
class _Assembly:
    """The ordered fragments, shims and imports of one slice."""

    index: RepositoryIndex
    collector: _Collector
    naming: _Naming

    def order(self) -> tuple[list[Node], list[_Shim], dict[str, _Shim]]:
        shims = _shims(self.naming)
        before = _dependencies(self.naming, shims)
        keys: dict[Node, tuple] = {}
        for key, unit in self.collector.needed.items():
            keys[("unit", key)] = (self.index.modules[unit.module].rank, unit.start_line, 0, unit.position)
        for name, shim in shims.items():
            keys[("shim", name)] = (self.index.modules[shim.module].rank, shim.line, 1, 0)
        order, stuck = _topological(before, keys)
        if stuck:
            raise _Unsliceable("import-time cycle", ", ".join(sorted(self.label(n) for n in stuck)[:6]))
        placed = {n[1] for n in order if n[0] == "shim"}
        late = sorted((s for s in shims.values() if s.name not in placed), key=lambda s: keys[("shim", s.name)])
        return order, late, shims

    def label(self, node: Node) -> str:
        if node[0] == "shim":
            return str(node[1])
        unit = self.collector.needed[node[1]]  # type: ignore[index]
        return f"{unit.file}:{unit.start_line}"

    def fragment(self, node: Node, shims: dict[str, _Shim]) -> Fragment:
        if node[0] == "shim":
            shim = shims[node[1]]  # type: ignore[index]
            file = self.index.modules[shim.module].file
            return Fragment(file, shim.module, shim.name, "import", shim.statement, shim.line, shim.line)
        unit = self.collector.needed[node[1]]  # type: ignore[index]
        text = _fragment_text(self.index, self.collector, unit, self.naming.edits.get(id(unit), []))
        return Fragment(
            unit.file,
            unit.module,
            _fragment_name(unit, self.naming.script),
            unit.kind,
            text,
            unit.start_line,
            unit.end_line,
        )

    def external_imports(self) -> list[str]:
        futures = sorted({f for u in self.collector.needed.values() for f in self.index.modules[u.module].futures})
        lines = {
            self.binding_statement(e, b)
            for e in self.naming.script
            if e[0] == "ext"
            for b in self.collector.external.get(e, {_TYPES_BINDING})
        }
        ordered = sorted(lines, key=lambda s: (0 if s.startswith("import ") else 1 if s.startswith("from ") else 2, s))
        return [f"from __future__ import {f}" for f in futures] + ordered

    def binding_statement(self, entity: Entity, binding: ImportBinding) -> str:
        """The import of ``binding`` (one spelling of ``entity``), under its script name."""
        name = self.naming.script[entity]
        if binding.attr == "*" or name == binding.local:
            return binding.statement
        return ImportBinding(name, binding.module, binding.attr, binding.dotted, False).statement

    def third_party(self) -> list[str]:
        tops = {e[2].split(".")[0] for e in self.naming.script if e[0] == "ext"}
        for unit in self.collector.needed.values():
            tops.update(unit.imported)
        return sorted(t for t in tops if t not in _STDLIB and t not in self.index.top_level)

    def context(self, fragments: list[Fragment]) -> str:
        """Per file: the import statements its kept code uses, then its fragments, in file order."""
        files: dict[str, tuple[list[tuple[int, str]], list[tuple[int, str]]]] = {}
        for fragment in fragments:
            files.setdefault(fragment.file, ([], []))
        for unit in self.used_imports():
            text = _fragment_text(self.index, self.collector, unit, [])
            files.setdefault(unit.file, ([], []))[0].append((unit.start_line, text))
        for unit in self.collector.needed.values():
            text = _fragment_text(self.index, self.collector, unit, [])
            files.setdefault(unit.file, ([], []))[1].append((unit.start_line, text))
        blocks = []
        for path, (imports, definitions) in files.items():
            sections = ["\n".join(text for _, text in sorted(imports))] if imports else []
            sections += [text for _, text in sorted(definitions)]
            if sections:
                blocks.append("```python\n## " + path + "\n" + "\n\n\n".join(sections) + "\n```\n")
        return "\n".join(blocks)

    def used_imports(self) -> list[Unit]:
        found: dict[int, Unit] = {}
        for use in self.collector.uses:
            units = self.index.modules[use.unit.module].bindings.get(use.ref.name, [])
            if units and units[-1].imports:
                found[id(units[-1])] = units[-1]
        return list(found.values())


def slice_dependencies(index: RepositoryIndex, candidate: Candidate) -> DependencySlice | Drop:
    """Everything ``candidate`` reaches in its repository, ready to be sandboxed.

    Slicing many candidates is faster inside one
    :func:`~gym_repost.construct.extract.garbage_collector_paused` block (each call
    pauses the collector for itself, but a collection between calls walks the index).

    Returns:
        The slice, or a :class:`Drop` (stage ``dependencies``) saying why there is none:
        ``unresolved name``, ``module object used``, ``conditional repository import``,
        ``name clash``, ``import-time cycle``, ``module not indexed``, ``target not found``.
    """
    with garbage_collector_paused():
        return _slice(index, candidate)


def _slice(index: RepositoryIndex, candidate: Candidate) -> DependencySlice | Drop:
    try:
        target_unit = _target_unit(index, candidate)
        collector = _Collector(index, candidate, target_unit)
        collector.run()
        naming = _Naming(collector)
        naming.run()
        assembly = _Assembly(index, collector, naming)
        order, late, shims = assembly.order()
    except _Unsliceable as exc:
        return Drop(candidate.file, candidate.qualname, "dependencies", exc.reason, exc.detail)
    fragments = [assembly.fragment(node, shims) for node in order]
    renamed = {(f"{e[1]}.{_natural(e)}" if e[0] == "def" else _natural(e)): new for e, new in naming.renamed}
    if renamed:
        log.info("%s: renamed to avoid name clashes: %s", candidate.key, renamed)
    return DependencySlice(
        target=candidate,
        fragments=fragments,
        external_imports=assembly.external_imports(),
        shims=[s.statement for s in late],
        context=assembly.context(fragments),
        standalone=len(collector.needed) == 1,
        third_party=assembly.third_party(),
        renamed=renamed,
    )
