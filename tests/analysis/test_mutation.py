"""Tests of the AST mutator and the mutation score."""

from __future__ import annotations

import ast
import sysconfig
import textwrap
from pathlib import Path

import pytest

from gym_repost.analysis.mutation import (
    OPERATORS,
    Mutant,
    count_by_operator,
    generate_mutants,
    mutation_score,
    sample_mutants,
)
from gym_repost.errors import ConfigError


def replacements(source: str, operator: str) -> list[tuple[str, str]]:
    """(original, replacement) pairs of one operator's mutants of ``source``."""
    return [(m.original, m.replacement) for m in generate_mutants(source, operators=[operator])]


def assert_well_formed(source: str, mutants: list[Mutant]) -> None:
    """Every mutant compiles, differs from the original AST, is unique and self-consistent."""
    original = ast.dump(ast.parse(source))
    lines = source.splitlines()
    seen = set()
    for mutant in mutants:
        assert ast.dump(ast.parse(mutant.source)) != original, mutant
        compile(mutant.source, "<mutant>", "exec")
        assert mutant.source not in seen
        seen.add(mutant.source)
        assert source[mutant.offset : mutant.offset + len(mutant.original)] == mutant.original
        assert lines[mutant.line - 1][mutant.col :].startswith(mutant.original.splitlines()[0])
        assert mutant.source == (
            source[: mutant.offset] + mutant.replacement + source[mutant.offset + len(mutant.original) :]
        )


# --------------------------------------------------------------------------- each operator


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("y = a + b\n", ["a - b"]),
        ("y = a - b\n", ["a + b"]),
        ("y = a * b\n", ["a / b"]),
        ("y = a / b\n", ["a * b", "a // b"]),
        ("y = a // b\n", ["a / b"]),
        ("y = a % b\n", ["a * b"]),
        ("y = a ** b\n", ["(a * b)"]),  # `**` binds tighter: keep the new node whole
        ("y = a ** b ** c\n", ["(a * b ** c)", "(b * c)"]),
        ("y = a & b\n", ["(a | b)"]),
        ("y = a | b\n", ["(a & b)"]),
        ("y = a ^ b\n", ["(a | b)"]),
        ("y = a << b\n", ["a >> b"]),
        ("y = a >> b\n", ["a << b"]),
        ("y = (a) + (b)\n", ["(a) - (b)"]),
        ("y = a + 0\n", []),  # equivalent: x + 0 == x - 0
    ],
)
def test_arith(source: str, expected: list[str]) -> None:
    assert [r for _, r in replacements(source, "arith")] == expected


