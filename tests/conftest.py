"""Shared fixtures: small hand-written tasks, the real local sandbox, HumanEval, RepoST-Eval,
a simulated Ray cluster."""

from __future__ import annotations

import os
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from gym_repost.construct.function_task import make_function_task, repository_view
from gym_repost.llm.scripted_server import ScriptedLLMServer
from gym_repost.sandbox import Sandbox, get_sandbox
from gym_repost.task import FunctionTask, Provenance

ROOT = Path(__file__).resolve().parents[1]

# References kept on disk (gym_repost.harness.reference_store) start empty in every test
# session, so a test sees what a first use does; the CLI's subprocesses share them.
os.environ.setdefault("GYM_REPOST_REFERENCES", tempfile.mkdtemp(prefix="gym-repost-references-"))
# Hypothesis's timing checks (a deadline per example, "input generation is slow") fail on a
# loaded 2-core machine though nothing is wrong: examples are counted, not timed.
settings.register_profile("gym-repost", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gym-repost")
REPOST_EVAL_DATA = ROOT.parent / "shared" / "external" / "repost-eval"

FUNCTION_SCRIPT = textwrap.dedent('''\
    import math

    SCALE = 10


    def clamp(x, low, high):
        return max(low, min(high, x))


    def score(values, cap=100):
        """Sum of scaled values, each clamped to [0, cap]."""
        total = 0
        for v in values:
            if v < 0:
                continue
            total += clamp(v * SCALE, 0, cap)
        return math.floor(total)


    def test_score():
        cases = [([1, 2, 3], 100), ([], 5), ([-1, 50, 0.5], 100), ([20], 30)]
        for values, cap in cases:
            assert score(values, cap) == score_new_implementation(values, cap)
        assert score([1]) == score_new_implementation([1])
        assert score([9, 9]) == score_new_implementation([9, 9])


    if __name__ == "__main__":
        test_score()
    ''')

REPO_FILE = textwrap.dedent('''\
    import math

    from .util import clamp

    SCALE = 10


    def score(values, cap=100):
        """Sum of scaled values, each clamped to [0, cap]."""
        total = 0
        for v in values:
            if v < 0:
                continue
            total += clamp(v * SCALE, 0, cap)
        return math.floor(total)
    ''')

METHOD_SCRIPT = textwrap.dedent('''\
    class Counter:
        def __init__(self, start=0):
            self.value = start
            self.history = []

        def add(self, amount):
            """Add amount (negative amounts are ignored) and return the new value."""
            if amount < 0:
                return self.value
            self.value += amount
            self.history.append(amount)
            return self.value


    def test_add():
        for amounts in ([1, 2, 3], [-1, 4], [0]):
            a, b = Counter(5), Counter(5)
            for x in amounts:
                assert a.add(x) == b.add_new_implementation(x)
            assert a.value == b.value
            assert a.history == b.history


    if __name__ == "__main__":
        test_add()
    ''')


def build_task(script: str, qualname: str, repo_files: dict[str, str], target_file: str) -> FunctionTask:
    """A function task from an inline evaluation script."""
    provenance = Provenance(source="test", repo="tests/tiny", file=target_file, qualname=qualname, license="MIT")
    return make_function_task(
        name=f"tiny/{qualname}",
        provenance=provenance,
        script=script,
        repository=repository_view(repo_files, target_file, qualname, complete=True),
        context=f"```python\n## {target_file}\n{repo_files[target_file]}```\n",
        timeout=10.0,
    )


@pytest.fixture
def function_task() -> FunctionTask:
    """A function that calls a helper and uses a module constant."""
    files = {
        "tiny/score.py": REPO_FILE,
        "tiny/util.py": "def clamp(x, low, high):\n    return max(low, min(high, x))\n",
        "tiny/__init__.py": "",
    }
    return build_task(FUNCTION_SCRIPT, "score", files, "tiny/score.py")


@pytest.fixture
def method_task() -> FunctionTask:
    """A method that reads and mutates ``self``."""
    return build_task(
        METHOD_SCRIPT, "Counter.add", {"tiny/counter.py": METHOD_SCRIPT.split("\n\ndef test_add")[0]}, "tiny/counter.py"
    )


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    """The real local sandbox (two warm workers), shared by the whole session."""
    sb = get_sandbox("local", workers=2)
    sb.start()
    yield sb
    sb.close()


@pytest.fixture(scope="session")
def humaneval_tasks() -> list[FunctionTask]:
    """The 164 HumanEval problems as tasks, read from the installed package."""
    from gym_repost.construct.importers.humaneval import import_humaneval

    tasks = list(import_humaneval())
    assert all(isinstance(t, FunctionTask) for t in tasks)
    return tasks  # type: ignore[return-value]


@pytest.fixture(scope="session")
def repost_eval_tasks() -> list[FunctionTask]:
    """The 296 RepoST-Eval tasks, imported from ``../shared/external/repost-eval``."""
    from gym_repost.construct.importers.repost_eval import import_repost_eval

    if not REPOST_EVAL_DATA.is_dir():
        pytest.skip(f"RepoST-Eval data not found at {REPOST_EVAL_DATA}")
    tasks = [t for t in import_repost_eval(REPOST_EVAL_DATA) if isinstance(t, FunctionTask)]
    assert len(tasks) == 296
    return tasks


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    """A scripted LLM server on 127.0.0.1 speaking the OpenAI and Anthropic wire formats."""
    with ScriptedLLMServer() as s:
        yield s


@pytest.fixture
def llm_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in API keys, so the real SDKs accept to talk to the scripted server."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-anthropic")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A simulated Ray cluster (``ray.cluster_utils.Cluster``) for one test module: a head
    node (2 CPUs) and a worker node (1 CPU), this process connected as driver. Three actors
    of one CPU each fill it, so a test that needs one on each node asks for three. A command
    line run joins it with ``--ray-address cluster.address``."""
    ray = pytest.importorskip("ray", reason='the Ray tests need Ray: pip install "gym-repost[ray]"')
    from ray.cluster_utils import Cluster

    os.environ.pop("RAY_ADDRESS", None)
    # Ray writes the cluster's address to $RAY_TMPDIR/ray/ray_current_cluster whatever the
    # head node's temp_dir, without creating the directory (2.60: a fresh machine had no
    # /tmp/ray). A directory of this cluster's own also keeps two test processes' clusters apart.
    scratch = tempfile.mkdtemp(prefix="ray")
    (Path(scratch) / "ray").mkdir()
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = scratch
    simulated = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "include_dashboard": False, "temp_dir": str(Path(scratch) / "ray")},
    )
    try:
        simulated.add_node(num_cpus=1)
        ray.init(address=simulated.address, log_to_driver=False)
        yield simulated
    finally:
        ray.shutdown()
        simulated.shutdown()
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
