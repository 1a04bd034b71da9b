"""parse_python: ast.parse behind a lock, for the pipeline's worker threads."""

from __future__ import annotations

import ast
import inspect
import typing
from concurrent.futures import ThreadPoolExecutor

import pytest

from gym_repost.analysis.parsing import parse_python


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