def test_arith_keeps_comments_and_line_breaks_inside_the_node() -> None:
    source = "y = (a  # first\n     + b)\n"
    (mutant,) = generate_mutants(source, operators=["arith"])
    assert mutant.source == "y = (a  # first\n     - b)\n"
    assert (mutant.line, mutant.col, mutant.end_line, mutant.end_col) == (1, 5, 2, 8)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("y = a < b\n", ["a <= b"]),
        ("y = a <= b\n", ["a < b"]),
        ("y = a > b\n", ["a >= b"]),
        ("y = a >= b\n", ["a > b"]),
        ("y = a == b\n", ["a != b"]),
        ("y = a != b\n", ["a == b"]),
        ("y = a is b\n", ["a is not b"]),
        ("y = a is not None\n", ["a is None"]),
        ("y = a is  not b\n", ["a is b"]),
        ("y = a in b\n", ["a not in b"]),
        ("y = a not in b\n", ["a in b"]),
        ("y = a in(b)\n", ["a not in(b)"]),
        ("y = a < b <= c\n", ["a <= b <= c", "a < b < c"]),
    ],
)
def test_compare(source: str, expected: list[str]) -> None:
    assert [r for _, r in replacements(source, "compare")] == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("y = a and b\n", [("a and b", "a or b")]),
        ("y = a or b or c\n", [("a or b or c", "a and b and c")]),
        ("y = a and (b or c)\n", [("a and (b or c)", "a or (b or c)"), ("b or c", "b and c")]),
    ],
)
def test_boolop(source: str, expected: list[tuple[str, str]]) -> None:
    assert replacements(source, "boolop") == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("y = -x\n", [("-x", "x")]),
        ("y = +x\n", [("+x", "x")]),
        ("y = ~x\n", [("~x", "x")]),
        ("y = not x\n", [("not x", "x")]),
        ("y = not(x)\n", [("not(x)", "(x)")]),
        ("y = -(a + b)\n", [("-(a + b)", "(a + b)")]),
        ("y = -0\n", []),  # equivalent
    ],
)
def test_unary(source: str, expected: list[tuple[str, str]]) -> None:
    assert replacements(source, "unary") == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("y = 1\n", [("1", "2")]),
        ("y = 0\n", [("0", "1")]),
        ("y = 1_000\n", [("1_000", "1001")]),
        ("y = 0x10\n", [("0x10", "17")]),
        ("y = 1.5\n", [("1.5", "2.5")]),
        ("y = True\n", [("True", "False")]),
        ("y = False\n", [("False", "True")]),
        ("y = 'ab'\n", [("'ab'", "'XXabXX'")]),
        ('y = ""\n', [('""', '"XX"')]),
        ('y = b"x"\n', [('b"x"', 'b"XXxXX"')]),
        ('y = u"x"\n', [('u"x"', 'u"XXxXX"')]),
        ('y = r"\\d"\n', [('r"\\d"', 'r"XX\\dXX"')]),
        ("y = '''a\nb'''\n", [("'''a\nb'''", "'''XXa\nbXX'''")]),  # keeps the line count
        ("y = ''''''\n", [("''''''", "'''XX'''")]),
        ('y = ("a"\n     "b")\n', [('"a"\n     "b"', '"XXa"\n     "bXX"')]),
        ("y = None\n", []),
        ("y = ...\n", []),
        ("y = 2j\n", []),
        ("y = 1e400\n", []),  # infinite: no literal for inf + 1
        ("y = 1e20\n", []),  # 1e20 + 1 == 1e20: the mutant would be a no-op
        ("y = -1\n", [("1", "2")]),
    ],
)
def test_constant(source: str, expected: list[tuple[str, str]]) -> None:
    assert replacements(source, "constant") == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x += 1\n", ["x -= 1"]),
        ("x -= 1\n", ["x += 1"]),
        ("x *= 2\n", ["x /= 2"]),
        ("x /= 2\n", ["x *= 2"]),
        ("x //= 2\n", ["x /= 2"]),
        ("x %= 2\n", ["x *= 2"]),
        ("x **= 2\n", ["x *= 2"]),
        ("x |= y\n", ["x &= y"]),
        ("x <<= y\n", ["x >>= y"]),
        ("x[i] += 1\n", ["x[i] -= 1"]),
        ("x @= y\n", []),
    ],
)
def test_augassign(source: str, expected: list[str]) -> None:
    assert [r for _, r in replacements(source, "augassign")] == expected


def test_negate_cond() -> None:
    source = textwrap.dedent(
        """\
        if x > 0:
            pass
        elif y:
            pass
        while z:
            pass
        v = a if c else b
        w = [i for i in xs if i % 2]
        if (m := f()):
            pass
        """
    )
    assert replacements(source, "negate_cond") == [
        ("x > 0", "not (x > 0)"),
        ("y", "not (y)"),
        ("z", "not (z)"),
        ("c", "not (c)"),
        ("i % 2", "not (i % 2)"),
        ("m := f()", "not (m := f())"),
    ]


def test_return_value() -> None:
    source = textwrap.dedent(
        """\
        def f(x):
            if x:
                return x + 1
            if x is None:
                return None
            if not x:
                return
            return 0
        """
    )
    assert replacements(source, "return_value") == [
        ("return x + 1", "return None"),
        ("return 0", "return None"),
    ]
    # A literal return value also gets its changed literal, from `constant`.
    assert ("0", "1") in replacements(source, "constant")


def test_remove_stmt_replaces_with_pass_and_keeps_blocks_non_empty() -> None:
    source = textwrap.dedent(
        """\
        class C:
            x: int
            y: int = 0

        def f(a):
            '''Docstring.'''
            a = 1
            a += 2
            g(a)
            ...
            pass
            if a:
                h()
            return a
        """
    )
    assert replacements(source, "remove_stmt") == [
        ("y: int = 0", "pass"),
        ("a = 1", "pass"),
        ("a += 2", "pass"),
        ("g(a)", "pass"),
        ("h()", "pass"),
    ]
    only_statement = [m for m in generate_mutants(source, operators=["remove_stmt"])][-1]
    assert "    if a:\n        pass\n" in only_statement.source
    assert_well_formed(source, generate_mutants(source))


