"""Placing a candidate into the evaluation script (no sandbox needed)."""

from __future__ import annotations

import ast
import re

import pytest

from gym_repost.analysis.source import dedent_code, find_function, indent_code, rename_definition
from gym_repost.errors import CandidateError
from gym_repost.harness import assemble, do_nothing_candidate, extract_code_block, prepare_candidate
from gym_repost.task import FunctionTask


def test_the_candidate_takes_the_place_of_the_original(function_task: FunctionTask) -> None:
    code = "def score(values, cap=100):\n    return 0\n"
    out = assemble(function_task, code)
    lines = out.script.split("\n")
    assert lines[out.start_line - 1] == "def score_new_implementation(values, cap=100):"
    assert lines[out.end_line - 1] == "    return 0"
    assert lines[out.end_line] == "score = score_new_implementation = __gym_repost_record__(score_new_implementation)"
    assert function_task.ground_truth.split("\n")[1].strip() not in out.script  # no original body
    assert [d.name for d in ast.parse(out.script).body if isinstance(d, ast.FunctionDef)].count("score") == 0
    assert find_function(out.script, "test_score").start > out.end_line


def test_method_candidate_is_indented_into_its_class(method_task: FunctionTask) -> None:
    code = "def add(self, amount):\n    s = '''a\nb'''\n    return self.value + len(s)\n"
    out = assemble(method_task, code)
    span = find_function(out.script, "Counter.add_new_implementation")
    assert span is not None and span.class_name == "Counter"
    assert "    s = '''a\nb'''" in out.script  # the string's second line was not re-indented


def test_a_method_wrapped_in_its_class_is_unwrapped(method_task: FunctionTask) -> None:
    code = "class Counter:\n    def add(self, amount):\n        return 1\n"
    assert prepare_candidate(code, method_task.target).startswith("def add(self, amount):")


def test_recursion_stays_inside_the_candidate(function_task: FunctionTask, method_task: FunctionTask) -> None:
    out = assemble(function_task, "def score(values, cap=100):\n    return score(values[1:]) if values else 0\n")
    assert "return score_new_implementation(values[1:])" in out.script
    out = assemble(method_task, "def add(self, amount):\n    return self.add(amount) + len([])\n")
    assert "return self.add_new_implementation(amount) + len([])" in out.script


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        # the docstring names the function; the code after it calls it, or does not
        ('def f(n):\n    """f(3) == 6"""\n    return n * f(n - 1) if n else 1\n', "return n * g(n - 1) if n else 1"),
        ('def f(n):\n    """f(3) == 6"""\n    return n\n', '"""f(3) == 6"""\n    return n\n'),
        # code on the docstring's own line; a body that is only a docstring
        ('def f(n):\n    """f(3) == 6"""; return f(n)\n', '"""f(3) == 6"""; return g(n)'),
        ('def f(n):\n    """f(3) == 6"""\n', '"""f(3) == 6"""\n'),
        # a scope of the body binds the name: every reference keeps its meaning (Python's scoping)
        ("def f(n):\n    f = n + 1\n    return f\n", "    f = n + 1\n    return f\n"),
        ("def f(n):\n    return [f for f in range(n)]\n", "return [f for f in range(n)]"),
        ("def f(f):\n    return f\n", "def g(f):\n    return f\n"),
        (
            "def f(n):\n    def f(m):\n        return m\n    return f(n)\n",
            "    def f(m):\n        return m\n    return f(n)",
        ),
        ("def f(n):\n    global f\n    f = 3\n    return f\n", "    f = 3\n    return f\n"),
        # ... and where one scope binds it and another calls the function, none is renamed
        ("def f(n):\n    return [f for f in range(n)] + f(n - 1)\n", "return [f for f in range(n)] + f(n - 1)"),
        # a class body, a lambda or a comprehension that does not bind it reads the function
        (
            "def f(n):\n    class C:\n        y = f(1)\n    return (lambda: f(n))()\n",
            "y = g(1)\n    return (lambda: g(n))()",
        ),
        ("def f(n):\n    return [f(i) for i in range(n)]\n", "return [g(i) for i in range(n)]"),
    ],
)
def test_references_after_the_docstring_are_renamed_and_the_docstring_is_not(code: str, expected: str) -> None:
    renamed = rename_definition(code, find_function(code, "f"), "g")
    assert renamed.startswith("def g(") and expected in renamed, renamed


