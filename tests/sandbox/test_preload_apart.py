"""Modules preloaded apart: a warm worker of their own serves only the runs of the tasks that
import them (``LocalSandboxConfig.preload_apart``, ``Sandbox.for_imports``)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from gym_repost.cli.common import backend_options, sandbox_options
from gym_repost.errors import ConfigError, SandboxError
from gym_repost.harness import run_function_tests
from gym_repost.sandbox import local
from gym_repost.sandbox.config import LocalSandboxConfig
from gym_repost.sandbox.environments import env_preload, preload_apart_for, preload_for
from gym_repost.sandbox.local import LocalSandbox
from gym_repost.task import FunctionTask
from tests.sandbox.conftest import probe_environment

PROBES = {
    # A heavy module: it says so at import, on both streams, as tensorflow does on stderr.
    "probe_heavy.py": (
        "import os, sys\nIMPORTED_IN = os.getpid()\nITEMS = []\n"
        "print('probe_heavy on stdout')\nsys.stderr.write('probe_heavy on stderr\\n')\n"
    ),
    "probe_other.py": "import os\nIMPORTED_IN = os.getpid()\n",
    "probe_shared.py": "import os\nIMPORTED_IN = os.getpid()\n",
    "probe_threads.py": (
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    ),
    "probe_broken.py": "raise RuntimeError('probe_broken cannot be imported')\n",
    "probe_slow.py": "import time\ntime.sleep(5.0)\n",  # longer than the run's timeout and grace together
}

SHOW = (
    "import os, sys\nfrom importlib import import_module\n"
    "for name in sys.argv[1:]:\n"
    "    was = name in sys.modules\n"
    "    module = import_module(name)\n"
    "    print(name, was, module.IMPORTED_IN != os.getpid())\n"
)


@pytest.fixture(scope="module")
def probe_env() -> Iterator[str]:
    """A virtual environment holding the probe modules (readable by the sandbox's user)."""
    with probe_environment(PROBES) as python:
        yield python


def _sandbox(python: str, root: Path, **settings: object) -> LocalSandbox:
    config = {"python": python, "workers": 1, "work_root": str(root), "packages_dir": str(root / "packages")}
    return LocalSandbox(LocalSandboxConfig(**{**config, **settings}))  # type: ignore[arg-type]


def _show(sandbox: object, *modules: str) -> tuple[str, str]:
    result = sandbox.run({"main.py": SHOW}, ["python3", "main.py", *modules], timeout=60.0)  # type: ignore[attr-defined]
    assert result.ok, result.stderr
    return result.stdout, result.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_worker_of_its_own_serves_the_runs_that_import_it(probe_env: str, tmp_path: Path) -> None:
    sandbox = _sandbox(
        probe_env, tmp_path, preload=["probe_shared"], preload_apart={"heavypkg": ["probe_heavy"], "otherpkg": ["x"]}
    )
    with sandbox:
        assert sandbox.for_imports(["requests", "probe_shared"]) is sandbox  # nothing apart
        # the other workers do not have it
        assert _show(sandbox, "probe_shared", "probe_heavy")[0] == (
            "probe_shared True True\nprobe_heavy on stdout\nprobe_heavy False False\n"
        )
        assert len(sandbox.worker_pids()) == 1
        apart = sandbox.for_imports(["probe_shared", "heavypkg"])
        assert apart is not sandbox and apart.describe() == sandbox.describe()
        first, errors = _show(apart, "probe_heavy", "probe_shared")
        # preloaded there with the modules of `preload` the task imports; what the import
        # printed is printed again first, on its own stream, as a fresh import would print it
        assert first == "probe_heavy on stdout\nprobe_heavy True True\nprobe_shared True True\n"
        assert errors == "probe_heavy on stderr\n"
        pids = sandbox.worker_pids()
        assert len(pids) == 2
        mutate = "import probe_heavy\nprobe_heavy.ITEMS.append(1)\nprint(len(probe_heavy.ITEMS))\n"
        for _ in range(2):  # the same worker, and a fresh module state in every run
            assert apart.run({"main.py": mutate}, ["python3", "main.py"]).stdout.endswith("\n1\n")
        assert sandbox.worker_pids() == pids
        # on a clock ahead (a reference's second and third runs): that worker still
        ahead = sandbox.clock_ahead(86400.0)
        assert ahead is not None
        shifted = ahead.for_imports(["probe_shared", "heavypkg"])
        stamp = "import time\n" + SHOW + "print(int(time.time() - %d) // 3600)\n" % int(time.time())
        result = shifted.run({"main.py": stamp}, ["python3", "main.py", "probe_heavy"], timeout=60.0)
        assert result.stdout == "probe_heavy on stdout\nprobe_heavy True True\n24\n", result
        assert sandbox.worker_pids() == pids
        assert sandbox.describe()["preload"]["apart"] == {  # type: ignore[index]
            "requested": {"heavypkg": ["probe_heavy"], "otherpkg": ["x"]},
            "dropped": {},
        }
    assert sandbox.worker_pids() == [] and not any(_alive(pid) for pid in pids)


TAMPER = """
import json, os, signal, sys
import probe_heavy
done = []
probe_heavy.ITEMS.append("planted")
probe_heavy.IMPORTED_IN = os.getpid()
try:
    with open(probe_heavy.__file__, "a") as handle:
        handle.write("ITEMS.append('planted on disk')\\n")
    done.append("rewrote the module's file")
except OSError:
    pass
try:
    with open("/proc/1/mem", "r+b") as memory:
        memory.write(b"x")
    done.append("wrote into the worker's memory")
except OSError:
    pass
try:
    os.kill(1, signal.SIGKILL)
    done.append("signalled the worker")
except OSError:
    pass
print(json.dumps(done))
"""


def test_a_run_cannot_change_what_the_next_runs_of_its_worker_of_its_own_see(probe_env: str, tmp_path: Path) -> None:
    """The attack: code under test in a run of the worker that preloads a task's heavy
    module plants state in the module, rewrites its file, writes into the worker's memory
    and signals it. The next run of that task finds the module as the worker's import left
    it, the same import output printed, and the same worker."""
    with _sandbox(probe_env, tmp_path, preload_apart={"heavypkg": ["probe_heavy"]}) as sandbox:
        view = sandbox.for_imports(["heavypkg"])
        before = _show(view, "probe_heavy")
        pids = sandbox.worker_pids()
        attack = view.run({"main.py": TAMPER}, ["python3", "main.py"], timeout=60.0)
        assert attack.ok and attack.stdout.splitlines()[-1] == "[]", (attack.stdout, attack.stderr)
        check = "import os, probe_heavy\nprint(probe_heavy.ITEMS, probe_heavy.IMPORTED_IN != os.getpid())\n"
        after = view.run({"main.py": check}, ["python3", "main.py"], timeout=60.0)
        assert after.stdout == "probe_heavy on stdout\n[] True\n" and after.stderr == "probe_heavy on stderr\n"
        assert _show(view, "probe_heavy") == before and sandbox.worker_pids() == pids


def test_a_module_unfit_or_failing_even_apart_is_dropped_and_its_runs_go_to_the_others(
    probe_env: str, tmp_path: Path
) -> None:
    apart = {"threadpkg": ["probe_threads"], "brokenpkg": ["probe_broken"]}
    with _sandbox(probe_env, tmp_path, preload_apart=apart) as sandbox:
        assert _show(sandbox.for_imports(["threadpkg"]), "probe_other")[0] == "probe_other False False\n"
        assert _show(sandbox.for_imports(["brokenpkg"]), "probe_other")[0] == "probe_other False False\n"
        dropped = sandbox.describe()["preload"]["apart"]["dropped"]  # type: ignore[index]
        assert "started threads" in dropped["probe_threads"]
        assert "failed to import" in dropped["probe_broken"] and "cannot be imported" in dropped["probe_broken"]
        assert sandbox.for_imports(["threadpkg", "brokenpkg"]) is sandbox
        assert len(sandbox.worker_pids()) == 1


def test_workers_apart_are_as_many_as_workers_at_most(probe_env: str, tmp_path: Path) -> None:
    """The least recently used one that no run is using is stopped to make room."""
    with _sandbox(probe_env, tmp_path, preload_apart={"a": ["probe_heavy"], "b": ["probe_other"]}) as sandbox:
        _show(sandbox.for_imports(["a"]), "probe_heavy")
        first = set(sandbox.worker_pids())
        assert _show(sandbox.for_imports(["b"]), "probe_other")[0] == "probe_other True True\n"
        second = set(sandbox.worker_pids())
        assert len(first) == len(second) == 2 and len(first & second) == 1  # the main worker stays
        stopped = (first - second).pop()
        assert not _alive(stopped)
        assert _show(sandbox.for_imports(["a"]), "probe_heavy")[0].endswith("probe_heavy True True\n")


def test_a_run_that_finds_its_worker_busy_goes_to_the_others(probe_env: str, tmp_path: Path) -> None:
    """With one worker: rather than wait while the other workers may be idle (it imports the
    module itself)."""
    with _sandbox(probe_env, tmp_path, preload_apart={"heavypkg": ["probe_heavy"]}) as sandbox:
        view = sandbox.for_imports(["heavypkg"])
        assert _show(view, "probe_heavy")[0].endswith("probe_heavy True True\n")
        chosen = sandbox._choose_apart(("probe_heavy",))
        assert chosen is not None
        held = sandbox._checkout_apart(chosen)  # as a run in another thread would hold it
        assert held is not None
        assert _show(view, "probe_heavy")[0] == "probe_heavy on stdout\nprobe_heavy False False\n"
        chosen.pool.checkin(held, sandbox._discard)
        assert _show(view, "probe_heavy")[0].endswith("probe_heavy True True\n")


def test_runs_of_one_task_at_once_get_workers_of_their_own_as_many_as_workers_in_all(
    probe_env: str, tmp_path: Path
) -> None:
    apart = {"a": ["probe_heavy"], "b": ["probe_other"]}
    with _sandbox(probe_env, tmp_path, workers=2, preload_apart=apart) as sandbox:
        view = sandbox.for_imports(["a"])
        assert _show(view, "probe_heavy")[0].endswith("probe_heavy True True\n")
        chosen = sandbox._choose_apart(("probe_heavy",))
        assert chosen is not None
        held = sandbox._checkout_apart(chosen)  # the first one, busy
        assert held is not None
        assert _show(view, "probe_heavy")[0].endswith("probe_heavy True True\n")  # a second one
        assert len(chosen.pool.members()) == 2
        sandbox._checkin_apart(chosen, held)
        with sandbox._apart_lock:
            chosen.users -= 1
        assert len(sandbox.worker_pids()) == 4  # two others, two of "a"
        # "b" gets one: "a"'s, idle, are stopped so that two at most are kept
        assert _show(sandbox.for_imports(["b"]), "probe_other")[0] == "probe_other True True\n"
        assert len(sandbox.worker_pids()) == 3 and chosen.pool.members() == []


def test_a_run_waits_its_own_time_once_a_worker_has_it(
    probe_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host waits for a reply from when the worker has the request: a worker of its own
    that takes longer to start than the reply's grace does not fail the first run."""
    monkeypatch.setattr(local, "REPLY_GRACE", 1.0)
    with _sandbox(probe_env, tmp_path, preload_apart={"slowpkg": ["probe_slow"]}) as sandbox:
        result = sandbox.for_imports(["slowpkg"]).run({"main.py": "print('ok')\n"}, ["python3", "main.py"], timeout=3.0)
    assert result.ok and result.stdout == "ok\n", result


def test_the_harness_runs_a_task_in_the_worker_of_the_packages_it_imports(
    probe_env: str, tmp_path: Path, function_task: FunctionTask
) -> None:
    """Same verdicts as the other workers give; the task's worker of its own ran them."""
    task = function_task.model_copy(
        update={"metadata": function_task.metadata.model_copy(update={"external_packages": ["heavypkg"]})}
    )
    wrong = "def score(*args, **kwargs):\n    return None\n"
    with _sandbox(probe_env, tmp_path, preload_apart={"heavypkg": ["probe_heavy"]}) as sandbox:
        apart = [run_function_tests(sandbox, task, code) for code in (task.ground_truth, wrong)]
        # its workers were started for it: one for the reference's runs, one for the candidate's
        assert len(sandbox.worker_pids()) == 3
    with _sandbox(probe_env, tmp_path / "plain") as plain:
        others = [run_function_tests(plain, task, code) for code in (task.ground_truth, wrong)]
        assert len(plain.worker_pids()) == 2  # a worker of the candidates, one of the ground truths
    assert [r.passed for r in apart] == [r.passed for r in others] == [True, False]
    assert apart[1].status == others[1].status and apart[1].message == others[1].message


def test_an_environment_preloads_heavy_modules_apart(tmp_path: Path) -> None:
    definition = tmp_path / "myenv"
    definition.mkdir()
    (definition / "requirements.txt").write_text("numpy\n", encoding="utf-8")
    (definition / "preload.txt").write_text(
        "numpy\napart tensorflow  # 6.7 s\napart litellm if liteswarm crewai\n", encoding="utf-8"
    )
    assert env_preload(str(definition)) == ["numpy"]
    assert preload_for(str(definition), ["numpy", "tensorflow", "liteswarm"]) == ["numpy"]
    assert preload_apart_for(str(definition), ["numpy", "tensorflow", "liteswarm"]) == {
        "liteswarm": ["litellm"],
        "tensorflow": ["tensorflow"],
    }
    assert preload_apart_for(str(definition), ["numpy"]) == {}
    tasks = [SimpleNamespace(metadata=SimpleNamespace(external_packages=p)) for p in (["numpy"], ["crewai"])]
    options = sandbox_options(2, None, str(definition), None, tasks)
    assert options["preload"] == ["numpy"] and options["preload_apart"] == {"crewai": ["litellm"]}
    assert "preload_apart" not in backend_options("docker", options)
    (definition / "preload.txt").write_text("numpy\napart\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"preload.txt:2: expected \[apart\] MODULE"):
        preload_for(str(definition), ["numpy"])


def test_a_docker_or_plain_sandbox_is_its_own_for_any_imports() -> None:
    from gym_repost.sandbox.base import Sandbox

    class Plain(Sandbox):
        def start(self) -> None: ...

        def close(self) -> None: ...

        def run(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            raise SandboxError("unused")

    plain = Plain()
    assert plain.for_imports(["tensorflow"]) is plain
