"""Decoys (equivalent rewrites of a focal file) and disguised mutants: pure, no sandbox."""

from __future__ import annotations

import ast
import random
import sys
import textwrap
from typing import Any

import pytest
from testfile_tasks import FOCAL

from gym_repost.analysis.decoys import KINDS, disguise, generate_decoys
from gym_repost.analysis.mutation import generate_mutants
from gym_repost.harness.testfile import minimal_span, shuffled_variants

LOOPS = textwrap.dedent('''\
    """Several shapes of code."""
    from __future__ import annotations

    SCALE = 3


    def scaled(values, limit=10):
        """Scale the values below the limit."""
        out = []
        for v in values:
            if v < limit and v != 0:
                out.append(v * SCALE)
            elif v >= limit:
                out.append(limit)
        return out


    def pick(flag, a, b):
        return a if flag else b


    def evens(values):
        total = 0
        kept = [v for v in values if v % 2 == 0]
        while kept:
            total += kept.pop()
        assert total >= 0 or values
        return total


    def greet(name):
        message = f"hello {name}"
        return message.upper()
    ''')

CALLS: dict[str, list[tuple[Any, ...]]] = {
    "scaled": [([1, 0, 12, 5],), ([],), ([10, 9], 9)],
    "pick": [(True, 1, 2), (0, 1, 2), ([], "a", "b")],
    "evens": [([1, 2, 3, 4],), ([],), ([6],)],
    "greet": [("ada",)],
    "clamp": [(5,), (-1,), (11,)],
    "fib": [(0,), (10,)],
    "check": [(2,), (3,)],
    "total": [([1, 2, 3],), ([],)],
}


class _Hangs(Exception):
    """A call ran more lines than any of these fixtures needs (a mutant's endless loop)."""


def _limited(function: Any, args: tuple[Any, ...]) -> Any:
    steps = [0]

    def trace(frame: Any, event: str, arg: Any) -> Any:
        steps[0] += 1
        if steps[0] > 20_000:
            raise _Hangs()
        return trace

    sys.settrace(trace)
    try:
        return function(*args)
    finally:
        sys.settrace(None)


def _behaviour(source: str) -> dict[str, list[Any]]:
    scope: dict[str, Any] = {}
    exec(compile(source, "focal.py", "exec"), scope)
    out: dict[str, list[Any]] = {}
    for name, calls in CALLS.items():
        if name in scope:
            results = []
            for args in calls:
                try:
                    results.append(("ok", _limited(scope[name], args)))
                except Exception as exc:
                    results.append(("raised", type(exc).__name__))
            out[name] = results
    return out


@pytest.mark.parametrize("source", [FOCAL, LOOPS], ids=["tiny", "loops"])
@pytest.mark.parametrize("seed", range(8))
def test_decoys_change_the_code_and_keep_the_behaviour(source: str, seed: int) -> None:
    decoys = generate_decoys(source, generate_mutants(source), rng=random.Random(seed))
    assert decoys
    expected = _behaviour(source)
    for decoy in decoys:
        assert decoy.source != source
        assert ast.dump(ast.parse(decoy.source)) != ast.dump(ast.parse(source))
        assert set(decoy.kind.split("+")) <= set(KINDS)
        assert _behaviour(decoy.source) == expected, decoy.kind


def test_every_function_holding_mutants_gets_a_bytecode_changing_decoy() -> None:
    tree = ast.parse(LOOPS)
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    decoys = generate_decoys(LOOPS, generate_mutants(LOOPS), rng=random.Random(0))
    for name, function in functions.items():
        first = next(s.lineno for s in function.body if not isinstance(s, ast.Expr))
        mine = [d for d in decoys if d.line == first]
        assert any("noop_statement" in d.kind for d in mine), name


@pytest.mark.parametrize("seed", range(4))
def test_disguised_mutants_behave_like_the_mutant_and_read_like_none(seed: int) -> None:
    rng = random.Random(seed)
    mutants = generate_mutants(LOOPS)
    known = {m.source for m in mutants}
    disguised = 0
    for mutant in mutants:
        text = disguise(mutant, rng)
        assert _behaviour(text) == _behaviour(mutant.source), (mutant, text)
        disguised += text not in known
    assert disguised == len(mutants)


def test_variants_travel_as_one_span_each() -> None:
    variants, sources = shuffled_variants(generate_mutants(FOCAL), FOCAL, random.Random(1))
    assert len(variants) == len(sources) > len(generate_mutants(FOCAL))
    for text in sources:
        start, end, replacement = minimal_span(FOCAL, text)
        assert FOCAL[:start] + replacement + FOCAL[end:] == text


@pytest.mark.parametrize(
    ("original", "variant", "span"),
    [
        ("abc", "abc", (3, 3, "")),
        ("x < y", "x <= y", (3, 3, "=")),
        ("a = 1\n", "b = 1\n", (0, 1, "b")),
        ("aaa", "aa", (2, 3, "")),
    ],
)
def test_minimal_span(original: str, variant: str, span: tuple[int, int, str]) -> None:
    assert minimal_span(original, variant) == span
