"""Source text as the analysers edit it: character offsets of AST positions, and edits.

A :class:`SourceText` maps ``ast`` positions (lines and UTF-8 byte columns) to character
offsets of one source string; an :class:`Edit` replaces one span of it. Mutants and
decoys are both made of edits.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

from gym_repost.analysis.parsing import parse_python

# Python's own line breaks; str.splitlines would also break on \f, \x1c, \u2028...
_NEWLINE = re.compile(r"\r\n|\r|\n")
_INDENT_WRAPPER = "if True:\n"


class SourceText:
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


def top_level_body(source: str, text: SourceText) -> list[ast.stmt]:
    try:
        return parse_python(source).body
    except SyntaxError as error:
        # A method copied out of its class is indented: parse it inside a block, which
        # shifts line numbers by one and leaves columns alone.
        if not starts_indented(source):
            raise
        try:
            wrapper = parse_python(_INDENT_WRAPPER + source).body[0]
        except SyntaxError:
            raise error from None
        text.line_shift = 1
        return cast(ast.If, wrapper).body


def starts_indented(source: str) -> bool:
    for line in _NEWLINE.split(source):
        stripped = line.lstrip(" \t\f")
        if stripped and not stripped.startswith("#"):
            return stripped != line
    return False


@dataclass(frozen=True)
class Edit:
    """Replace ``source[start:end]`` with ``replacement``; ``kind`` names what made it."""

    kind: str
    start: int
    end: int
    replacement: str

    def clear_of(self, start: int, end: int) -> bool:
        """This edit and the span ``[start, end)`` touch different text."""
        return (
            self.end <= start or self.start >= end
            if self.start < self.end
            else self.start <= start or self.start >= end
        )


def apply_edits(source: str, edits: Iterable[Edit]) -> str:
    """``source`` with non-overlapping ``edits`` applied."""
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        source = source[: edit.start] + edit.replacement + source[edit.end :]
    return source
