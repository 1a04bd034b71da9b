"""Facts about test files and the assertion remover (text only)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from gym_repost.analysis.pytest_files import (
    count_assertions,
    count_tests,
    disarm_tests,
    guarded_imports,
    remove_assertions,
)

SOURCE = textwrap.dedent("""\
    import unittest

    import pytest

    from pkg import f


    def test_plain():
        x = f(2)
        assert x == 4, "doubles"
        assert f(0) == 0


    class TestCase(unittest.TestCase):
        def test_method(self):
            self.assertEqual(f(1), 2)
            self.assertTrue(f(3), msg="odd")
            with self.assertRaises(TypeError):
                f(None)


    def test_raises():
        with pytest.raises(ValueError):
            f(-1)
    """)


def test_counts() -> None:
    assert count_tests(SOURCE) == 3
    assert count_assertions(SOURCE) == 4
    assert count_tests("def test_x(:\n") == 0 and count_assertions("def (") == 0


def test_remove_assertions_keeps_the_code_and_drops_the_checks() -> None:
    stripped = remove_assertions(SOURCE)
    tree = ast.parse(stripped)
    assert count_assertions(stripped) == 0 and count_tests(stripped) == 3
    assert not any(isinstance(n, ast.Assert) for n in ast.walk(tree))
    assert "x == 4" in stripped and "(f(1), 2)" in stripped and "(f(3), 'odd')" in stripped
    assert "self.assertRaises(TypeError)" in stripped and "pytest.raises(ValueError)" in stripped
    namespace: dict[str, object] = {}
    exec(compile(stripped.replace("from pkg import f", "f = lambda x: -1"), "t.py", "exec"), namespace)
    namespace["test_plain"]()  # type: ignore[operator]  # nothing is checked any more


def test_remove_assertions_of_a_file_that_does_not_parse() -> None:
    with pytest.raises(SyntaxError):
        remove_assertions("def test_x(:\n")


def test_disarmed_tests_cannot_fail() -> None:
    disarmed = disarm_tests(SOURCE)
    assert count_assertions(disarmed) == 0 and count_tests(disarmed) == 3
    namespace: dict[str, object] = {}
    exec(compile(disarmed.replace("from pkg import f", "def f(x):\n    raise KeyError(x)"), "t.py", "exec"), namespace)
    for name in ("test_plain", "test_raises"):
        namespace[name]()  # type: ignore[operator]  # f raises, nothing escapes
    tree = ast.parse(disarmed)
    wrapped = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
    assert all(len(n.body) == 1 and isinstance(n.body[0], ast.Try) for n in wrapped)


def test_guarded_imports_name_the_modules_of_their_try() -> None:
    """mccabe's test module: the names a ``try: ... except ImportError`` imports map to all
    that ``try``'s modules (the first to fail stops the rest); other ``try`` blocks, relative
    imports and star imports name nothing."""
    tree = ast.parse(
        textwrap.dedent("""\
            try:
                from StringIO import StringIO
            except ImportError:
                from io import StringIO
            try:
                import hypothesmith
                from hypothesis import HealthCheck, given, settings, strategies as st
            except ImportError:
                hypothesmith = None
            try:
                import numpy.linalg as la
                from . import helpers
                from yaml import *
            except (ValueError, ModuleNotFoundError):
                pass
            try:
                import simplejson as json
            except OSError:
                pass
            """)
    )
    found = guarded_imports(tree)
    assert found["settings"] == found["st"] == found["hypothesmith"] == ["hypothesis", "hypothesmith"]
    assert found["StringIO"] == ["StringIO"]
    assert found["la"] == ["numpy", "yaml"] and found["helpers"] == ["numpy", "yaml"]
    assert "*" not in found and "json" not in found