def test_break_continue() -> None:
    source = "for i in x:\n    if i:\n        break\n    continue\n"
    assert replacements(source, "break_continue") == [
        ("break", "continue"),
        ("continue", "break"),
    ]


# --------------------------------------------------------------------------- positions


def test_columns_are_characters_not_utf8_bytes() -> None:
    source = 'def f(n):\n    s = "é日🙂" * n + 1  # café\n    return s\n'
    mutants = generate_mutants(source)
    line = source.splitlines()[1]
    arith = [m for m in mutants if m.operator == "arith"]
    assert [(m.col, m.end_col, m.replacement) for m in arith] == [
        (8, 21, '"é日🙂" * n - 1'),
        (8, 17, '"é日🙂" / n'),
    ]
    assert arith[0].source == source.replace('"é日🙂" * n + 1', '"é日🙂" * n - 1')
    for mutant in mutants:
        if mutant.line == 2:
            assert line[mutant.col : mutant.end_col] == mutant.original
    assert_well_formed(source, mutants)


def test_non_ascii_on_a_multi_line_node() -> None:
    source = 'y = ("ü" +\n     "ß" + z)  # ω\n'
    mutants = generate_mutants(source, operators=["arith"])
    assert [(m.line, m.col, m.end_line, m.end_col) for m in mutants] == [
        (1, 5, 2, 12),
        (1, 5, 2, 8),
    ]
    assert mutants[0].source == 'y = ("ü" +\n     "ß" - z)  # ω\n'


def test_crlf_line_endings_are_kept() -> None:
    source = "def f(a):\r\n    b = a + 1\r\n    return b\r\n"
    mutants = generate_mutants(source)
    assert all(m.source.count("\r\n") == 3 for m in mutants)
    arith = next(m for m in mutants if m.operator == "arith")
    assert (arith.line, arith.col) == (2, 8)
    assert arith.source == "def f(a):\r\n    b = a - 1\r\n    return b\r\n"


def test_decorators_docstrings_annotations_defaults_and_fstrings_untouched() -> None:
    source = textwrap.dedent(
        '''\
        """Module docstring 1 + 2."""
        from __future__ import annotations

        @decorator(1 + 2, flag=True)
        def f(a: int = 1, b: "str" = "x", *args: List[int], **kw: "int") -> Dict[str, int]:
            """Docstring with a < b."""
            y: Optional[int] = None
            z: Literal["a"]
            return f"{a + 1} and {b!r:>10}"


        class C(Base, metaclass=Meta, flag=True):
            """Class docstring."""
            attr: int = 3
        '''
    )
    got = [(m.line, m.operator, m.original, m.replacement) for m in generate_mutants(source)]
    assert got == [
        (7, "remove_stmt", "y: Optional[int] = None", "pass"),
        (9, "return_value", 'return f"{a + 1} and {b!r:>10}"', "return None"),
        (14, "remove_stmt", "attr: int = 3", "pass"),
        (14, "constant", "3", "4"),
    ]


def test_lines_restricts_to_nodes_starting_on_those_lines() -> None:
    source = textwrap.dedent(
        """\
        def first(a):
            return a + 1

        def second(b):
            if b > 2:
                return b * 3
            return -b
        """
    )
    tree = ast.parse(source)
    second = tree.body[1]
    target_lines = range(second.lineno, second.end_lineno + 1)  # type: ignore[operator]
    restricted = generate_mutants(source, lines=target_lines)
    everything = generate_mutants(source)
    assert restricted == [m for m in everything if m.line in target_lines]
    assert {m.line for m in restricted} == {5, 6, 7}
    assert generate_mutants(source, lines=[2], operators=["arith"])[0].replacement == "a - 1"
    assert generate_mutants(source, lines=[]) == []


def test_indented_method_source_is_accepted() -> None:
    source = "    @property\n    def total(self):\n        return self.a + self.b\n"
    mutants = generate_mutants(source)
    assert [(m.line, m.operator, m.replacement) for m in mutants] == [
        (3, "return_value", "return None"),
        (3, "arith", "self.a - self.b"),
    ]
    assert mutants[1].source == source.replace("self.a + self.b", "self.a - self.b")


def test_operator_filter_and_unknown_operator() -> None:
    source = "def f(a):\n    return a + 1 < 2\n"
    assert {m.operator for m in generate_mutants(source, operators=["compare"])} == {"compare"}
    with pytest.raises(ConfigError, match="unknown mutation operator"):
        generate_mutants(source, operators=["arith", "nonsense"])


