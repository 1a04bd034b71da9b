"""The mutation operators: which nodes of a source are mutable, and the edit of each.

:class:`MutationFinder` visits a parsed source and collects one :class:`Edit` per
mutation (``kind`` is the operator's name); :func:`gym_repost.analysis.mutation.generate_mutants`
turns them into mutants.
"""

from __future__ import annotations

import ast
import itertools
import math
import re

from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source_text import Edit, SourceText

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


class MutationFinder(ast.NodeVisitor):
    """Collects the edits of every operator; the visit methods decide what is mutable."""

    def __init__(self, text: SourceText, operators: frozenset[str], lines: frozenset[int] | None) -> None:
        self.text = text
        self.operators = operators
        self.lines = lines
        self.edits: list[Edit] = []
        self.first_parameter: list[str | None] = []
        """Per function being visited (outermost first): its first parameter after ``self``
        or ``cls`` (``identity_return``)."""

    # ---- recording

    def _wanted(self, operator: str, node: ast.AST) -> bool:
        if operator not in self.operators:
            return False
        line: int = node.lineno - self.text.line_shift  # type: ignore[attr-defined]
        return self.lines is None or line in self.lines

    def _add(self, operator: str, node: ast.AST, replacement: str) -> None:
        start, end = self.text.span(node)
        self.edits.append(Edit(operator, start, end, replacement))

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
        names = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
        if names and names[0] in ("self", "cls"):
            names = names[1:]
        self.first_parameter.append(names[0] if names else None)
        self._visit_body(node.body)
        self.first_parameter.pop()

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
        first = self.first_parameter[-1] if self.first_parameter else None
        if first is not None and self._wanted("identity_return", node):
            if not (isinstance(value, ast.Name) and value.id == first):
                self._add("identity_return", node, f"return {first}")
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
        if isinstance(node, ast.If) and self._wanted("drop_branch", node):
            self._drop_block(node.body)
            if node.orelse and not self._is_elif(node.orelse):
                self._drop_block(node.orelse)
        self.generic_visit(node)

    visit_While = visit_If
    visit_IfExp = visit_If

    def _drop_block(self, statements: list[ast.stmt]) -> None:
        """The block's statements -> ``pass`` (unless it is ``pass`` already)."""
        if len(statements) == 1 and isinstance(statements[0], ast.Pass):
            return
        start, _ = self.text.span(statements[0])
        _, end = self.text.span(statements[-1])
        self.edits.append(Edit("drop_branch", start, end, "pass"))

    def _is_elif(self, orelse: list[ast.stmt]) -> bool:
        if len(orelse) != 1 or not isinstance(orelse[0], ast.If):
            return False
        start, _ = self.text.span(orelse[0])
        return self.text.source.startswith("elif", start)

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
        value = node.value
        if isinstance(value, (str, bytes)) and value and self._wanted("empty_string", node):
            prefix = _STRING_OPENING.match(self.text.segment(node))
            if prefix is not None:
                empty = type(value)()
                self._add_expression("empty_string", node, f"{prefix.group(0)}{prefix.group(1)}", ast.Constant(empty))
        if type(value) is int and self._wanted("off_by_one", node):
            self._add_expression("off_by_one", node, repr(value - 1), ast.Constant(value=value - 1))
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
