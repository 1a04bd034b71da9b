"""Assert-style tests from text: a task's own tests split apart, wrong copies, model replies.

* :func:`split_task_tests`: the task's test function as separate tests. HumanEval's
  ``check(candidate)`` becomes plain asserts on the target's name (``assert``
  style); a RepoST equivalence test function becomes statements comparing ``{name}`` and
  ``{name}_new_implementation`` (``equivalence`` style).
* :func:`perturb_test`: copies of a test with a wrong expectation, so that filtering and
  minimax selection have wrong tests to reject.
* :func:`propose_tests_prompt` and :func:`parse_test_reply`: the prompt that asks a
  model for assert-style tests and the parser of its reply, for an LLM test sampler.

A test is its setup followed by one statement that asserts: the statements of the test
function before it that hold no ``assert`` (fixtures, inputs), then the statement
itself (an ``assert``, or a loop or block containing asserts, kept whole).
"""

from __future__ import annotations

import ast
import copy
import doctest
from collections.abc import Iterable

from gym_repost.analysis.mutation import generate_mutants
from gym_repost.analysis.parsing import parse_python
from gym_repost.data.base import TestStyle, TestSuite
from gym_repost.harness.candidate import extract_code_block, new_name
from gym_repost.prompting import render_prompt
from gym_repost.task import FunctionTask, Target


def under_test_names(target: Target, style: TestStyle) -> set[str]:
    """Names (or attribute names) through which a test of ``style`` reaches the code."""
    return {target.name} if style == "assert" else {new_name(target)}


def mentions(node: ast.AST, names: set[str]) -> bool:
    """True when ``node`` refers to one of ``names`` as a name or an attribute."""
    return any(
        (isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr in names)
        for n in ast.walk(node)
    )


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.copy_location(ast.Name(self.new, node.ctx), node) if node.id == self.old else node


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _body(node: ast.FunctionDef) -> list[ast.stmt]:
    body = node.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:]
    return body


def _checker_body(tree: ast.Module, test: ast.FunctionDef, target: Target) -> list[ast.stmt] | None:
    """For ``def test_f(): check(f_new_implementation)`` the body of ``check`` with its
    parameter renamed to the target's name; None for any other test function."""
    body = _body(test)
    if target.class_name or len(body) != 1 or not isinstance(body[0], ast.Expr):
        return None
    call = body[0].value
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and len(call.args) == 1
        and not call.keywords
        and isinstance(call.args[0], ast.Name)
        and call.args[0].id == new_name(target)
    ):
        return None
    checker = _function(tree, call.func.id)
    if checker is None or len(checker.args.args) != 1:
        return None
    rename = _Rename(checker.args.args[0].arg, target.name)
    return [ast.fix_missing_locations(rename.visit(copy.deepcopy(s))) for s in _body(checker)]


def _trivial(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Constant)


def split_statements(body: Iterable[ast.stmt], names: set[str], *, require_mention: bool) -> list[str]:
    """One test per asserting statement of ``body``, each with the setup before it."""
    setup: list[ast.stmt] = []
    tests: list[str] = []
    for statement in body:
        if not any(isinstance(n, ast.Assert) for n in ast.walk(statement)):
            setup.append(statement)
            continue
        if _trivial(statement):
            continue
        snippet = ast.Module(body=[*setup, statement], type_ignores=[])
        if require_mention and not mentions(snippet, names):
            continue
        tests.append(ast.unparse(snippet))
    return list(dict.fromkeys(tests))