def test_syntax_error_is_raised() -> None:
    with pytest.raises(SyntaxError):
        generate_mutants("def f(:\n    pass\n")


# --------------------------------------------------------------------------- realistic code

PARSER = '''\
import re

_PAIR = re.compile(r"(\\w+)\\s*=\\s*(.*)")


def parse_config(text: str, *, strict: bool = False) -> dict[str, object]:
    """Parse ``key = value`` lines, with sections and comments."""
    result: dict[str, object] = {}
    section = ""
    skipped = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        match = _PAIR.match(line)
        if match is None:
            if strict:
                raise ValueError(f"line {number}: cannot parse {raw!r}")
            skipped += 1
            if skipped > len(result) // 2:
                break
            continue
        key, value = match.groups()
        if value.isdigit() or (value[:1] == "-" and value[1:].isdigit()):
            parsed: object = int(value)
        elif value.lower() in ("true", "false"):
            parsed = value.lower() == "true"
        else:
            parsed = value.strip("\\"'")
        name = f"{section}.{key}" if section else key
        result[name] = parsed
    return result
'''

METHOD = '''\
class Account:
    """A bank account with an overdraft limit."""

    fee = 0.5

    def withdraw(self, amount: float) -> float:
        if amount <= 0:
            raise ValueError("amount must be positive")
        available = self.balance + self.overdraft
        if amount > available:
            self.rejected += 1
            return 0.0
        self.balance -= amount + self.fee
        self.history.append(("withdraw", -amount))
        return self.balance
'''

RECURSIVE = """\
def merge_sort(items: list[int]) -> list[int]:
    if len(items) <= 1:
        return list(items)
    middle = len(items) // 2
    left, right = merge_sort(items[:middle]), merge_sort(items[middle:])
    merged, i, j = [], 0, 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            j += 1
    return merged + left[i:] + right[j:]
"""

ASYNC = """\
async def fetch_all(client, urls, *, retries=3, limit=None):
    results = {}
    async with client.session() as session:
        for url in urls[:limit]:
            for attempt in range(retries + 1):
                try:
                    response = await session.get(url, timeout=2 ** attempt)
                except TimeoutError:
                    if attempt == retries:
                        raise
                    continue
                if response.status != 200 and not response.cached:
                    results[url] = None
                else:
                    results[url] = await response.json()
                break
    return {k: v for k, v in results.items() if v is not None}
"""


@pytest.mark.parametrize("source", [PARSER, METHOD, RECURSIVE, ASYNC], ids=["parser", "method", "recursive", "async"])
def test_every_mutant_of_realistic_code_parses_and_differs(source: str) -> None:
    mutants = generate_mutants(source)
    assert len(mutants) > 15
    assert_well_formed(source, mutants)


def test_operator_counts_on_the_parser() -> None:
    counts = count_by_operator(generate_mutants(PARSER))
    assert list(counts) == list(OPERATORS)
    assert all(counts[name] > 0 for name in OPERATORS), counts


def test_method_mutants_touch_self_expressions() -> None:
    replaced = replacements(METHOD, "arith")
    assert ("self.balance + self.overdraft", "self.balance - self.overdraft") in replaced
    assert ("amount + self.fee", "amount - self.fee") in replaced
    assert ("self.balance -= amount + self.fee", "self.balance += amount + self.fee") in (
        replacements(METHOD, "augassign")
    )


def test_every_mutant_of_a_stdlib_module_parses_and_differs() -> None:
    path = Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py"
    source = path.read_text(encoding="utf-8")
    mutants = generate_mutants(source)
    assert len(mutants) > 200
    assert_well_formed(source, mutants)


def test_determinism() -> None:
    first = generate_mutants(PARSER)
    assert first == generate_mutants(PARSER)
    positions = [(m.offset, -(m.offset + len(m.original))) for m in first]
    assert positions == sorted(positions)


# --------------------------------------------------------------------------- diff


def test_diff() -> None:
    source = "def f(a, b):\n    return a + b\n"
    mutant = generate_mutants(source, operators=["arith"])[0]
    assert mutant.diff("pkg/mod.py") == (
        "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1,2 @@\n def f(a, b):\n-    return a + b\n+    return a - b\n"
    )


def test_diff_without_final_newline() -> None:
    mutant = generate_mutants("x = 1", operators=["constant"])[0]
    assert mutant.diff() == (
        "--- a/target.py\n"
        "+++ b/target.py\n"
        "@@ -1 +1 @@\n"
        "-x = 1\n"
        "\\ No newline at end of file\n"
        "+x = 2\n"
        "\\ No newline at end of file\n"
    )


