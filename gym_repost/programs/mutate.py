"""Mutate an input written as source, for the coverage-guided search (standard library only).

An input is the source of a tuple ``(instance, args, kwargs)``. A mutation picks one value
node of it (a number, string, bytes, bool or None constant, a list, tuple, set or dict
display) and replaces it: numbers move by one, to zero, flip sign, double; strings are
emptied, cut, extended, re-cased, padded, given unicode; containers lose, duplicate,
swap or gain elements; or a value becomes a copy of another value of the same type in
the input (boundaries where two arguments are equal). Given the literals of the target
(its constants, those of the functions it calls, the contents of the tables it reads), a
mutation may also put one where it matters: into a string at any position, into a
sequence or a mapping, or a number next to one. The arity of the call, keyword names,
attribute names of ``_gr_build`` and the bodies of lambdas are never touched.
"""

from __future__ import annotations

import ast
import copy
import math
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

LITERAL_SHARE = 0.3
"""Share of mutations that put one of the target's literals in, when it has any."""
_STRING_EDITS: tuple[Callable[[str, random.Random], str], ...] = (
    lambda s, r: "",
    lambda s, r: s[1:],
    lambda s, r: s[:-1],
    lambda s, r: s + s[:1],
    lambda s, r: s.upper(),
    lambda s, r: s.lower(),
    lambda s, r: s.swapcase(),
    lambda s, r: " " + s + " ",
    lambda s, r: (s * 2)[:200],
    lambda s, r: s + r.choice(" _-./,:aZ09é\n"),
    lambda s, r: r.choice(" _-.aZ0é") + s,
    lambda s, r: s.replace(r.choice(s), "", 1) if s else "x",
    lambda s, r: s[: len(s) // 2] + r.choice(" _-aZ9") + s[len(s) // 2 :],
    lambda s, r: s.title(),
)
_INT_EDITS: tuple[Callable[[int, random.Random], int], ...] = (
    lambda v, r: v + 1,
    lambda v, r: v - 1,
    lambda v, r: 0,
    lambda v, r: -v,
    lambda v, r: v * 2 + 1,
    lambda v, r: v // 2,
    lambda v, r: r.randint(-3, 20),
    lambda v, r: 10 ** r.randint(2, 5),
)


def split_input(source: str) -> tuple[str | None, str, str]:
    """``(instance, args, kwargs)`` sources of a combined input source."""
    node = ast.parse(source, mode="eval").body
    assert isinstance(node, ast.Tuple) and len(node.elts) == 3
    instance, args, kwargs = (ast.unparse(e) for e in node.elts)
    return (None if instance == "None" else instance), args, kwargs


def join_input(instance: str | None, args: str, kwargs: str) -> str:
    """The combined source of an input."""
    return f"({instance or 'None'}, {args}, {kwargs})"


def mutable_nodes(tree: ast.Tuple) -> list[tuple[ast.AST, str, int | None]]:
    """``(parent, field, index)`` of every value node a mutation may replace."""
    found: list[tuple[ast.AST, str, int | None]] = []
    instance, args, kwargs = tree.elts
    roots: list[tuple[ast.AST, str, int | None]] = []
    if not (isinstance(instance, ast.Constant) and instance.value is None):
        roots.append((tree, "elts", 0))
    if isinstance(args, ast.Tuple):
        roots.extend((args, "elts", i) for i in range(len(args.elts)))
    if isinstance(kwargs, ast.Dict):
        roots.extend((kwargs, "values", i) for i in range(len(kwargs.values)))
    for root in roots:
        _collect(root, found)
    return found


def _child(parent: ast.AST, field: str, index: int | None) -> ast.AST:
    value = getattr(parent, field)
    return value[index] if index is not None else value


def _collect(ref: tuple[ast.AST, str, int | None], found: list[tuple[ast.AST, str, int | None]]) -> None:
    node = _child(*ref)
    if _is_value(node):
        found.append(ref)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for i in range(len(node.elts)):
            _collect((node, "elts", i), found)
    elif isinstance(node, ast.Dict):
        for i in range(len(node.values)):
            if node.keys[i] is not None:
                _collect((node, "keys", i), found)
            _collect((node, "values", i), found)
    elif isinstance(node, ast.Call):
        built = isinstance(node.func, ast.Name) and node.func.id == "_gr_build"
        for i in range(len(node.args)):
            if not (built and i == 0):
                _collect((node, "args", i), found)
        for i in range(len(node.keywords)):
            _collect((node.keywords[i], "value", None), found)
        if built and len(node.args) == 2 and isinstance(node.args[1], ast.Dict):
            attributes = node.args[1]
            found[:] = [
                f for f in found if not ((f[0] is attributes and f[1] == "keys") or (f[0] is node and f[1] == "args"))
            ]


def _is_value(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not Ellipsis
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float)
    return isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict))


