"""What a policy is given about a task: the task view, never the answers.

A :class:`TaskView` holds what the environment shows an agent: the statement, the
repository view (the files ``list_files``/``read_file``/``search`` reach, the target's body
removed or the ground-truth test file left out), the dependency-only context, the
target's name, signature and docstring (or the test file to write), and the budgets. It
holds no ground truth, no evaluation script, no tests and no reference scores, and no
reference to the :class:`~gym_repost.task.Task` it was made from: :func:`task_view` copies
the visible fields, so nothing else is reachable through it (``model_dump`` or ``vars``
included).

The view is the API contract, not a security boundary: a policy running in the runner's
process can read whatever that process can (the task file on disk, for one). An agent that
must not be trusted acts from another process, through ``gym-repost serve``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gym_repost.task import FunctionTask, Task


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetView(_View):
    """The function to write, as the statement shows it: everything but its body."""

    name: str
    """The function's own name."""
    qualname: str
    """``func`` or ``Class.method``."""
    class_name: str | None = None
    """Enclosing class for methods, else None."""
    signature: str
    """The ``def`` line(s), decorators excluded, ending with ``:``."""
    decorators: tuple[str, ...] = ()
    """Decorator lines (without the ``@``), outermost first."""
    docstring: str | None = None
    """The docstring the environment's statement shows (the original one), if any."""

    @property
    def kind(self) -> Literal["function", "method"]:
        """``method`` when the target lives in a class."""
        return "method" if self.class_name else "function"


class TestFileView(_View):
    """The test file to write (test-file tasks): where it goes and what it tests."""

    __test__ = False  # not a pytest test class

    focal_file: str
    """The file under test."""
    focal_module: str
    """Dotted module name the tests import the focal file by."""
    test_path: str
    """Where the test file is placed."""
    python_path: tuple[str, ...] = ("",)
    """Directories (``""`` is the root) put first on ``sys.path``."""
    plugins: tuple[str, ...] = ()
    """pytest plugins loaded with ``-p``."""


class FilesView(_View):
    """The files the agent may read, exactly as the environment's tools expose them."""

    files: dict[str, str]
    """POSIX relative path to text."""
    target_file: str
    """The target's file (its body replaced by a placeholder), or the focal file."""
    complete: bool = True
    """False when only the files of the dependency context are present."""


class Budgets(_View):
    """What an episode may spend."""

    max_steps: int
    """Steps (tool calls) before the episode is truncated."""
    max_submissions: int
    """Submissions allowed: repair iterations + 1."""
    timeout: float
    """Seconds one test run may take: of the wall clock for a function task's evaluation
    script, of CPU time for a test-file task's whole test file (waiting: three times as
    long)."""
    test_timeout: float | None = None
    """CPU seconds one test may take (test-file tasks; waiting: three times as long)."""


class TaskView(_View):
    """A task as a policy sees it (see the module docstring).

    Function tasks have :attr:`target` and :attr:`context`; test-file tasks have
    :attr:`test_file`.
    """

    id: str
    name: str
    kind: Literal["function", "testfile"]
    repo: str
    """Name of the repository the task comes from."""
    statement: str
    """The task statement the environment's ``reset`` returned."""
    repository: FilesView
    context: str = ""
    """Dependency-only context (function tasks): markdown blocks headed ``## path``, the
    target's body removed."""
    target: TargetView | None = None
    test_file: TestFileView | None = None
    budgets: Budgets


def task_view(task: Task, statement: str, *, max_steps: int, max_submissions: int) -> TaskView:
    """The view of ``task`` a policy is given.

    Args:
        task: the task.
        statement: the statement the environment's ``reset`` returned.
        max_steps: the episode's step budget.
        max_submissions: the episode's submission budget.
    """
    repository = FilesView(
        files=dict(task.repository.files), target_file=task.repository.target_file, complete=task.repository.complete
    )
    common: dict[str, Any] = {
        "id": task.id,
        "name": task.name,
        "repo": task.provenance.repo,
        "statement": statement,
        "repository": repository,
    }
    if isinstance(task, FunctionTask):
        t = task.target
        target = TargetView(
            name=t.name,
            qualname=t.qualname,
            class_name=t.class_name,
            signature=t.signature,
            decorators=tuple(t.decorators),
            docstring=t.docstring,
        )
        budgets = Budgets(max_steps=max_steps, max_submissions=max_submissions, timeout=task.evaluation.timeout)
        return TaskView(kind="function", context=task.context, target=target, budgets=budgets, **common)
    spec = task.evaluation
    test_file = TestFileView(
        focal_file=spec.focal_file,
        focal_module=spec.focal_module,
        test_path=spec.test_path,
        python_path=tuple(spec.python_path),
        plugins=tuple(spec.plugins),
    )
    budgets = Budgets(
        max_steps=max_steps, max_submissions=max_submissions, timeout=spec.timeout, test_timeout=spec.test_timeout
    )
    return TaskView(kind="testfile", test_file=test_file, budgets=budgets, **common)
