"""Warm workers that preload modules: used by runs, fork-safe, no state carried between runs.

The probe modules live in a throwaway virtual environment (a dedicated evaluation
environment: runs see all of its site-packages); numpy is a dependency of gym-repost and
one of the host packages runs see by default, so its test needs no extra install.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gym_repost.errors import ConfigError
from gym_repost.sandbox.config import LocalSandboxConfig
from gym_repost.sandbox.environments import env_preload, preload_for
from gym_repost.sandbox.local import LocalSandbox
from tests.sandbox.conftest import probe_environment

PROBES = {
    # State a run may change: the next run must see it as a fresh import left it.
    "probe_state.py": "import os\nIMPORTED_IN = os.getpid()\nITEMS = []\n",
    # A stdlib thread pool that ran a job at import: a forked child inherits the pool's
    # bookkeeping (an idle worker) but not its thread, so a job submitted there never runs.
    "probe_pool.py": (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "POOL = ThreadPoolExecutor(max_workers=1)\n"
        "assert POOL.submit(lambda: 1).result() == 1\n"
        "def work():\n    return POOL.submit(lambda: 'done').result()\n"
    ),
    "probe_noisy.py": "print('hello from probe_noisy')\n",
    "probe_env.py": "import os\nos.environ['PROBE_ENV'] = 'set at import'\n",
    "probe_unset.py": "import os\ndel os.environ['LANG']\n",
    "probe_broken.py": "raise RuntimeError('probe_broken cannot be imported')\n",
}


@pytest.fixture(scope="module")
def probe_env() -> Iterator[str]:
    """A virtual environment holding the probe modules; its interpreter."""
    with probe_environment(PROBES) as python:
        yield python


@pytest.fixture(scope="module")
def preloading(probe_env: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSandbox]:
    """One warm worker (every run forks from the same one) preloading every probe."""
    root = tmp_path_factory.mktemp("preload")
    config = LocalSandboxConfig(
        python=probe_env,
        workers=1,
        work_root=str(root),
        packages_dir=str(root / "packages"),
        preload=[
            "probe_state",
            "probe_pool",
            "probe_noisy",
            "probe_env",
            "probe_unset",
            "probe_broken",
            "probe_missing_module",
        ],
    )
    with LocalSandbox(config) as sandbox:
        yield sandbox


def run(sandbox: LocalSandbox, source: str) -> str:
    result = sandbox.run({"main.py": source}, ["python3", "main.py"], timeout=60.0)
    assert result.ok and not result.timed_out, result.stderr
    return result.stdout


def test_a_preloaded_module_is_used_not_imported_again(preloading: LocalSandbox) -> None:
    out = run(
        preloading,
        "import os, sys\nbefore = sys.modules.get('probe_state')\n"
        "import probe_state\n"
        "print(before is probe_state, probe_state.IMPORTED_IN != os.getpid())\n",
    )
    assert out == "True True\n"
    assert "probe_state" in preloading.describe()["preload"]["loaded"]  # type: ignore[index]


def test_module_state_does_not_leak_between_runs(preloading: LocalSandbox) -> None:
    mutate = "import probe_state\nprobe_state.ITEMS.append('run')\nprint(len(probe_state.ITEMS))\n"
    assert [run(preloading, mutate) for _ in range(3)] == ["1\n", "1\n", "1\n"]


def test_a_module_that_starts_threads_is_not_forked_from(preloading: LocalSandbox) -> None:
    """The pool's thread would be missing in a forked child (its job would never run):
    the module is found unfit, the worker restarted without it, and runs import it."""
    out = run(
        preloading, "import sys\nprint('probe_pool' in sys.modules)\nimport probe_pool\nprint(probe_pool.work())\n"
    )
    assert out == "False\ndone\n"
    unfit = preloading.describe()["preload"]["unfit"]  # type: ignore[index]
    assert "started threads" in unfit["probe_pool"]


def test_a_module_that_prints_or_unsets_variables_at_import_is_not_preloaded(preloading: LocalSandbox) -> None:
    out = run(preloading, "import os, probe_noisy, probe_unset\nprint(os.environ.get('LANG'))\n")
    assert out == "hello from probe_noisy\nNone\n"  # as from a fresh interpreter
    unfit = preloading.describe()["preload"]["unfit"]  # type: ignore[index]
    assert "printed at import" in unfit["probe_noisy"]
    assert "LANG" in unfit["probe_unset"]


def test_variables_a_preloaded_import_sets_are_set_in_every_run(preloading: LocalSandbox) -> None:
    """As after the import in a fresh interpreter (scikit-learn sets two at import)."""
    assert preloading.preload_report()["environment"] == {"PROBE_ENV": "set at import"}
    show = "import os\nprint(os.environ.get('PROBE_ENV'))\n"
    assert run(preloading, show) == "set at import\n"
    result = preloading.run({"main.py": show}, ["python3", "main.py"], env={"PROBE_ENV": "the run's"})
    assert result.stdout == "the run's\n"  # the run's own environment wins


def test_a_module_that_cannot_be_preloaded_is_reported_not_fatal(preloading: LocalSandbox) -> None:
    failed = preloading.describe()["preload"]["failed"]  # type: ignore[index]
    assert set(failed) == {"probe_broken", "probe_missing_module"}
    assert "probe_broken cannot be imported" in failed["probe_broken"]
    result = preloading.run({"main.py": "import probe_broken\n"}, ["python3", "main.py"])
    assert result.returncode == 1 and "probe_broken cannot be imported" in result.stderr


@pytest.fixture(scope="module")
def numpy_preloaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSandbox]:
    root = tmp_path_factory.mktemp("numpy")
    config = LocalSandboxConfig(
        workers=1, work_root=str(root), packages_dir=str(root / "packages"), preload=["numpy", "numpy.random"]
    )  # numpy 2 imports numpy.random lazily
    with LocalSandbox(config) as sandbox:
        yield sandbox


def test_numpy_is_preloaded_and_its_thread_pools_work_in_runs(numpy_preloaded: LocalSandbox) -> None:
    """BLAS with its pool sized at import: a matrix product large enough to be split across
    threads completes in the forked run (no pool thread inherited to wait for)."""
    assert numpy_preloaded.describe()["preload"]["loaded"] == ["numpy", "numpy.random"]  # type: ignore[index]
    out = run(
        numpy_preloaded,
        "import sys\npreloaded = 'numpy' in sys.modules\nimport numpy as np\n"
        "a = np.ones((400, 400))\nprint(preloaded, float((a @ a).sum()))\n",
    )
    assert out == f"True {400.0**3}\n"


def test_numpy_global_random_state_is_fresh_in_every_run(numpy_preloaded: LocalSandbox) -> None:
    """numpy seeds its global generator from the OS at import: every run must get its own seed."""
    draws = {
        run(numpy_preloaded, "import sys, numpy\nassert 'numpy.random' in sys.modules\nprint(numpy.random.random())\n")
        for _ in range(3)
    }
    assert len(draws) == 3


def test_a_run_child_forks_with_its_own_numpy_state(numpy_preloaded: LocalSandbox) -> None:
    """Only runs are reseeded: a process a run forks inherits the run's state, as it would
    from a fresh interpreter."""
    source = (
        "import os, numpy\nnumpy.random.seed(7)\nr, w = os.pipe()\n"
        "if os.fork() == 0:\n    os.write(w, repr(numpy.random.random()).encode())\n    os._exit(0)\n"
        "os.wait()\nprint(os.read(r, 100).decode() == repr(numpy.random.random()))\n"
    )
    assert run(numpy_preloaded, source) == "True\n"


def test_warm_workers_import_coverage_ahead_of_runs(sandbox: LocalSandbox) -> None:
    """The input search and the coverage measurement import coverage.py on every run: a
    warm worker has imported it already, and a run's tracing starts from a fresh state."""
    source = (
        "import sys\nwas = 'coverage' in sys.modules\nimport coverage\n"
        "cov = coverage.Coverage(branch=True, data_file=None)\ncov.start()\nx = [i for i in range(3)]\ncov.stop()\n"
        "print(was, len(coverage.collector.Collector._collectors))\n"
    )
    assert run(sandbox, source) == "True 0\n"
    assert run(sandbox, source) == "True 0\n"