def mutate(
    source: str,
    rng: random.Random,
    replacements: Sequence[str],
    steps: int = 0,
    literals: Sequence[str] = (),
    literal_share: float = LITERAL_SHARE,
) -> str | None:
    """A mutant of a combined input source, or None when it has nothing to mutate.

    Args:
        source: ``(instance, args, kwargs)`` source.
        rng: the search's seeded generator.
        replacements: value sources a node may be replaced with wholesale.
        steps: mutations to apply (0: one to three at random).
        literals: sources of the target's literals (see :func:`with_literal`).
        literal_share: how often a mutation puts a literal in, when there are literals.
    """
    tree = ast.parse(source, mode="eval").body
    if not isinstance(tree, ast.Tuple):
        return None
    for _ in range(steps or rng.choice((1, 1, 1, 2, 3))):
        nodes = mutable_nodes(tree)
        if not nodes:
            return None
        parent, field, index = rng.choice(nodes)
        new = None
        if literals and rng.random() < literal_share:
            new = with_literal(_child(parent, field, index), rng, literals)
        if new is not None:
            pass
        elif rng.random() < 0.15:
            new = _equalized(_child(parent, field, index), nodes, rng)
        else:
            new = _mutated(_child(parent, field, index), rng, replacements)
        if new is None:
            continue
        if index is None:
            setattr(parent, field, new)
        else:
            getattr(parent, field)[index] = new
    try:
        return ast.unparse(tree)
    except (ValueError, RecursionError):
        return None


def substitutions(source: str, literals: Sequence[str]) -> Iterator[str]:
    """Every input made by putting one literal in one place of ``source``, in order: each
    value node (outermost first) replaced by each literal of its kind (a number written as
    a string for a numeric string), and each sequence with each literal appended.

    The deterministic first round of a hunt for a mutant: a literal of the mutated line
    in place of an argument is often what tells it apart. Made one at a time, as the hunt
    takes them, each by putting the literal in the parsed input and taking it out again
    once written: one input of a large instance (a table and its rows) has thousands of
    places, and a copy of the input per place made the hunt cost minutes of CPU time.
    """
    tree = ast.parse(source, mode="eval").body
    if not isinstance(tree, ast.Tuple):
        return
    values = [(src, v) for src in literals if (v := _literal(src)) is not _NOT_LITERAL]
    seen = {ast.unparse(tree)}
    for parent, field, index in mutable_nodes(tree):
        node = _child(parent, field, index)
        for replacement in _substitutes(node, values):
            _put(parent, field, index, replacement)
            try:
                written = ast.unparse(tree)
            except (ValueError, RecursionError):
                continue
            finally:
                _put(parent, field, index, node)
            if written not in seen:
                seen.add(written)
                yield written


def _put(parent: ast.AST, field: str, index: int | None, node: ast.AST) -> None:
    if index is None:
        setattr(parent, field, node)
    else:
        getattr(parent, field)[index] = node


def _substitutes(node: ast.AST, values: list[tuple[str, object]]) -> list[ast.expr]:
    """Literals that may stand in for ``node`` (see :func:`substitutions`)."""
    found = []
    if isinstance(node, (ast.Constant, ast.UnaryOp)):
        value = ast.literal_eval(node)
        if isinstance(value, bool):
            return []
        numeric = isinstance(value, str) and value.lstrip("-").isdigit()
        for source, literal in values:
            if type(literal) is type(value) and type(value) in (str, bytes, int, float):
                found.append(_parse(source))
            elif numeric and type(literal) is int:
                found.append(_parse(repr(str(literal))))
    elif isinstance(node, (ast.List, ast.Tuple)):
        for source, _literal_value in values:
            literal = _parse(source)
            if literal is not None:
                found.append(type(node)(elts=[*node.elts, literal], ctx=ast.Load()))
    return [f for f in found if f is not None]


def with_literal(node: ast.AST, rng: random.Random, literals: Sequence[str]) -> ast.expr | None:
    """The value with one of the target's literals put in (None when none fits it).

    A string gets a string literal inserted at a random position (or becomes it); bytes
    likewise; a number becomes an int literal or its neighbour; a sequence gets any
    literal inserted; a mapping gets a literal key.
    """
    pairs = [(source, value) for source in literals if (value := _literal(source)) is not _NOT_LITERAL]
    if isinstance(node, (ast.Constant, ast.UnaryOp)):
        value = ast.literal_eval(node)
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            numbers = [v for _, v in pairs if type(v) is int]
            return _parse(repr(rng.choice(numbers) + rng.choice((0, 0, -1, 1)))) if numbers else None
        if isinstance(value, (str, bytes)):
            same: list[Any] = [v for _, v in pairs if type(v) is type(value)]
            if isinstance(value, str) and value.lstrip("-").isdigit():
                same += [str(v) for _, v in pairs if type(v) is int]
            if not same:
                return None
            literal = rng.choice(same)
            where = rng.randrange(len(value) + 1)
            new = rng.choice((value[:where] + literal + value[where:], literal, value + literal, literal + value))
            return _parse(repr(new[:400]))
        return None
    if isinstance(node, (ast.List, ast.Tuple)):
        element = _parse(rng.choice(literals))
        if element is None:
            return None
        elts = list(node.elts)
        elts.insert(rng.randrange(len(elts) + 1), element)
        return type(node)(elts=elts, ctx=ast.Load())
    if isinstance(node, ast.Dict):
        keys = [source for source, v in pairs if isinstance(v, (str, int)) and not isinstance(v, bool)]
        if not keys:
            return None
        copied = copy.deepcopy(rng.choice(node.values)) if node.values else ast.Constant(1)
        return ast.Dict(keys=[*node.keys, _parse(rng.choice(keys))], values=[*node.values, copied])
    return None


