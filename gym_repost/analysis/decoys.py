"""Decoys: rewrites of a focal file that change its text but not its behaviour.

The mutation run of a test-file task (:mod:`gym_repost.harness.testfile`) runs
the decoys among the mutants, in the same form and a shuffled order; only the host knows
which variant is which. A test that fails on a decoy detects a change of the code, not of
its behaviour (comparing the focal file with its original text, hash, AST or bytecode),
and its mutation score is 0.

Each function holding mutants (and the module, when mutants lie outside functions) gets a
``noop_statement`` decoy where one applies, and at random one of the other kinds beside
it, so that a test that would spot the changes of that function spots a decoy. Kinds
(:attr:`Decoy.kind`):

* ``double_negation``: the test of an ``if``, ``elif``, ``while``, conditional
  expression, ``assert`` or comprehension ``if``: ``c`` -> ``not not (c)`` (the same one
  truth-value test of ``c``);
* ``rename_local``: a local variable renamed everywhere in its function (not a
  parameter; functions that call ``locals``, ``vars``, ``eval``, ``exec`` or ``dir``, or
  bind the name in a nested scope, are left alone);
* ``noop_statement``: ``name = None`` with a fresh name, before the first statement of the
  function (or of the module, after its docstring and ``__future__`` imports): the
  bytecode changes, the behaviour does not.

Every decoy compiles and differs from the original in its text and its AST.
"""

from __future__ import annotations

import ast
import builtins
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from gym_repost.analysis.mutation import Mutant
from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source_text import Edit, SourceText, apply_edits

KINDS: tuple[str, ...] = ("double_negation", "rename_local", "noop_statement")
"""Every kind of decoy."""
DEFAULT_LIMIT = 24
"""Decoys per run at most (one or two per function holding mutants, the module counted as one)."""

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_INTROSPECTION = frozenset({"locals", "vars", "eval", "exec", "dir"})
_NOOP_NAMES = ("unused", "_unused", "_ignored", "_sentinel", "_marker", "_dummy")


@dataclass(frozen=True)
class Decoy:
    """One equivalent rewrite of a source: two equivalent edits in one function (or the module).

    Attributes:
        kind: the kinds of its edits (from :data:`KINDS`), joined by ``+``.
        line: a line of the original that runs whenever the rewritten code runs (the first
            statement of its function, or of the module): the tests that run it are the
            ones the decoy is run with.
        source: the complete rewritten source.
        original_source: the source it rewrites.
    """

    kind: str
    line: int
    source: str = field(repr=False)
    original_source: str = field(repr=False)


def generate_decoys(
    source: str, mutants: Sequence[Mutant], *, limit: int = DEFAULT_LIMIT, rng: random.Random | None = None
) -> list[Decoy]:
    """Decoys for ``source``: one or two in each function (and the module) holding ``mutants``.

    Args:
        source: the focal file.
        mutants: the mutants that will run; the decoys go where they are.
        limit: the most decoys; beyond it a random choice.
        rng: the choice of places, kinds and spots (default: seeded from the system).

    Returns:
        The decoys, each compiling and differing from ``source`` in text and AST; a place
        where no kind applies has none.
    """
    rng = rng or random.Random()
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return []
    text = SourceText(source)
    original_dump = ast.dump(tree)
    taken = _identifiers(tree)
    decoys: list[Decoy] = []
    for scope in _places(tree, mutants):
        edits = _edits(scope, text, taken)
        decoys += _decoys_for(scope, edits, text, rng, original_dump)
    if len(decoys) > limit:
        decoys = rng.sample(decoys, limit)
    return decoys