def test_bare_name_in_a_method_is_not_renamed() -> None:
    code = "def open(self, path):\n    return open(path)\n"
    span = find_function(code, "open")
    renamed = rename_definition(code, span, "open_new_implementation", class_name="File")
    assert renamed == "def open_new_implementation(self, path):\n    return open(path)\n"


def test_markdown_fences_and_indentation_are_tolerated(function_task: FunctionTask) -> None:
    reply = "Here it is:\n```python\n    def score(values, cap=100):\n        return 1\n```\nDone."
    assert prepare_candidate(reply, function_task.target) == "def score(values, cap=100):\n    return 1"
    assert extract_code_block("no code here") is None


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("def score(values:\n", "does not parse"),
        ("def other():\n    return 1\n", "must define the function `def score(...)`"),
        ("x" * 300_000, "limit"),
        (42, "must be a string"),
    ],
)
def test_unusable_candidates_are_explained(function_task: FunctionTask, code, message: str) -> None:
    with pytest.raises(CandidateError, match=re.escape(message)):
        assemble(function_task, code)


def test_do_nothing_candidate_keeps_signature_and_decorators(method_task: FunctionTask) -> None:
    code = do_nothing_candidate(method_task)
    assert code == "def add(self, amount):\n    return None\n"
    ast.parse(code)


def test_dedent_and_indent_leave_string_interiors_alone() -> None:
    code = "    x = '''\n  keep\n'''\n    y = 1"
    assert dedent_code(code) == "x = '''\n  keep\n'''\ny = 1"
    assert indent_code("x = '''\nkeep\n'''\ny = 1", "  ") == "  x = '''\nkeep\n'''\n  y = 1"


@pytest.mark.parametrize("text", ["`" * 199_000, "```" + "a" * 199_000, "```py" + "`" * 100_000])
def test_fence_search_is_linear_on_backtick_floods(text: str) -> None:
    import time

    started = time.process_time()
    extract_code_block(text)
    assert time.process_time() - started < 2.0  # was 47-54 s: quadratic backtracking


def test_the_script_without_tests_keeps_the_code_and_drops_every_test(
    function_task: FunctionTask, method_task: FunctionTask
) -> None:
    from gym_repost.harness import strip_tests
    from gym_repost.harness.candidate import AssembledScript

    extra = "\n\nif __name__ == '__main__':\n    print('example')\n\ndef test_mine():\n    assert False\n"
    for task in (function_task, method_task):
        assembled = assemble(task, task.ground_truth + (extra if task is function_task else ""))
        parsed = strip_tests(task, AssembledScript(assembled.script, assembled.start_line, assembled.end_line))
        assert assembled.stripped == parsed  # made without parsing the script again, the same text
        lines = parsed.split("\n")
        assert len(lines) == len(assembled.script.split("\n"))  # line numbers kept
        assert f"def {task.target.name}_new_implementation" in parsed
        assert "def test_" not in parsed and "__main__" not in parsed and "example" not in parsed
        ast.parse(parsed)


def test_the_code_shipped_to_the_sandbox_keeps_its_asserts_under_a_host_run_with_O() -> None:
    # The host compiles a candidate's script to check it and ships that code to the harness:
    # a host started with ``python -O`` must not strip the tests' asserts from it.
    import subprocess
    import sys

    probe = (
        "from gym_repost.harness.candidate import _compile_error, compiled_script\n"
        "print(_compile_error('assert 1 == 2, \"kept\"\\n'))\n"
        "try:\n"
        "    exec(compiled_script('assert 1 == 2, \"kept\"\\n'))\n"
        "except AssertionError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-O", "-c", probe], capture_output=True, text=True, check=False)
    assert result.stdout == "None\nkept\n", result.stderr  # the probe's own asserts are gone: it prints


def test_a_docstring_showing_a_fence_is_code_not_markdown(function_task: FunctionTask) -> None:
    """Issue 33: the fence was extracted whenever the text held three backticks anywhere; a
    valid body whose docstring shows a fenced example was mangled (and a ground truth holding
    one dropped as "tests fail on the ground truth")."""
    fence = "`" * 3
    body = function_task.ground_truth.replace(
        ":\n", f':\n    """Example:\n\n    {fence}python\n    score([1])\n    {fence}\n    """\n', 1
    )
    prepared = prepare_candidate(body, function_task.target)
    assert f"{fence}python" in prepared and "def score(" in prepared
    # a reply in Markdown, which does not parse as Python, still has its code taken out
    reply = f"Here it is:\n\n{fence}python\n{function_task.ground_truth}{fence}\n"
    assert prepare_candidate(reply, function_task.target).startswith("def score(")
