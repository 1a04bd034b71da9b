"""The training-data seam: what generates code samples, tests and repairs.

Three call shapes, each a :class:`~typing.Protocol`:

* :class:`CodeSampler`: candidate implementations of a task's target (DSTC's J code
  snippets, AceCoder's sampled programs, an AceCoder proxy solution);
* :class:`TestSampler`: assert-style tests for a task (DSTC's J tests, AceCoder's ~20
  synthesized tests);
* :class:`Repairer`: a new version of a failing candidate, given the failure report
  (rejection sampling's ``--debug-failures``).

The offline implementations live in :mod:`gym_repost.data.samplers` and are picked by a
spec string (``--sampler deterministic``); an LLM-backed sampler registers itself there
under its own kind (``llm:PROVIDER/MODEL``) and needs nothing else from this package.

Tests are Python source snippets. A :class:`TestSuite` says how they see the code under
test (its ``style``):

* ``assert``: plain statements that call the target by its own name, e.g.
  ``assert add(2, 3) == 5`` or, for a method, ``assert Counter(1).add(2) == 3``. The code
  under test replaces the target in the evaluation script's namespace. This is what a
  model proposes when asked for tests.
* ``equivalence``: statements in RepoST's form that compare the original ``{name}``
  with the candidate ``{name}_new_implementation``, run in the evaluation script's own
  namespace (the layout of the test harness). The deterministic sampler splits a
  RepoST-style task's equivalence test function into such statements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from gym_repost.task import FunctionTask

TestStyle = Literal["assert", "equivalence"]
"""How tests address the code under test; see the module docstring."""


@dataclass(frozen=True)
class TestSuite:
    """Tests sampled for one task.

    Attributes:
        tests: test snippets (Python statements; a failing ``assert`` is a failure).
        style: ``assert`` or ``equivalence`` (see the module docstring).
        labels: optional label per test saying where it comes from (the deterministic
            sampler uses ``task`` and ``perturbed``); empty when the sampler has none.
    """

    __test__ = False  # not a pytest test class

    tests: tuple[str, ...]
    style: TestStyle = "assert"
    labels: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.labels and len(self.labels) != len(self.tests):
            raise ValueError(f"{len(self.labels)} labels for {len(self.tests)} tests")

    def __len__(self) -> int:
        return len(self.tests)

    def select(self, keep: list[int]) -> TestSuite:
        """The suite restricted to the tests at indices ``keep`` (in that order)."""
        labels = tuple(self.labels[i] for i in keep) if self.labels else ()
        return TestSuite(tuple(self.tests[i] for i in keep), self.style, labels)


@runtime_checkable
class CodeSampler(Protocol):
    """Proposes implementations of a task's target function.

    ``name`` identifies the model behind the samples: AceCoder pairs programs only
    within one model's samples.
    """

    name: str

    def sample_code(self, task: FunctionTask, n: int, *, seed: int) -> list[str]:
        """Up to ``n`` candidate sources of ``task.target`` (each a full ``def``)."""


@runtime_checkable
class TestSampler(Protocol):
    """Proposes tests for a task's target function."""

    name: str

    def sample_tests(self, task: FunctionTask, n: int, *, seed: int) -> TestSuite:
        """Up to ``n`` tests, in the style the suite declares."""


@runtime_checkable
class Repairer(Protocol):
    """Repairs a failing candidate from its test report."""

    def repair(self, task: FunctionTask, code: str, report: str, *, seed: int) -> str | None:
        """A new candidate for ``task`` (None when there is none).

        Args:
            task: the task.
            code: the candidate that failed.
            report: the test report of ``code``, as an agent reads it.
            seed: seed of this repair attempt.

        The caller runs the tests on the result; the repairer need not check it.
        """
