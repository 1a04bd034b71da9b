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

import difflib
import hashlib
import math
import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from gym_repost.analysis.mutation_operators import MutationFinder
from gym_repost.analysis.source_text import Edit, SourceText, top_level_body
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
"""Every mutation operator the builder and ``validate`` use, in the order used to report counts."""
AUDIT_OPERATORS: tuple[str, ...] = ("identity_return", "empty_string", "drop_branch", "off_by_one")
"""Operators only ``gym-repost audit`` uses, beyond :data:`OPERATORS` (a measure that used the
builder's own operators would flatter the builder):

* ``identity_return``: ``return x`` -> ``return <first parameter>`` (the input unchanged);
* ``empty_string``: a non-empty string or bytes literal -> an empty one;
* ``drop_branch``: an ``if``'s body, or its ``else`` block, -> ``pass``;
* ``off_by_one``: an integer ``n`` -> ``n - 1``."""

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
        operators: names from :data:`OPERATORS` (and :data:`AUDIT_OPERATORS`) to apply;
            None means all of :data:`OPERATORS`.
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
    text = SourceText(source)
    finder = MutationFinder(text, selected, None if lines is None else frozenset(lines))
    with warnings.catch_warnings():
        # Re-parsing snippets would repeat the source's own warnings (invalid escapes...).
        warnings.simplefilter("ignore")
        for statement in top_level_body(source, text):
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
    known = (*OPERATORS, *AUDIT_OPERATORS)
    unknown = sorted(set(operators) - set(known))
    if unknown:
        raise ConfigError(f"unknown mutation operator(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return frozenset(operators)


def _diff_lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def _to_mutants(edits: list[Edit], text: SourceText) -> list[Mutant]:
    source = text.source
    # Two edits give the same text only if they change the length equally and the text
    # first differs at the same place: full texts are built only on such a clash, which
    # keeps a large module linear instead of quadratic.
    clashes: dict[tuple[int, int], list[Edit]] = {}
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
                edit.kind,
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


def _apply(source: str, edit: Edit) -> str:
    return source[: edit.start] + edit.replacement + source[edit.end :]


def _first_difference(source: str, edit: Edit) -> int:
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
