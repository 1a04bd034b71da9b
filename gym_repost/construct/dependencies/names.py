"""Global-name references of code: the names a piece of code reads, binds and accesses as
attributes, scope by scope."""

from __future__ import annotations

import ast
import builtins
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
# module attributes every module has (``__path__``: packages) count as builtins
BUILTINS = frozenset(dir(builtins)) | {
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
# builtins of Python 2 only: never bound on Python 3, so a read of one (in a branch such as
# ``if sys.version_info < (3,): _range = xrange``) fails in the script exactly as it would
# in the module; nothing needs to be imported for it
PY2_BUILTINS = frozenset(
    {
        "basestring",
        "unicode",
        "long",
        "xrange",
        "unichr",
        "raw_input",
        "file",
        "reduce",
        "cmp",
        "execfile",
        "buffer",
        "apply",
        "intern",
        "coerce",
        "reload",
        "StandardError",
    }
)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "hasattr", "setattr", "delattr"})
# base classes from these modules call no methods of their subclasses but dunders, except
# the collection ABCs (COLLECTION_ABC_METHODS)
TEMPLATE_FREE_MODULES = frozenset({"typing", "typing_extensions", "abc", "collections"})


def _abc_methods() -> dict[str, frozenset[str]]:
    import collections.abc

    found = {}
    for name in collections.abc.__all__:
        kind = getattr(collections.abc, name)
        methods = {
            member
            for klass in kind.__mro__
            if klass.__module__ in ("collections.abc", "_collections_abc")
            for member in vars(klass)
            if not member.startswith("__") and member != "_abc_impl" and not member.startswith(f"_{klass.__name__}__")
        }
        if methods:
            found[name] = frozenset(methods)
    return found


COLLECTION_ABC_METHODS = _abc_methods()
"""The methods other than dunders that each collection ABC of :mod:`collections.abc` (and
its :mod:`typing` alias) defines, by the ABC's name: abstract ones a subclass must define
to be instantiated at all (``MutableSet.add``, ``discard``) and mixins that call the
subclass's (``MutableSet.remove`` calls ``discard``). A subclass keeps those it defines."""

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
class Scope:
    kind: Literal["module", "class", "function"]
    names: frozenset[str]
    parent: Scope | None
    import_time: bool
    declared_global: frozenset[str] = frozenset()


def target_names(node: ast.AST) -> Iterator[str]:
    """Names a store target binds (``a``, ``a, (b, *c)``); not ``x.y`` nor ``x[k]``."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from target_names(elt)
    elif isinstance(node, ast.Starred):
        yield from target_names(node.value)


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


class ReferenceWalker:
    """Walks code with Python's scoping rules and collects its global references."""

    def __init__(self, lazy_annotations: bool) -> None:
        self.lazy = lazy_annotations
        self.out = CodeNames()
        self.top_class: Scope | None = None

    def name(self, node: ast.Name, attrs: tuple[str, ...], scope: Scope, attr_ends: tuple[int, ...] = ()) -> None:
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

    def _is_global(self, name: str, scope: Scope) -> bool:
        current: Scope | None = scope
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

    def visit(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) or scope.kind == "function":
                self.name(node, (), scope)
        elif isinstance(node, ast.Attribute):
            self.attribute(node, scope)
        elif isinstance(node, FUNCTIONS):
            self.function(node, scope)
        elif isinstance(node, ast.ClassDef):
            self.class_def(node, scope)
        elif isinstance(node, ast.Lambda):
            self.lambda_(node, scope)
        elif isinstance(node, COMPREHENSIONS):
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

    def attribute(self, node: ast.Attribute, scope: Scope) -> None:
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

    def annotated(self, node: ast.AnnAssign, scope: Scope) -> None:
        # annotations of locals are never evaluated; others only without the future import
        if not self.lazy and scope.kind != "function":
            self.visit(node.annotation, scope)
        self.visit(node.target, scope)
        if node.value is not None:
            self.visit(node.value, scope)

    def arguments(self, args: ast.arguments, scope: Scope) -> None:
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.visit(default, scope)
        if self.lazy:
            return
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        for arg in every:
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation, scope)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator, scope)
        self.arguments(node.args, scope)
        if node.returns is not None and not self.lazy:
            self.visit(node.returns, scope)
        self.body(node.args, node.body, scope)

    def body(self, args: ast.arguments, body: list[ast.stmt], scope: Scope) -> None:
        bound, glob, nonlocal_ = _block_scope(body)
        params = {
            a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a is not None
        }
        names = frozenset((params | bound) - glob) | nonlocal_
        inner = Scope("function", names, scope, False, frozenset(glob))
        for statement in body:
            self.visit(statement, inner)

    def lambda_(self, node: ast.Lambda, scope: Scope) -> None:
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self.visit(default, scope)
        self.body(node.args, [ast.Expr(node.body)], scope)

    def class_def(self, node: ast.ClassDef, scope: Scope) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr, scope)
        inner = Scope("class", frozenset(bound_names(node.body)), scope, scope.import_time)
        for statement in node.body:
            self.visit(statement, inner)

    def comprehension(self, node: ast.expr, scope: Scope) -> None:
        generators: list[ast.comprehension] = node.generators  # type: ignore[attr-defined]
        self.visit(generators[0].iter, scope)
        names = frozenset(n for g in generators for n in target_names(g.target))
        inner = Scope("function", names, scope, scope.import_time)
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
    walker = ReferenceWalker(lazy_annotations)
    scope = Scope("module", frozenset(), None, True)
    if class_scope is not None:
        scope = Scope("class", class_scope, scope, True)
        walker.top_class = scope
    for node in nodes:
        walker.visit(node, scope)
    return walker.out