def test_a_cold_sandbox_preloads_nothing(tmp_path: Path) -> None:
    config = LocalSandboxConfig(warm=False, work_root=str(tmp_path), preload=["numpy"])
    with LocalSandbox(config) as sandbox:
        preload = sandbox.describe()["preload"]
        assert run(sandbox, "import sys\nprint('numpy' in sys.modules)\n") == "False\n"
    assert preload == {"requested": [], "loaded": [], "failed": {}, "unfit": {}, "environment": {}}


def test_an_environment_preloads_what_the_tasks_import(tmp_path: Path) -> None:
    definition = tmp_path / "myenv"
    definition.mkdir()
    (definition / "requirements.txt").write_text("numpy\ntorch\n", encoding="utf-8")
    (definition / "preload.txt").write_text("# slow imports\nnumpy   # 0.3 s\n\ntorch\ntorch.nn\n", encoding="utf-8")
    assert env_preload(str(definition)) == ["numpy", "torch", "torch.nn"]
    assert preload_for(str(definition), ["torch", "requests"]) == ["torch", "torch.nn"]
    assert preload_for(str(tmp_path / "no-such-env"), ["torch"]) == []


def test_a_module_is_preloaded_for_the_packages_named_after_if(tmp_path: Path) -> None:
    definition = tmp_path / "myenv"
    definition.mkdir()
    (definition / "requirements.txt").write_text("liteswarm\n", encoding="utf-8")
    (definition / "preload.txt").write_text("numpy\nlitellm if liteswarm crewai  # heavy\n", encoding="utf-8")
    assert env_preload(str(definition)) == ["numpy", "litellm"]
    assert preload_for(str(definition), ["liteswarm"]) == ["litellm"]
    assert preload_for(str(definition), ["crewai", "numpy"]) == ["numpy", "litellm"]
    assert preload_for(str(definition), ["litellm"]) == []  # only for the packages named
    (definition / "preload.txt").write_text("numpy\nlitellm liteswarm\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"preload.txt:2: expected \[apart\] MODULE or \[apart\] MODULE if PACKAGE"):
        preload_for(str(definition), ["numpy"])


def test_an_environment_is_installed_again_only_when_its_requirements_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gym_repost.sandbox import environments

    commands: list[list[str]] = []

    def fake_run(command: list[str], check: bool = False) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        if command[1:3] == ["-m", "venv"]:
            (Path(command[3]) / "bin").mkdir(parents=True)
            (Path(command[3]) / "bin" / "python").write_text("", encoding="utf-8")
        failing = "broken" in Path(command[-1]).read_text(encoding="utf-8") if command[-2:-1] == ["-r"] else False
        return subprocess.CompletedProcess(command, 1 if failing else 0)

    monkeypatch.setattr(environments.subprocess, "run", fake_run)
    definition, venv = tmp_path / "myenv", tmp_path / "venv"
    definition.mkdir()
    (definition / "requirements.txt").write_text("numpy\n", encoding="utf-8")
    python = environments.install_env(definition, venv)
    assert python == venv / "bin" / "python" and [c[1:3] for c in commands] == [["-m", "venv"], ["-m", "pip"]]
    environments.install_env(definition, venv)
    assert len(commands) == 2  # unchanged requirements: pip is not run again
    environments.install_env(definition, venv, force=True)
    assert len(commands) == 3 and commands[-1][1:3] == ["-m", "pip"]
    (definition / "requirements.txt").write_text("numpy\nbroken-package\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="installing .* failed at"):
        environments.install_env(definition, venv)
    (definition / "requirements.txt").write_text("numpy\n", encoding="utf-8")
    environments.install_env(definition, venv)
    assert len(commands) == 5  # a failed install leaves no record: the next one runs pip


def test_two_installs_of_one_environment_at_once_run_pip_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes (here threads, each with its own lock file description) installing the
    same environment: the second waits for the first and finds it installed. Two pips in one
    site-packages broke each other in CI (two test workers installing envs/repost-eval)."""
    from gym_repost.sandbox import environments

    definition, venv = tmp_path / "myenv", tmp_path / "envs" / "myenv"
    definition.mkdir()
    (definition / "requirements.txt").write_text("numpy\n", encoding="utf-8")
    commands: list[list[str]] = []
    second: list[threading.Thread] = []
    second_finished_during_pip: list[bool] = []

    def fake_run(command: list[str], check: bool = False) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        if command[1:3] == ["-m", "venv"]:
            (Path(command[3]) / "bin").mkdir(parents=True)
            (Path(command[3]) / "bin" / "python").write_text("", encoding="utf-8")
        elif not second:  # the first pip: a second install starts while it runs
            thread = threading.Thread(target=environments.install_env, args=(definition,))
            second.append(thread)
            thread.start()
            thread.join(0.5)
            second_finished_during_pip.append(not thread.is_alive())
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(environments.subprocess, "run", fake_run)
    monkeypatch.setenv("GYM_REPOST_HOME", str(tmp_path))
    assert environments.install_env(definition) == venv / "bin" / "python"
    second[0].join(30)
    assert second_finished_during_pip == [False]  # it waited for the first install
    assert [c[1:3] for c in commands] == [["-m", "venv"], ["-m", "pip"]]  # and found it done
