"""Mutation testing: an AST mutator that edits source text in place, plus the score.

:func:`generate_mutants` walks the AST of a function's or a module's source and, for
every applicable node, replaces the node's exact character span with a mutated snippet.
Everything outside the span (comments, formatting, line endings) stays byte for byte
the same, so a mutant of a whole module can be diffed, written to disk or exec'd from
memory. Lines keep their numbers, except after a multi-line statement collapsed into
``pass`` or ``return None``.

Operators (names used in :attr:`Mutant.operator` and the ``operators`` argument):

* ``arith``: ``+``/``-`` swapped, ``*``/``/`` swapped, ``//`` -> ``/``, ``/`` -> ``//``,
  ``%`` -> ``*``, ``**`` -> ``*``, ``&``/``|`` swapped, ``^`` -> ``|``, ``<<``/``>>`` swapped.
* ``compare``: ``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``is``/``is not``,
  ``in``/``not in``; one mutant per operator of a chained comparison.
* ``boolop``: ``and``/``or`` swapped (every operator of one ``BoolOp`` node at once).
* ``unary``: ``-x``, ``+x``, ``~x``, ``not x`` -> ``x``.
* ``constant``: ``n`` -> ``n + 1`` (ints and finite floats), ``True``/``False`` swapped,
  ``"s"`` -> ``"XXsXX"`` (``""`` -> ``"XX"``), same for bytes, with the markers put inside
  the literal's own quotes. ``None``, ``...`` and
  complex literals are left alone.
* ``augassign``: ``+=``/``-=`` and the other ``arith`` pairs, in place.
* ``negate_cond``: the test of ``if``, ``elif``, ``while``, a conditional expression or a
  comprehension's ``if``: ``c`` -> ``not (c)``.
* ``return_value``: ``return x`` -> ``return None`` (not for a bare ``return`` or
  ``return None``; a literal return value also gets its ``constant`` mutant).
* ``remove_stmt``: an expression statement, assignment, augmented assignment or annotated
  assignment with a value -> ``pass``. The statement is always replaced, never deleted, so
  no block becomes empty and line numbers do not move.
* ``break_continue``: ``break``/``continue`` swapped.

Never mutated: docstrings and other bare string or constant expression statements (no-op
code, every mutant of it is equivalent), decorators, annotations, the whole signature
(default values included: the signature is the interface a task gives the agent, so its
mutants test nothing about the body), class bases and keywords, f-string internals,
``match`` patterns, ``type`` aliases and imports (hence ``__future__`` imports).

Cheap equivalent mutants are dropped: ``x + 0`` / ``x - 0`` and ``-0``.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import hashlib
import itertools
import math
import re
import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import cast

from gym_repost.analysis.parsing import parse_python
from gym_repost.errors import ConfigError

OPERATORS: tuple[str, ...] = (
    "arith",
    "compare",
    "boolop",
    "unary",
    "constant",
    "augassign",
    "negate_cond",
    "return_value",
    "remove_stmt",
    "break_continue",
)
"""Every mutation operator, in the order used to report counts."""

# Two-sided 95% normal quantile, for the Wilson interval.
_Z95 = 1.959963984540054


@dataclass(frozen=True)
class Mutant:
    """One mutation of a source text: a single span replaced by another snippet.

    Lines are 1-based and columns 0-based *character* offsets into the line (not the UTF-8
    byte offsets the ``ast`` module reports), so ``lines[line - 1][col:]`` starts with
    ``original``. The span is that of the mutated node in the original source: an
    expression for the expression operators, a statement for ``remove_stmt``,
    ``return_value``, ``break_continue`` and ``augassign``.

    Attributes:
        operator: one of :data:`OPERATORS`.
        line: first line of the span.
        col: column where the span starts on ``line``.
        end_line: last line of the span.
        end_col: column just after the span on ``end_line``.
        original: the source text of the span.
        replacement: the text that replaces it.
        original_source: the complete source the mutant was generated from.
        offset: character offset of the span in ``original_source``.
    """

    operator: str
    line: int
    col: int
    end_line: int
    end_col: int
    original: str
    replacement: str
    original_source: str = field(repr=False)
    offset: int = field(repr=False)

    @property
    def source(self) -> str:
        """The complete mutated source (computed on demand to keep mutants small)."""
        end = self.offset + len(self.original)
        return self.original_source[: self.offset] + self.replacement + self.original_source[end:]

    def diff(self, name: str = "target.py") -> str:
        """Return a unified diff from the original source to the mutant.

        Args:
            name: file name shown in the ``--- a/NAME`` and ``+++ b/NAME`` headers.

        Returns:
            The diff text, with git's ``\\ No newline at end of file`` marker when the
            last line has no newline.
        """
        lines = difflib.unified_diff(
            _diff_lines(self.original_source),
            _diff_lines(self.source),
            fromfile=f"a/{name}",
            tofile=f"b/{name}",
        )
        return "".join(lines)


@dataclass(frozen=True)
class MutationScore:
    """The share of mutants that the tests kill, with its uncertainty.

    A mutant that times out counts as killed (the tests did not let it pass) but is
    reported apart in ``timeouts``; ``killed`` holds only mutants a test failed on.

    Attributes:
        score: ``(killed + timeouts) / total``, or None when no mutant was run.
        killed: mutants a test failed on.
        survived: mutants every test passed on.
        timeouts: mutants whose test run timed out.
        total: mutants run.
        ci_low: lower end of the 95% Wilson score interval for ``score`` (0.0 if total is 0).
        ci_high: upper end of that interval (1.0 if total is 0).
    """

    score: float | None
    killed: int
    survived: int
    timeouts: int
    total: int
    ci_low: float
    ci_high: float


def generate_mutants(
    source: str,
    *,
    operators: Collection[str] | None = None,
    lines: Collection[int] | None = None,
) -> list[Mutant]:
    """Return every mutant of ``source``, in a deterministic order.

    Args:
        source: a function's source (possibly decorated, possibly indented as a method
            is inside its class) or a whole module.
        operators: names from :data:`OPERATORS` to apply; None means all of them.
        lines: keep only mutants whose mutated node starts on one of these 1-based lines
            (for instance the lines of one function within its module); None means all.

    Returns:
        Mutants sorted by position (outer node first where two start together), each
        one parsing, differing from the original AST and having a distinct source text.

    Raises:
        SyntaxError: ``source`` does not parse.
        ConfigError: an unknown operator name.
    """
    selected = _check_operators(operators)
    text = _SourceText(source)
    finder = _MutationFinder(text, selected, None if lines is None else frozenset(lines))
    with warnings.catch_warnings():
        # Re-parsing snippets would repeat the source's own warnings (invalid escapes...).
        warnings.simplefilter("ignore")
        for statement in _top_level_body(source, text):
            finder.visit(statement)
    edits = sorted(finder.edits, key=lambda e: (e.start, -e.end))
    return _to_mutants(edits, text)


def sample_mutants(mutants: Sequence[Mutant], k: int, seed: int) -> list[Mutant]:
    """Pick ``k`` mutants without replacement, reproducibly.

    Each mutant gets a rank from a hash of ``seed`` and the mutant's own identity
    (operator, span, replacement), and the ``k`` lowest ranks win. The choice is the same
    on every platform and Python version, and a mutant chosen from a list stays chosen
    when unrelated mutants are added elsewhere in it (unless they outrank it).

    Args:
        mutants: the population, e.g. from :func:`generate_mutants`.
        k: how many to pick; all of them when ``k >= len(mutants)``.
        seed: the sampling seed.

    Returns:
        The chosen mutants, in their order in ``mutants``.

    Raises:
        ValueError: ``k`` is negative.
    """
    if k < 0:
        raise ValueError(f"cannot sample a negative number of mutants: {k}")
    if k >= len(mutants):
        return list(mutants)
    ranked = sorted(range(len(mutants)), key=lambda i: (_sample_rank(mutants[i], seed), i))
    return [mutants[i] for i in sorted(ranked[:k])]


def mutation_score(killed: int, total: int, timeouts: int = 0, *, population: int | None = None) -> MutationScore:
    """Compute a mutation score and its 95% Wilson score interval.

    Timeouts count as killed (a mutant that hangs does not pass the tests) and are
    reported apart. The Wilson interval stays inside [0, 1] and is honest for small or
    extreme samples, so a score over a capped sample of mutants shows its uncertainty.

    When the mutants run are a sample without replacement from a known ``population``
    (a seeded cap on the mutants of a file), the distances from the score to the ends of
    the interval are scaled by the finite population correction
    ``sqrt((population - total) / (population - 1))``: the interval narrows as the
    sample grows and is the score itself when every mutant was run.

    Args:
        killed: mutants a test failed on (timeouts excluded).
        total: mutants run.
        timeouts: mutants whose test run timed out.
        population: mutants the sample was drawn from; None for no correction.

    Returns:
        The score; ``score`` is None and the interval is [0, 1] when ``total`` is 0.

    Raises:
        ValueError: a negative count, ``killed + timeouts > total``, or a population
            smaller than ``total``.
    """
    if min(killed, total, timeouts) < 0 or killed + timeouts > total:
        raise ValueError(f"invalid mutant counts: killed={killed}, timeouts={timeouts}, total={total}")
    if population is not None and population < total:
        raise ValueError(f"population {population} is smaller than the sample {total}")
    detected = killed + timeouts
    survived = total - detected
    if total == 0:
        return MutationScore(None, killed, survived, timeouts, total, 0.0, 1.0)
    score = detected / total
    low, high = _wilson_interval(detected, total)
    if population is not None:
        correction = math.sqrt((population - total) / (population - 1)) if population > 1 else 0.0
        low = score - (score - low) * correction
        high = score + (high - score) * correction
    return MutationScore(score, killed, survived, timeouts, total, low, high)


def count_by_operator(mutants: Sequence[Mutant]) -> dict[str, int]:
    """Count mutants per operator, in the order of :data:`OPERATORS`.

    Args:
        mutants: any mutants.

    Returns:
        Every operator name mapped to its count, zero counts included.
    """
    counts = dict.fromkeys(OPERATORS, 0)
    for mutant in mutants:
        counts[mutant.operator] += 1
    return counts


def _wilson_interval(successes: int, n: int) -> tuple[float, float]:
    p = successes / n
    z2 = _Z95 * _Z95
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    margin = _Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    # At p = 0 or 1 one end is exactly 0 or 1; floating point would miss it by an ulp.
    low = 0.0 if successes == 0 else max(0.0, centre - margin)
    high = 1.0 if successes == n else min(1.0, centre + margin)
    return low, high


def _sample_rank(mutant: Mutant, seed: int) -> bytes:
    key = (
        f"{seed}\0{mutant.operator}\0{mutant.line}:{mutant.col}-{mutant.end_line}:"
        f"{mutant.end_col}\0{mutant.replacement}"
    )
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def _check_operators(operators: Collection[str] | None) -> frozenset[str]:
    if operators is None:
        return frozenset(OPERATORS)
    unknown = sorted(set(operators) - set(OPERATORS))
    if unknown:
        raise ConfigError(f"unknown mutation operator(s) {', '.join(unknown)}; known: {', '.join(OPERATORS)}")
    return frozenset(operators)


def _diff_lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


# --------------------------------------------------------------------------- source text

# Python's own line breaks; str.splitlines would also break on \f, \x1c, \u2028...
_NEWLINE = re.compile(r"\r\n|\r|\n")
_INDENT_WRAPPER = "if True:\n"


class _SourceText:
    """Character offsets of AST positions in one source string."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(source)]
        self.line_shift = 0
        self._encoded: dict[int, bytes] = {}

    def offset(self, lineno: int, byte_col: int) -> int:
        """Character offset of an ``ast`` (line, UTF-8 byte column) position."""
        index = lineno - 1 - self.line_shift
        start = self.line_starts[index]
        end = self.line_starts[index + 1] if index + 1 < len(self.line_starts) else None
        line = self.source[start:end]
        if line.isascii():
            return start + byte_col
        encoded = self._encoded.get(index)
        if encoded is None:
            encoded = self._encoded[index] = line.encode("utf-8", "surrogatepass")
        return start + len(encoded[:byte_col].decode("utf-8", "surrogatepass"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        """Character span ``[start, end)`` of a node."""
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def position(self, offset: int) -> tuple[int, int]:
        """1-based line and 0-based character column of a character offset."""
        index = bisect.bisect_right(self.line_starts, offset) - 1
        return index + 1, offset - self.line_starts[index]


def _top_level_body(source: str, text: _SourceText) -> list[ast.stmt]:
    try:
        return parse_python(source).body
    except SyntaxError as error:
        # A method copied out of its class is indented: parse it inside a block, which
        # shifts line numbers by one and leaves columns alone.
        if not _starts_indented(source):
            raise
        try:
            wrapper = parse_python(_INDENT_WRAPPER + source).body[0]
        except SyntaxError:
            raise error from None
        text.line_shift = 1
        return cast(ast.If, wrapper).body


def _starts_indented(source: str) -> bool:
    for line in _NEWLINE.split(source):
        stripped = line.lstrip(" \t\f")
        if stripped and not stripped.startswith("#"):
            return stripped != line
    return False


# --------------------------------------------------------------------------- operators

_ARITH: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Mult,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitOr,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
# `/` also becomes `//` (a second mutant), as mutmut and mutpy do.
_ARITH_EXTRA: dict[type[ast.operator], type[ast.operator]] = {ast.Div: ast.FloorDiv}

_ARITH_SYMBOL: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
}
# Binding strength; a swap between levels needs parentheses around the new node.
_ARITH_PRECEDENCE: dict[type[ast.operator], int] = {
    ast.BitOr: 1,
    ast.BitXor: 2,
    ast.BitAnd: 3,
    ast.LShift: 4,
    ast.RShift: 4,
    ast.Add: 5,
    ast.Sub: 5,
    ast.Mult: 6,
    ast.Div: 6,
    ast.FloorDiv: 6,
    ast.Mod: 6,
    ast.Pow: 7,
}

_COMPARE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_COMPARE_SYMBOL: dict[type[ast.cmpop], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}

_UNARY_SYMBOL: dict[type[ast.unaryop], str] = {
    ast.USub: "-",
    ast.UAdd: "+",
    ast.Invert: "~",
    ast.Not: "not",
}

# Between two operands: closing parentheses, whitespace, line continuations, comments.
_GAP = re.compile(r"(?:[\s)\\]|#[^\r\n]*)*")
_WORD_GAP = r"(?:[\s\\]|#[^\r\n]*)+"
_AFTER_UNARY = re.compile(r"(?:[ \t\f\r\n]|\\\r?\n)*")


def _token_pattern(symbol: str) -> re.Pattern[str]:
    if symbol[0].isalpha():
        return re.compile(_WORD_GAP.join(symbol.split()) + r"\b")
    return re.compile(re.escape(symbol) + r"(?![=*/<>])")


_TOKEN_PATTERNS: dict[str, re.Pattern[str]] = {
    symbol: _token_pattern(symbol) for symbol in [*_ARITH_SYMBOL.values(), *_COMPARE_SYMBOL.values(), "and", "or"]
}
_AUG_PATTERNS: dict[str, re.Pattern[str]] = {
    symbol: re.compile(re.escape(symbol + "=")) for symbol in _ARITH_SYMBOL.values()
}


@dataclass(frozen=True)
class _Edit:
    operator: str
    start: int
    end: int
    replacement: str


class _MutationFinder(ast.NodeVisitor):
    """Collects the edits of every operator; the visit methods decide what is mutable."""

    def __init__(self, text: _SourceText, operators: frozenset[str], lines: frozenset[int] | None) -> None:
        self.text = text
        self.operators = operators
        self.lines = lines
        self.edits: list[_Edit] = []

    # ---- recording

    def _wanted(self, operator: str, node: ast.AST) -> bool:
        if operator not in self.operators:
            return False
        line: int = node.lineno - self.text.line_shift  # type: ignore[attr-defined]
        return self.lines is None or line in self.lines

    def _add(self, operator: str, node: ast.AST, replacement: str) -> None:
        start, end = self.text.span(node)
        self.edits.append(_Edit(operator, start, end, replacement))

    def _add_expression(self, operator: str, node: ast.expr, replacement: str | None, expected: ast.expr) -> bool:
        """Record an expression edit only if it parses to exactly the intended node."""
        if replacement is None:
            return False
        try:
            parsed = parse_python(f"({replacement})", mode="eval").body
        except SyntaxError:
            return False
        if ast.dump(parsed) == ast.dump(expected) != ast.dump(node):
            self._add(operator, node, replacement)
            return True
        return False

    def _replace_token(self, node: ast.AST, gap: tuple[int, int], pattern: re.Pattern[str], new: str) -> str | None:
        """The node's text with the operator token found in ``gap`` replaced by ``new``."""
        source = self.text.source
        start, end = self.text.span(node)
        position = _GAP.match(source, gap[0], gap[1]).end()  # type: ignore[union-attr]
        token = pattern.match(source, position, gap[1])
        if token is None:
            return None
        return source[start : token.start()] + new + source[token.end() : end]

    def _gap(self, before: ast.AST, after: ast.AST) -> tuple[int, int]:
        return self.text.span(before)[1], self.text.span(after)[0]

    # ---- things never mutated

    def _skip(self, node: ast.AST) -> None:
        pass

    visit_JoinedStr = _skip
    visit_arguments = _skip
    visit_Import = _skip
    visit_ImportFrom = _skip
    visit_TypeAlias = _skip

    def _visit_body(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.visit(statement)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._visit_body(node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._visit_body(node.body)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.body)

    def visit_match_case(self, node: ast.match_case) -> None:
        if node.guard is not None:
            self.visit(node.guard)
        self._visit_body(node.body)

    # ---- statements

    def _remove(self, node: ast.stmt) -> None:
        if self._wanted("remove_stmt", node):
            self._add("remove_stmt", node, "pass")

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            return  # a docstring or other no-op literal
        self._remove(node)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._remove(node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            return
        self._remove(node)
        self.visit(node.target)
        self.visit(node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._remove(node)
        new = _ARITH.get(type(node.op))
        if new is not None and self._wanted("augassign", node):
            pattern = _AUG_PATTERNS[_ARITH_SYMBOL[type(node.op)]]
            gap = self._gap(node.target, node.value)
            replacement = self._replace_token(node, gap, pattern, _ARITH_SYMBOL[new] + "=")
            if replacement is not None:
                self._add("augassign", node, replacement)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        value = node.value
        is_none = isinstance(value, ast.Constant) and value.value is None
        if value is not None and not is_none and self._wanted("return_value", node):
            self._add("return_value", node, "return None")
        self.generic_visit(node)

    def visit_Break(self, node: ast.Break) -> None:
        if self._wanted("break_continue", node):
            self._add("break_continue", node, "continue")

    def visit_Continue(self, node: ast.Continue) -> None:
        if self._wanted("break_continue", node):
            self._add("break_continue", node, "break")

    def _negate(self, test: ast.expr) -> None:
        if self._wanted("negate_cond", test):
            expected = ast.UnaryOp(op=ast.Not(), operand=test)
            self._add_expression("negate_cond", test, f"not ({self.text.segment(test)})", expected)

    def visit_If(self, node: ast.If | ast.While | ast.IfExp) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    visit_While = visit_If
    visit_IfExp = visit_If

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for condition in node.ifs:
            self._negate(condition)
        self.generic_visit(node)

    # ---- expressions

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if self._wanted("arith", node) and not _adds_zero(node):
            for table in (_ARITH, _ARITH_EXTRA):
                new = table.get(type(node.op))
                if new is not None:
                    self._mutate_binop(node, new)
        self.generic_visit(node)

    def _mutate_binop(self, node: ast.BinOp, new: type[ast.operator]) -> None:
        old = type(node.op)
        pattern = _TOKEN_PATTERNS[_ARITH_SYMBOL[old]]
        gap = self._gap(node.left, node.right)
        replacement = self._replace_token(node, gap, pattern, _ARITH_SYMBOL[new])
        if replacement is not None and _ARITH_PRECEDENCE[old] != _ARITH_PRECEDENCE[new]:
            replacement = f"({replacement})"
        expected = ast.BinOp(left=node.left, op=new(), right=node.right)
        self._add_expression("arith", node, replacement, expected)

    def visit_Compare(self, node: ast.Compare) -> None:
        if self._wanted("compare", node):
            operands = [node.left, *node.comparators]
            for index, op in enumerate(node.ops):
                new = _COMPARE[type(op)]
                pattern = _TOKEN_PATTERNS[_COMPARE_SYMBOL[type(op)]]
                gap = self._gap(operands[index], operands[index + 1])
                replacement = self._replace_token(node, gap, pattern, _COMPARE_SYMBOL[new])
                ops = [*node.ops[:index], new(), *node.ops[index + 1 :]]
                expected = ast.Compare(left=node.left, ops=ops, comparators=node.comparators)
                self._add_expression("compare", node, replacement, expected)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        if self._wanted("boolop", node):
            self._add_expression("boolop", node, self._swap_boolop(node), _flipped_boolop(node))
        self.generic_visit(node)

    def _swap_boolop(self, node: ast.BoolOp) -> str | None:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        source, pattern = self.text.source, _TOKEN_PATTERNS[old]
        start, end = self.text.span(node)
        pieces, cursor = [], start
        for before, after in itertools.pairwise(node.values):
            gap = self._gap(before, after)
            position = _GAP.match(source, gap[0], gap[1]).end()  # type: ignore[union-attr]
            token = pattern.match(source, position, gap[1])
            if token is None:
                return None
            pieces += [source[cursor : token.start()], new]
            cursor = token.end()
        return "".join(pieces) + source[cursor:end]

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        operand = node.operand
        zero = isinstance(operand, ast.Constant) and operand.value == 0
        if self._wanted("unary", node) and not zero:
            start, end = self.text.span(node)
            symbol = _UNARY_SYMBOL[type(node.op)]
            source = self.text.source
            if source.startswith(symbol, start):
                rest = _AFTER_UNARY.match(source, start + len(symbol), end).end()  # type: ignore[union-attr]
                self._add_expression("unary", node, source[rest:end], operand)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not self._wanted("constant", node):
            return
        new = _mutated_constant(node.value)
        if new is None:
            return
        if isinstance(new, (str, bytes)):
            # Markers inside the literal's own quotes keep its prefix, escapes and lines.
            expected = ast.Constant(value=new, kind=node.kind)
            for marked in _marked_literals(self.text.segment(node), empty=not node.value):
                if self._add_expression("constant", node, marked, expected):
                    return
        self._add_expression("constant", node, repr(new), ast.Constant(value=new))


_STRING_OPENING = re.compile(r"[A-Za-z]*('{3}|\"{3}|'|\")")


def _marked_literals(literal: str, *, empty: bool) -> list[str]:
    """``XX`` put after the opening quote and before the closing one, for each guess of
    the closing quote's length (the caller keeps the first guess that parses right)."""
    opening = _STRING_OPENING.match(literal)
    if opening is None:
        return []
    head = opening.end()
    if empty:
        return [f"{literal[:head]}XX{literal[head:]}"]
    tails = [len(literal) - n for n in (3, 1) if len(literal) - n >= head]
    return [f"{literal[:head]}XX{literal[head:tail]}XX{literal[tail:]}" for tail in tails]


def _mutated_constant(value: object) -> str | bytes | int | float | None:
    """The mutated literal value, or None when the constant is left alone."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.0 if math.isfinite(value) else None
    if isinstance(value, str):
        return f"XX{value}XX" if value else "XX"
    if isinstance(value, bytes):
        return b"XX" + value + b"XX" if value else b"XX"
    return None


def _flipped_boolop(node: ast.BoolOp) -> ast.BoolOp:
    new = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    return ast.BoolOp(op=new, values=node.values)


def _adds_zero(node: ast.BinOp) -> bool:
    """``x + 0`` and ``x - 0``: swapping the operator gives an equivalent mutant."""
    right = node.right
    return (
        isinstance(node.op, (ast.Add, ast.Sub))
        and isinstance(right, ast.Constant)
        and not isinstance(right.value, bool)
        and right.value == 0
    )


def _to_mutants(edits: list[_Edit], text: _SourceText) -> list[Mutant]:
    source = text.source
    # Two edits give the same text only if they change the length equally and the text
    # first differs at the same place: full texts are built only on such a clash, which
    # keeps a large module linear instead of quadratic.
    clashes: dict[tuple[int, int], list[_Edit]] = {}
    mutants = []
    for edit in edits:
        key = (len(edit.replacement) - (edit.end - edit.start), _first_difference(source, edit))
        earlier = clashes.setdefault(key, [])
        if earlier:
            mutated = _apply(source, edit)
            if any(_apply(source, other) == mutated for other in earlier):
                continue
        earlier.append(edit)
        line, col = text.position(edit.start)
        end_line, end_col = text.position(edit.end)
        mutants.append(
            Mutant(
                edit.operator,
                line,
                col,
                end_line,
                end_col,
                source[edit.start : edit.end],
                edit.replacement,
                source,
                edit.start,
            )
        )
    return mutants


def _apply(source: str, edit: _Edit) -> str:
    return source[: edit.start] + edit.replacement + source[edit.end :]


def _first_difference(source: str, edit: _Edit) -> int:
    """Offset of the first character where the edited text differs from ``source``."""
    replaced = source[edit.start : edit.start + len(edit.replacement)]
    same = _shared_prefix(edit.replacement, replaced)
    if same < len(edit.replacement):
        return edit.start + same
    # The replacement is a prefix of what it replaces (or equal to it): the rest of the
    # edited text is source[edit.end:], compared with source after the replacement.
    return edit.start + same + _common_prefix_length(source, edit.end, edit.start + same)


def _common_prefix_length(text: str, first: int, second: int) -> int:
    """Length of the common prefix of ``text[first:]`` and ``text[second:]``."""
    length, step = 0, 64
    while True:
        a = text[first + length : first + length + step]
        b = text[second + length : second + length + step]
        if a != b or not a:
            return length + _shared_prefix(a, b)
        length += len(a)
        step *= 2


def _shared_prefix(a: str, b: str) -> int:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))
