"""RepoST-Eval end to end: import the published data, install its environment, validate.

Slow (installs ``envs/repost-eval`` into its own virtual environment on first use, then
runs 296 evaluation scripts twice). The data lies beside the project in
``../shared/external/repost-eval``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_repost.construct.importers.repost_eval import import_repost_eval
from gym_repost.executor import LocalExecutor
from gym_repost.harness.validation import validate_tasks
from gym_repost.sandbox import get_sandbox
from gym_repost.sandbox.environments import install_env, preload_apart_for, preload_for
from gym_repost.task import FunctionTask

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "external" / "repost-eval"

# Ground truths that cannot pass, and why (see docs/repost-eval.md).
KNOWN_FAILURES = {
    "132": "shells out to `npx tsc`, which would download TypeScript: no network in the sandbox (npm told so)",
    "471": "the test exercises a subclass's override; the target itself is abstract",
    "1027": "the test defines its own get_all_values_new_implementation and never calls the candidate",
}

# Ground truths that pass or fail depending on the machine's state (seen failing under load).
FLAKY = {
    "671": "compares disk usage read twice from the live system (psutil); other processes' writes change it",
    "752": "trains a TensorFlow LSTM on unseeded random data within the 30 s timeout",
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env_python() -> str:
    return str(install_env(ROOT / "envs" / "repost-eval"))


@pytest.mark.skipif(not DATA.is_dir(), reason=f"RepoST-Eval data not found at {DATA}")
def test_at_least_290_of_296_ground_truths_pass(env_python: str) -> None:
    tasks = [t for t in import_repost_eval(DATA) if isinstance(t, FunctionTask)]
    assert len(tasks) == 296
    # as `gym-repost validate --env repost-eval -w 4` runs them: warm workers preload what the
    # tasks import, and workers of their own the heavy modules of a task or two (tensorflow,
    # litellm); four, because a few ground truths mostly sleep (621, 615 and 947 spend 13
    # to 24 s in time.sleep over their three runs) and would hold half of two workers idle
    packages = {p for t in tasks for p in t.metadata.external_packages}
    preload, apart = preload_for("repost-eval", packages), preload_apart_for("repost-eval", packages)
    assert set(apart) == {"liteswarm", "panel", "tensorflow", "transformers"}
    with get_sandbox("local", workers=4, python=env_python, preload=preload, preload_apart=apart) as sb:
        results = validate_tasks(sb, tasks, mutants=0, executor=LocalExecutor(4))
        assert sb.preload_report()["apart"]["dropped"] == {}  # tensorflow prints at import: fit, printed again
    failed = {r.task_name.split("/")[1].split("-")[0]: r.cause for r in results if not r.passed}
    assert len(results) - len(failed) >= 291, failed
    # 831 asks the Hugging Face hub for a tokenizer: told it is offline, it passes at once
    # (before, it waited out its timeout); 132's npx fails at once, saying it is offline
    assert "831" not in failed and "timed out" not in str(failed.get("132", "")), failed
    assert set(failed) <= set(KNOWN_FAILURES) | set(FLAKY), failed
    weak = [r.task_name for r in results if r.accepts_do_nothing]
    # The data's README: ~5% accept a do-nothing candidate when the tests alone decide; the
    # record also compares what the tests ignore, so fewer do here (9 on 2026-11-25).
    assert 5 <= len(weak) <= 20, weak


def test_preloading_the_environment(env_python: str) -> None:
    """The modules of envs/repost-eval/preload.txt load in warm workers, fit to fork from
    (sklearn's variables reach the runs), and torch's exit-time teardown of its preloaded
    operator registrations is not run at the exit of every run."""
    from gym_repost.sandbox.environments import env_preload

    modules = env_preload(str(ROOT / "envs" / "repost-eval"))
    assert {"numpy", "pandas", "sklearn", "torch"} <= set(modules)
    count = (
        "import weakref, torch\n"
        "print(sum(i.atexit for i in weakref.finalize._registry.values() "
        "if i.func.__qualname__ == '_del_library'))\n"
    )
    seeds = "import numpy, torch\nprint(torch.initial_seed(), torch.rand(1).item(), numpy.random.random())\n"
    with get_sandbox("local", python=env_python, preload=modules) as sb:
        report = sb.preload_report()
        result = sb.run(
            {"main.py": count + "import os\nprint(os.environ['KMP_INIT_AT_FORK'])\n"},
            ["python3", "main.py"],
            timeout=60,
        )
        # torch seeds its generator from the OS at import, as numpy does: so does every run
        # (runs of one worker drawing the same "random" tensors looked deterministic to a
        # reference, and a correct candidate run by another worker then failed: task 831)
        draws = [sb.run({"main.py": seeds}, ["python3", "main.py"], timeout=60).stdout.split() for _ in range(3)]
    assert report["loaded"] == modules and not report["failed"] and not report["unfit"], report
    assert result.stdout.split() == ["0", "FALSE"], result.stderr
    assert all(len(draw) == 3 for draw in draws) and all(len({d[i] for d in draws}) == 3 for i in range(3)), draws
    with get_sandbox("local", python=env_python) as sb:  # not preloaded: torch registers them itself
        assert int(sb.run({"main.py": count}, ["python3", "main.py"], timeout=60).stdout) > 0