def disguise(mutant: Mutant, rng: random.Random | None = None) -> str:
    """The mutant's source with one equivalent edit added in the same function.

    A mutant then never has the text the public mutation operators give (a test cannot
    recognise it by comparing the focal file with the known mutants), and it looks like a
    decoy: two edits in one function. The plain mutant when no edit applies.
    """
    rng = rng or random.Random()
    source = mutant.original_source
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return mutant.source
    text = SourceText(source)
    scope = _place(tree, mutant.line)
    start, end = mutant.offset, mutant.offset + len(mutant.original)
    edits = [e for e in _edits(scope, text, _identifiers(tree)) if e.clear_of(start, end)]
    rng.shuffle(edits)
    for edit in edits[:4]:
        disguised = apply_edits(source, [edit, Edit("mutant", start, end, mutant.replacement)])
        try:
            compile(disguised, "<mutant>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue
        return disguised
    return mutant.source


def _place(tree: ast.Module, line: int) -> ast.AST:
    """The innermost function holding ``line``, or the module."""
    holders = [
        f for f in ast.walk(tree) if isinstance(f, _FUNCTIONS) and f.lineno <= line <= (f.end_lineno or f.lineno)
    ]
    return min(holders, key=lambda f: (f.end_lineno or f.lineno) - f.lineno) if holders else tree


def _places(tree: ast.Module, mutants: Sequence[Mutant]) -> list[ast.AST]:
    """The place of each mutant (:func:`_place`), each once."""
    chosen: dict[int, ast.AST] = {}
    for mutant in mutants:
        place = _place(tree, mutant.line)
        chosen.setdefault(id(place), place)
    return list(chosen.values())


def _decoys_for(
    scope: ast.AST, edits: list[Edit], text: SourceText, rng: random.Random, original_dump: str
) -> list[Decoy]:
    """A decoy whose first edit changes the bytecode where one can, and at random a second one.

    The ``noop_statement`` changes the text, the AST, the bytecode and the line table, so a
    test that spots any change of the function spots it; the other kinds keep a test that
    only ignores such statements from passing every decoy.
    """
    line = _first_line(scope)
    if line is None or not edits:
        return []
    noops = [e for e in edits if e.kind == "noop_statement"]
    others = [e for e in edits if e.kind != "noop_statement"]
    rng.shuffle(noops)
    rng.shuffle(others)
    out = []
    for firsts in ([*noops[:1], *others[:1]], others[1:3] if rng.random() < 0.5 else []):
        decoy = _pair(firsts[0], edits, scope, line, text, rng, original_dump) if firsts else None
        if decoy is not None:
            out.append(decoy)
    return out


def _pair(
    first: Edit,
    edits: list[Edit],
    scope: ast.AST,
    line: int,
    text: SourceText,
    rng: random.Random,
    original_dump: str,
) -> Decoy | None:
    partners = [
        e
        for e in edits
        if e is not first and e.clear_of(first.start, first.end) and not (e.kind == first.kind == "noop_statement")
    ]
    rng.shuffle(partners)
    for group in [[first, p] for p in partners[:4]] + [[first]]:
        decoy = Decoy(
            kind="+".join(e.kind for e in group),
            line=line,
            source=apply_edits(text.source, group),
            original_source=text.source,
        )
        if _is_equivalent_rewrite(decoy, original_dump):
            return decoy
    return None


def _edits(scope: ast.AST, text: SourceText, taken: set[str]) -> list[Edit]:
    return [*_noops(scope, text, taken), *_double_negations(scope, text), *_renames(scope, text, taken)]


def _is_equivalent_rewrite(decoy: Decoy, original_dump: str) -> bool:
    """The checks made of every decoy: it compiles, and its text and AST differ."""
    if decoy.source == decoy.original_source:
        return False
    try:
        compile(decoy.source, "<decoy>", "exec", dont_inherit=True)
        return ast.dump(parse_python(decoy.source)) != original_dump
    except (SyntaxError, ValueError):
        return False


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope`` outside its nested functions and classes."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))
    return out


def _body(scope: ast.AST) -> list[ast.stmt]:
    return list(getattr(scope, "body", []))


def _first_line(scope: ast.AST) -> int | None:
    """The first statement of the scope that runs (docstring and __future__ imports aside)."""
    for statement in _body(scope):
        if (
            isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            continue
        if isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
            continue
        return statement.lineno
    return None


def _double_negations(scope: ast.AST, text: SourceText) -> list[Edit]:
    out = []
    for node in _own_nodes(scope):
        tests: list[ast.expr] = []
        if isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests += node.ifs
        for test in tests:
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                continue  # `not not not c` reads oddly; another spot will do
            start, end = text.span(test)
            out.append(Edit("double_negation", start, end, f"not not ({text.source[start:end]})"))
    return out


def _renames(scope: ast.AST, text: SourceText, taken: set[str]) -> list[Edit]:
    if not isinstance(scope, _FUNCTIONS):
        return []
    line = _first_line(scope)
    nodes = list(ast.walk(scope))
    if line is None or any(isinstance(n, ast.Name) and n.id in _INTROSPECTION for n in nodes):
        return []
    stored = {n.id for n in _own_nodes(scope) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound_otherwise = _bound_otherwise(scope, nodes)
    in_fstrings = {
        n.id for node in nodes if isinstance(node, ast.JoinedStr) for n in ast.walk(node) if isinstance(n, ast.Name)
    }
    out = []
    for name in sorted(stored - bound_otherwise - in_fstrings):
        new = _fresh(name + "_", taken)
        spans = sorted(text.span(n) for n in nodes if isinstance(n, ast.Name) and n.id == name)
        first, last = spans[0][0], spans[-1][1]
        pieces, at = [], first
        for start, end in spans:
            pieces.append(text.source[at:start] + new)
            at = end
        out.append(Edit("rename_local", first, last, "".join(pieces)))
    return out


def _bound_otherwise(scope: ast.AST, nodes: list[ast.AST]) -> set[str]:
    """Names bound in ``scope`` other than as plain variables, or declared global/nonlocal."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        elif isinstance(node, (*_FUNCTIONS, ast.ClassDef)) and node is not scope:
            names.add(node.name)
            if isinstance(node, ast.ClassDef):  # class scopes resolve names their own way
                names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
    return names


def _noops(scope: ast.AST, text: SourceText, taken: set[str]) -> list[Edit]:
    line = _first_line(scope)
    if line is None:
        return []
    if isinstance(scope, _FUNCTIONS) and any(
        isinstance(n, ast.Name) and n.id in _INTROSPECTION for n in ast.walk(scope)
    ):
        return []
    statement = next(s for s in _body(scope) if s.lineno == line)
    start = text.offset(line, 0)
    indent_end = text.offset(line, statement.col_offset)
    indent = text.source[start:indent_end]
    if indent.strip():  # the statement shares its line with the header (`def f(): return 1`)
        return []
    return [Edit("noop_statement", start, start, f"{indent}{_fresh(base, taken)} = None\n") for base in _NOOP_NAMES]


def _identifiers(tree: ast.Module) -> set[str]:
    names = set(dir(builtins))
    for node in ast.walk(tree):
        for attr in ("id", "arg", "name", "attr", "asname"):
            value = getattr(node, attr, None)
            if isinstance(value, str):
                names.add(value)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)
    return names


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name