# --------------------------------------------------------------------------- sampling


def test_sample_mutants_is_seeded_stable_and_ordered() -> None:
    mutants = generate_mutants(PARSER)
    sample = sample_mutants(mutants, 10, seed=1)
    assert len(sample) == 10 and len(set(sample)) == 10
    assert sample == sample_mutants(mutants, 10, seed=1)
    assert sample != sample_mutants(mutants, 10, seed=2)
    assert sample == [m for m in mutants if m in sample]  # input order kept
    # A mutant that was not chosen can go without changing the choice.
    unchosen = next(m for m in mutants if m not in sample)
    assert sample_mutants([m for m in mutants if m != unchosen], 10, seed=1) == sample


def test_sample_mutants_edges() -> None:
    mutants = generate_mutants(RECURSIVE)
    assert sample_mutants(mutants, len(mutants) + 5, seed=0) == mutants
    assert sample_mutants(mutants, 0, seed=0) == []
    assert sample_mutants([], 3, seed=0) == []
    with pytest.raises(ValueError):
        sample_mutants(mutants, -1, seed=0)


# --------------------------------------------------------------------------- score


def test_mutation_score_8_of_10() -> None:
    score = mutation_score(killed=8, total=10)
    assert (score.score, score.killed, score.survived, score.timeouts) == (0.8, 8, 2, 0)
    # By hand, z = 1.96, p = 0.8, n = 10: denominator 1 + z²/n = 1.38416;
    # centre (p + z²/2n) / 1.38416 = 0.99208 / 1.38416 = 0.71674;
    # margin z * sqrt(p(1-p)/n + z²/4n²) / 1.38416 = 1.96 * 0.160012 / 1.38416 = 0.22658;
    # interval [0.4902, 0.9433].
    assert score.ci_low == pytest.approx(0.4902, abs=1e-4)
    assert score.ci_high == pytest.approx(0.9433, abs=1e-4)


def test_mutation_score_timeouts_count_as_killed_but_are_reported_apart() -> None:
    score = mutation_score(killed=6, total=10, timeouts=2)
    assert (score.score, score.killed, score.timeouts, score.survived) == (0.8, 6, 2, 2)
    assert score.ci_low == mutation_score(8, 10).ci_low


def test_mutation_score_extremes() -> None:
    none = mutation_score(0, 0)
    assert none.score is None and (none.ci_low, none.ci_high) == (0.0, 1.0)
    # p = 1: Wilson lower end is n / (n + z²) = 10 / 13.8416 = 0.72247.
    perfect = mutation_score(10, 10)
    assert perfect.score == 1.0 and perfect.ci_high == 1.0
    assert perfect.ci_low == pytest.approx(0.72247, abs=1e-4)
    nothing = mutation_score(0, 10)
    assert nothing.score == 0.0 and nothing.ci_low == 0.0
    assert nothing.ci_high == pytest.approx(1 - 0.72247, abs=1e-4)


@pytest.mark.parametrize(("killed", "total", "timeouts"), [(-1, 3, 0), (3, 2, 0), (2, 3, 2)])
def test_mutation_score_rejects_impossible_counts(killed: int, total: int, timeouts: int) -> None:
    with pytest.raises(ValueError):
        mutation_score(killed, total, timeouts)


def test_mutation_score_finite_population_narrows_the_interval() -> None:
    # 8 of 10 sampled from 30: correction sqrt((30 - 10) / 29) = 0.83045; the Wilson
    # ends 0.4902 and 0.9433 move towards 0.8 by that factor:
    # 0.8 - 0.3098 * 0.83045 = 0.54273 and 0.8 + 0.1433 * 0.83045 = 0.91900.
    score = mutation_score(killed=8, total=10, population=30)
    assert score.score == 0.8
    assert score.ci_low == pytest.approx(0.54273, abs=1e-4)
    assert score.ci_high == pytest.approx(0.91900, abs=1e-4)
    # Every mutant run: the score is exact.
    exact = mutation_score(killed=6, total=10, timeouts=1, population=10)
    assert (exact.ci_low, exact.ci_high) == (0.7, 0.7)
    # A huge population: the plain Wilson interval.
    assert mutation_score(8, 10, population=10**9).ci_low == pytest.approx(mutation_score(8, 10).ci_low)
    with pytest.raises(ValueError):
        mutation_score(8, 10, population=9)