def reaching_functions(tree: ast.Module, names: set[str], skip: str) -> set[str]:
    """``names`` plus the module-level functions (other than ``skip``) that reach one of
    them, directly or through each other (helpers like ``_same(raw)`` that call both
    the original and the candidate)."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name != skip}
    reach = set(names)
    grew = True
    while grew:
        new = {name for name, node in functions.items() if name not in reach and mentions(node, reach)}
        reach |= new
        grew = bool(new)
    return reach


def docstring_tests(target: Target) -> list[str]:
    """``assert f(x) == want`` for each doctest example of the target's docstring whose
    source is one expression reaching the target and whose output is an expression."""
    try:
        examples = doctest.DocTestParser().get_examples(target.docstring or "")
    except ValueError:  # a docstring doctest itself cannot read (inconsistent indentation)
        return []
    tests = []
    for example in examples:
        try:
            source = parse_python(example.source.strip(), mode="eval")
            want = parse_python(example.want.strip(), mode="eval")
        except SyntaxError:
            continue
        if example.want.strip() and mentions(source, {target.name}):
            tests.append(f"assert {ast.unparse(source.body)} == {ast.unparse(want.body)}")
    return list(dict.fromkeys(tests))


def split_task_tests(task: FunctionTask) -> TestSuite:
    """The task's own test function, split into one test per asserting statement.

    For ``assert``-style tasks (HumanEval's ``check``), the docstring's doctest examples
    are added as tests too (labelled ``docstring``). Returns an empty suite when the
    script has no such function.
    """
    tree = parse_python(task.evaluation.script)
    test = _function(tree, task.evaluation.test_function)
    if test is None:
        return TestSuite(())
    body = _checker_body(tree, test, task.target)
    if body is None:
        names = reaching_functions(tree, {new_name(task.target)}, skip=test.name)
        tests = split_statements(_body(test), names, require_mention=True)
        return TestSuite(tuple(tests), "equivalence", ("task",) * len(tests))
    tests = split_statements(body, {task.target.name}, require_mention=True)
    extra = [t for t in docstring_tests(task.target) if t not in tests]
    return TestSuite(tuple(tests + extra), "assert", ("task",) * len(tests) + ("docstring",) * len(extra))


def _constant_variants(expression: ast.expr) -> list[ast.expr]:
    """``expression`` with one constant changed, for each of its constants."""
    source = "_ = " + ast.unparse(expression)
    variants = []
    for mutant in generate_mutants(source, operators=["constant"]):
        assign = parse_python(mutant.source).body[0]
        assert isinstance(assign, ast.Assign)
        variants.append(assign.value)
    return variants


def _wrong_asserts(statement: ast.Assert, names: set[str]) -> list[ast.Assert]:
    test = statement.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        left, right = test.left, test.comparators[0]
        if mentions(left, names) != mentions(right, names):
            expected_is_right = mentions(left, names)
            variants = _constant_variants(right if expected_is_right else left)
            if variants:
                return [
                    ast.Assert(
                        ast.Compare(left, [ast.Eq()], [v])
                        if expected_is_right
                        else ast.Compare(v, [ast.Eq()], [right]),
                        statement.msg,
                    )
                    for v in variants
                ]
    return [ast.Assert(ast.UnaryOp(ast.Not(), test), statement.msg)]


def perturb_test(test: str, names: set[str]) -> list[str]:
    """Copies of ``test`` whose final ``assert`` expects something wrong.

    For ``assert A == B`` where one side reaches the code under test (``names``) and the
    other does not, each copy changes one constant of the other side (the expectation:
    ``True`` -> ``False``, ``n`` -> ``n + 1``, ``"s"`` -> ``"XXsXX"``); otherwise the single
    copy is ``assert not (E)``. Tests that end in a compound statement get no copies.
    """
    module = parse_python(test)
    last = module.body[-1] if module.body else None
    if not isinstance(last, ast.Assert):
        return []
    setup = module.body[:-1]
    wrong = _wrong_asserts(last, names)
    return list(
        dict.fromkeys(
            ast.unparse(ast.fix_missing_locations(ast.Module(body=[*setup, w], type_ignores=[]))) for w in wrong
        )
    )


def propose_tests_prompt(task: FunctionTask, n: int) -> str:
    """The prompt asking a model for ``n`` assert-style tests of the task's target."""
    from gym_repost.data.records import prompt_files

    return render_prompt(
        "gym_repost.data",
        "propose_tests.j2",
        files=prompt_files(task),
        target=task.target,
        file=task.repository.target_file,
        n=n,
    )


def _statements(code: str) -> list[ast.stmt]:
    try:
        return parse_python(code).body
    except SyntaxError:
        pass
    statements: list[ast.stmt] = []
    for line in code.split("\n"):  # keep the lines that parse on their own
        try:
            statements += parse_python(line.strip()).body
        except SyntaxError:
            continue
    return statements


def parse_test_reply(reply: str, target: Target) -> list[str]:
    """The tests in a model's reply: each top-level ``assert`` that reaches the target,
    preceded by the reply's top-level imports (``assert`` style)."""
    statements = _statements(extract_code_block(reply) or reply)
    imports = [s for s in statements if isinstance(s, (ast.Import, ast.ImportFrom))]
    names = under_test_names(target, "assert")
    tests = [
        ast.unparse(ast.Module(body=[*imports, s], type_ignores=[]))
        for s in statements
        if isinstance(s, ast.Assert) and not _trivial(s) and mentions(s, names)
    ]
    return list(dict.fromkeys(tests))
