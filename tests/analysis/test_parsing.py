"""parse_python: ast.parse behind a lock, for the pipeline's worker threads."""

from __future__ import annotations

import ast
import inspect
import typing
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gym_repost.analysis.parsing import literal_eval, parse_python


def test_same_tree_and_errors_as_ast_parse() -> None:
    source = "def f(x):\n    return [y for y in x if y]\n"
    assert ast.dump(parse_python(source)) == ast.dump(ast.parse(source))
    assert ast.dump(parse_python("x + 1", mode="eval")) == ast.dump(ast.parse("x + 1", mode="eval"))
    with pytest.raises(SyntaxError) as info:
        parse_python("def f(:\n", filename="broken.py")
    assert info.value.filename == "broken.py"


def test_parses_from_many_threads_at_once() -> None:
    source = inspect.getsource(typing)
    expected = ast.dump(ast.parse(source))
    with ThreadPoolExecutor(4) as pool:
        dumps = list(pool.map(lambda _: ast.dump(parse_python(source)), range(16)))
    assert dumps == [expected] * 16


def test_literal_eval_parses_behind_the_same_lock() -> None:
    assert literal_eval("  {'a': (1, 2.5, None)}") == {"a": (1, 2.5, None)}
    with pytest.raises(ValueError):
        literal_eval("f(1)")
    with pytest.raises(SyntaxError):
        literal_eval("(1,")


SANDBOX_SIDE = {"programs", "construct/testgen/mutate.py", "construct/testgen/pools.py"}
SANDBOX_SIDE |= {"construct/testgen/selection.py", "construct/testgen/strategies.py"}


def test_host_code_parses_only_through_the_lock() -> None:
    """``ast.parse`` and a string's ``ast.literal_eval`` outside :mod:`gym_repost.analysis.parsing`
    race with the pipeline's other threads (python/cpython#106905); the modules that run
    inside the sandbox (single-threaded, and they must not import gym_repost) are exempt."""
    package = Path(__file__).resolve().parents[2] / "gym_repost"
    found = []
    for path in package.rglob("*.py"):
        relative = path.relative_to(package).as_posix()
        if relative == "analysis/parsing.py" or any(relative.startswith(s) for s in SANDBOX_SIDE):
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{relative}: {call}" for call in ("ast.parse(", "ast.literal_eval(") if call in text]
    assert found == []
