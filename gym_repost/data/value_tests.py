"""Tests judged outside the code's process, from the values its calls returned.

A test of an execution matrix (:mod:`gym_repost.data.matrix`) is setup statements and
one ``assert``. Run in the code's own process, the code can reach everything the test
holds: the expected value, the original implementation an equivalence test calls, the
assertion machinery. So a test of the right shape is split:

* the **code's run** executes the setup and only the calls of the code under test in the
  assert (``truncate_number(1.33)``, ``_outcome(apply_discount_new_implementation, x)``),
  in a script where the original implementation does not exist, and returns their
  values as plain data (:mod:`gym_repost.programs.values`);
* the **judge's run**, a process that never ran the code, executes the setup and the
  assert with those calls replaced by the values, beside the ground truth.

A value that is not plain data (an object comparing equal to everything, say) fails.
A test is split only when the ground truth's own values for it are plain data (decided
once per task and suite, not by the code being judged), so that honest code is never
failed for returning what the ground truth returns. Other tests (an ``assert`` inside a
loop, a comprehension, a short-circuit, values that are not data) still run whole in the
code's process, beside the original: :attr:`ValuePlan.inside` counts them.
"""

from __future__ import annotations

import ast
import hashlib
import json
import threading
from dataclasses import dataclass

from gym_repost.analysis.parsing import parse_python
from gym_repost.data.assertions import mentions, under_test_names
from gym_repost.data.base import TestSuite
from gym_repost.task import FunctionTask

VALUES_NAME = "__gym_repost_values__"
_REJECTED = (
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.NamedExpr,
    ast.BoolOp,
    ast.IfExp,
    ast.Await,
    ast.Yield,
    ast.YieldFrom,
)


@dataclass(frozen=True)
class ValueTest:
    """One test split in two.

    Attributes:
        setup: the statements before the assert (no assert, no mention of the code).
        calls: the calls of the code under test in the assert, as source, in order.
        judge: the setup and the assert, the calls replaced by ``__gym_repost_values__[i]``.
    """

    setup: str
    calls: tuple[str, ...]
    judge: str


def split_value_test(source: str, names: set[str]) -> ValueTest | None:
    """Split ``source`` into the calls of ``names`` and the judge; None when its shape does not allow it."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not tree.body or not isinstance(tree.body[-1], ast.Assert):
        return None
    setup, check = tree.body[:-1], tree.body[-1]
    if any(isinstance(n, ast.Assert) for s in setup for n in ast.walk(s)) or any(mentions(s, names) for s in setup):
        return None
    if any(isinstance(n, _REJECTED) for n in ast.walk(check)) or (check.msg is not None and mentions(check.msg, names)):
        return None
    calls: list[ast.Call] = []
    _collect_calls(check.test, names, calls)
    if not calls:
        return None
    replaced = _Replace({id(c): i for i, c in enumerate(calls)}).visit(check)
    if mentions(replaced, names):
        return None
    judge = ast.Module(body=[*setup, replaced], type_ignores=[])
    try:
        return ValueTest(
            ast.unparse(ast.Module(body=setup, type_ignores=[])),
            tuple(ast.unparse(c) for c in calls),
            ast.unparse(ast.fix_missing_locations(judge)),
        )
    except (ValueError, RecursionError):
        return None


def _collect_calls(node: ast.AST, names: set[str], found: list[ast.Call]) -> None:
    """The smallest calls that mention ``names`` (outermost first, in evaluation order)."""
    for child in ast.iter_child_nodes(node):
        if not mentions(child, names):
            continue
        if isinstance(child, ast.Call) and not any(
            isinstance(n, ast.Call) and n is not child and mentions(n, names) for n in ast.walk(child)
        ):
            found.append(child)
        else:
            _collect_calls(child, names, found)


class _Replace(ast.NodeTransformer):
    def __init__(self, index: dict[int, int]) -> None:
        self.index = index

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if id(node) in self.index:
            return ast.copy_location(
                ast.Subscript(
                    value=ast.Name(VALUES_NAME, ast.Load()), slice=ast.Constant(self.index[id(node)]), ctx=ast.Load()
                ),
                node,
            )
        return self.generic_visit(node)


@dataclass(frozen=True)
class ValuePlan:
    """Which tests of a suite are judged outside the code's process.

    Attributes:
        splits: per test, its split when it is judged outside, else None.
    """

    splits: tuple[ValueTest | None, ...]

    @property
    def outside(self) -> int:
        """Tests judged outside the code's process."""
        return sum(s is not None for s in self.splits)

    @property
    def inside(self) -> int:
        """Tests run whole in the code's process (their shape, or values that are not data)."""
        return len(self.splits) - self.outside


def candidate_splits(task: FunctionTask, suite: TestSuite) -> tuple[ValueTest | None, ...]:
    """Each test's split by shape alone (before the ground truth's values are known)."""
    names = under_test_names(task.target, suite.style)
    return tuple(split_value_test(test, names) for test in suite.tests)


class PlanCache:
    """Value plans by task and suite, made once each."""

    def __init__(self) -> None:
        self._plans: dict[str, ValuePlan] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(task: FunctionTask, suite: TestSuite, sandbox_description: dict[str, object]) -> str:
        text = json.dumps(
            [
                task.evaluation.model_dump(),
                task.target.model_dump(),
                task.ground_truth,
                list(suite.tests),
                suite.style,
                sandbox_description,
            ],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, key: str) -> ValuePlan | None:
        with self._lock:
            return self._plans.get(key)

    def put(self, key: str, plan: ValuePlan) -> None:
        with self._lock:
            self._plans[key] = plan