_NOT_LITERAL = object()


def _literal(source: str) -> object:
    try:
        return ast.literal_eval(source)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _equalized(node: ast.AST, nodes: list[tuple[ast.AST, str, int | None]], rng: random.Random) -> ast.expr | None:
    """A copy of another value of the input of the same kind: boundaries where two
    arguments are equal (``value == floor``) are where off-by-one mutants show."""
    if not isinstance(node, (ast.Constant, ast.UnaryOp)):
        return None
    kind = type(ast.literal_eval(node))
    same = [
        other
        for other in (_child(*ref) for ref in nodes)
        if other is not node
        and isinstance(other, (ast.Constant, ast.UnaryOp))
        and type(ast.literal_eval(other)) is kind
    ]
    return copy.deepcopy(rng.choice(same)) if same else None


def _mutated(node: ast.AST, rng: random.Random, replacements: Sequence[str]) -> ast.expr | None:
    if replacements and rng.random() < 0.12:
        return _parse(rng.choice(replacements))
    if isinstance(node, (ast.Constant, ast.UnaryOp)):
        return _mutated_constant(ast.literal_eval(node), rng, replacements)
    if isinstance(node, ast.Dict):
        return _mutated_dict(node, rng)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return _mutated_sequence(node, rng)
    return None


def _parse(source: str) -> ast.expr | None:
    try:
        return ast.parse(source, mode="eval").body
    except SyntaxError:
        return None


def _mutated_constant(value: object, rng: random.Random, replacements: Sequence[str]) -> ast.expr | None:
    if isinstance(value, bool):
        new: object = not value
    elif isinstance(value, int):
        new = rng.choice(_INT_EDITS)(value, rng)
    elif isinstance(value, float):
        rounded = round(value) if math.isfinite(value) else value  # round() of inf or nan raises
        new = rng.choice((value + 1.0, value / 2, -value, 0.0, value * 10, rounded))
    elif isinstance(value, str):
        new = rng.choice(_STRING_EDITS)(value, rng)
    elif isinstance(value, bytes):
        new = rng.choice((b"", value + b"x", value[1:], value.upper(), value * 2))
    else:
        return _parse(rng.choice(replacements)) if replacements else None
    return _parse(repr(new))


def _mutated_sequence(node: ast.List | ast.Tuple | ast.Set, rng: random.Random) -> ast.expr:
    elts = list(node.elts)
    choice = rng.randrange(6) if elts else 5
    if choice == 0:
        elts.pop(rng.randrange(len(elts)))
    elif choice == 1:
        elts.insert(rng.randrange(len(elts) + 1), rng.choice(elts))
    elif choice == 2 and len(elts) > 1:
        i, j = rng.sample(range(len(elts)), 2)
        elts[i], elts[j] = elts[j], elts[i]
    elif choice == 3:
        elts = []
    elif choice == 4:
        elts.reverse()
    else:
        elts.append(rng.choice(elts) if elts else ast.Constant(rng.choice((0, 1, "a", -2))))
    if isinstance(node, ast.Set) and not elts:
        return ast.Call(func=ast.Name("set", ast.Load()), args=[], keywords=[])
    return type(node)(elts=elts, ctx=ast.Load()) if not isinstance(node, ast.Set) else ast.Set(elts=elts)


def _mutated_dict(node: ast.Dict, rng: random.Random) -> ast.expr:
    keys, values = list(node.keys), list(node.values)
    choice = rng.randrange(3) if keys else 2
    if choice == 0:
        i = rng.randrange(len(keys))
        keys.pop(i)
        values.pop(i)
    elif choice == 1:
        keys, values = [], []
    else:
        keys.append(ast.Constant(rng.choice(("a", "b", "key", "x", "", 0, 1))))
        values.append(rng.choice(values) if values else ast.Constant(rng.choice((0, 1, "a", None))))
    return ast.Dict(keys=keys, values=values)
