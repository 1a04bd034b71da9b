"""Small test-file tasks shared by the tests of analysis, env, evaluate, data and the CLI.

Import the fixtures by name (``from testfile_tasks import tiny_testfile_task``); the
repository is a package of a few files, its focal file about 40 lines.
"""

from __future__ import annotations

import textwrap

import pytest

from gym_repost.harness.testfile import run_test_file
from gym_repost.harness.testfile_scoring import metrics_from_run
from gym_repost.sandbox import Sandbox
from gym_repost.task import Provenance, RepositoryView, TestFileEvaluation, TestFileMetrics, TestFileTask

FOCAL = textwrap.dedent('''\
    """Tiny focal module."""
    import functools

    LIMIT = 10


    class TooBig(ValueError):
        pass


    def clamp(x, low=0, high=LIMIT):
        if x < low:
            return low
        if x > high:
            return high
        return x


    @functools.lru_cache(maxsize=None)
    def fib(n):
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        return a


    def check(x):
        if x > LIMIT:
            raise TooBig(x)
        return x * 2


    def total(values):
        s = 0
        i = 0
        while i < len(values):
            s += values[i]
            i += 1
        return s
    ''')

GROUND_TRUTH = textwrap.dedent("""\
    import pytest

    from tinypkg.core import TooBig, check, clamp, fib, total


    def test_clamp():
        assert clamp(5) == 5
        assert clamp(-1) == 0
        assert clamp(11) == 10


    def test_fib():
        assert fib(10) == 55


    @pytest.mark.parametrize("error", [TooBig])
    def test_check(error):
        assert check(2) == 4
        with pytest.raises(error):
            check(11)


    def test_total():
        assert total([1, 2, 3]) == 6
    """)

FILES = {
    "tinypkg/__init__.py": "",
    "tinypkg/core.py": FOCAL,
    "tinypkg/util.py": "def double(x):\n    return 2 * x\n",
    "README.md": "tiny\n",
}
TEST_PATH = "tests/test_core.py"


def make_testfile_task(
    ground_truth: str = GROUND_TRUTH,
    files: dict[str, str] | None = None,
    reference: TestFileMetrics | None = None,
    **evaluation: object,
) -> TestFileTask:
    """A task over :data:`FILES`; the reference defaults to perfect scores."""
    settings = {"timeout": 20.0, "test_timeout": 3.0, "mutation_timeout": 60.0, **evaluation}
    spec = TestFileEvaluation(
        test_path=TEST_PATH,
        focal_file="tinypkg/core.py",
        focal_module="tinypkg.core",
        ground_truth=ground_truth,
        **settings,
    )  # type: ignore[arg-type]
    ref = reference or TestFileMetrics(
        tests=4, passed=4, execution_rate=1.0, pass_rate=1.0, line_coverage=1.0, branch_coverage=1.0, mutation_score=0.9
    )
    return TestFileTask(
        name="tiny/tests/test_core.py",
        provenance=Provenance(
            source="test", repo="tinypkg", file="tinypkg/core.py", qualname="tinypkg.core", license="MIT"
        ),
        repository=RepositoryView(files=dict(files or FILES), target_file="tinypkg/core.py"),
        evaluation=spec,
        reference=ref,
    ).with_id()


def measured_testfile_task(sandbox: Sandbox, **evaluation: object) -> TestFileTask:
    """:func:`make_testfile_task` (``evaluation``: its settings) with its reference measured
    from its ground truth."""
    task = make_testfile_task(**evaluation)
    task.reference = metrics_from_run(run_test_file(sandbox, task, task.ground_truth))
    return task.with_id()


@pytest.fixture(scope="session")
def tiny_testfile_task(sandbox: Sandbox) -> TestFileTask:
    """The tiny task with its reference measured from its ground truth."""
    return measured_testfile_task(sandbox)
