"""A test-file build sees only what it installs: a pair's ground truth runs in a package set
of its own, what it cannot import is installed there (and required by the task), and the
task's requirements are installed where it is evaluated later."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_repost.construct.ingest import ingest
from gym_repost.construct.testfile import TestFileBuildSettings, build_testfile_tasks
from gym_repost.harness.testfile import run_test_file
from gym_repost.sandbox import get_sandbox

REPO = {
    "LICENSE": "MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy\n",
    "pyproject.toml": '[project]\nname = "tiny"\nversion = "1.0"\nlicense = {text = "MIT"}\n',
    "src/tiny/__init__.py": "",
    "src/tiny/calc.py": textwrap.dedent("""\
        from typing import TYPE_CHECKING

        import whatever

        if TYPE_CHECKING:
            from _typeshed import SupportsRead


        def twice(x):
            if x < 0:
                raise ValueError("negative")
            return 2 * x
        """),
    "tests/test_calc.py": textwrap.dedent("""\
        import pytest

        from tiny.calc import twice


        def test_twice():
            assert twice(2) == 4
            assert twice(0) == 0


        def test_negative():
            with pytest.raises(ValueError):
                twice(-1)
        """),
}


@pytest.mark.network
def test_a_test_file_build_keeps_the_same_tasks_whatever_other_builds_installed(tmp_path: Path) -> None:
    """Before, a pair's ground truth ran on the shared package cache: prettytable 3.16.0 kept
    0 of 9 test files on an empty cache and 7 where another build had installed wcwidth, and
    its tasks required ``-typeshed`` (a type checker's import)."""
    for path, text in REPO.items():
        (tmp_path / "tiny" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tiny" / path).write_text(text)
    repo = ingest(tmp_path / "tiny")
    packages = tmp_path / "packages"
    settings = TestFileBuildSettings(max_mutants=4)
    with get_sandbox("local", packages_dir=str(packages), workers=1, preload=["pytest", "coverage"]) as sandbox:
        tasks, drops = build_testfile_tasks(repo, sandbox, settings=settings, workers=1)
        assert [t.evaluation.test_path for t in tasks] == ["tests/test_calc.py"] and drops == []
        task = tasks[0]
        assert task.evaluation.requirements == ["whatever"] == task.metadata.external_packages
        assert task.reference.pass_rate == 1.0 and not task.metadata.notes
        assert not (packages / "whatever.py").exists()  # installed into the pair's own set, now removed
        assert not any((packages / ".sets").iterdir())

        # another build left a `whatever` in the cache that breaks on import: this build never sees it
        (packages / "whatever.py").write_text("raise ImportError('a broken whatever from another build')\n")
        again, _ = build_testfile_tasks(repo, sandbox, settings=settings, workers=1)
        assert [t.id for t in again] == [task.id]

        # evaluated where the build's set is gone: the task's requirement is installed for it
        (packages / "whatever.py").unlink()
        run = run_test_file(sandbox, task, task.ground_truth, mutate=False)
        assert run.status == "completed" and [t.outcome for t in run.tests] == ["passed", "passed"], run.message
        assert (packages / "whatever.py").is_file()


@pytest.mark.network
def test_a_ground_truth_whose_conftest_fails_to_load_is_dropped_with_the_cause(tmp_path: Path) -> None:
    files = {
        **REPO,
        "src/tiny/calc.py": "def twice(x):\n    return 2 * x\n",
        "tests/conftest.py": "import gym_repost_no_such_distribution\n",
    }
    for path, text in files.items():
        (tmp_path / "tiny" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tiny" / path).write_text(text)
    packages = tmp_path / "packages"
    with get_sandbox("local", packages_dir=str(packages), workers=1, preload=["pytest", "coverage"]) as sandbox:
        tasks, drops = build_testfile_tasks(ingest(tmp_path / "tiny"), sandbox, workers=1)
    assert tasks == [] and [(d.reason, d.file) for d in drops] == [("ground truth does not run", "tests/test_calc.py")]
    assert "conftest" in drops[0].detail and "gym_repost_no_such_distribution" in drops[0].detail


@pytest.mark.network
def test_a_candidate_that_prints_missing_modules_gets_no_other_install_and_no_endless_reruns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any run of a test-file task may install a requirement it cannot import; a candidate
    decides what its run prints. Naming a module the task does not require installs
    nothing, and naming a required one again and again gets it one install and one run
    more."""
    for path, text in REPO.items():
        (tmp_path / "tiny" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tiny" / path).write_text(text)
    packages = tmp_path / "packages"
    attack = (
        "from tiny.calc import twice\n\n\ndef test_unnamed():\n"
        "    raise ModuleNotFoundError(\"No module named 'six'\")\n\n\ndef test_named():\n"
        "    raise ModuleNotFoundError(\"No module named 'whatever'\")\n"
    )
    with get_sandbox("local", packages_dir=str(packages), workers=1, preload=["pytest", "coverage"]) as sandbox:
        tasks, _ = build_testfile_tasks(
            ingest(tmp_path / "tiny"), sandbox, workers=1, settings=TestFileBuildSettings(max_mutants=2)
        )
        installs: list[list[str]] = []
        runs: list[object] = []
        real_install, real_run = sandbox.install, sandbox.run
        monkeypatch.setattr(
            sandbox, "install", lambda reqs, *a, **k: installs.append(list(reqs)) or real_install(reqs, *a, **k)
        )
        monkeypatch.setattr(sandbox, "run", lambda *a, **k: runs.append(a) or real_run(*a, **k))
        run = run_test_file(sandbox, tasks[0], attack, mutate=False)
    assert installs == [["whatever"]]  # the focal module needs it: installed once, for this task
    assert len(runs) == 2 and not (packages / "six.py").exists()
    assert [t.outcome for t in run.tests] == ["error", "error"]


@pytest.mark.parametrize("where", ["module", "test", "guarded"])
def test_a_module_the_test_file_importorskips_is_installed(where: str, tmp_path: Path) -> None:
    """A test file that ``pytest.importorskip``s a module its set lacks ran no test (the
    module skipped) or fewer: it is installed like one an import needs. A module-level skip
    is in the run's output, so a dropped pair says why. So is a module imported in a
    ``try: ... except ImportError`` whose name the file then uses at module level (mccabe's
    ``settings``): its ``NameError`` names no module; and a later evaluation on an empty
    package cache installs it as well."""
    skip = "    pytest.importorskip('{0}')\n" if where == "test" else ""
    top = {
        "module": "pytest.importorskip('{0}')\n",
        "guarded": "try:\n    from {0} import that\nexcept ImportError:\n    pass\nNOTHING = that\n",
    }.get(where, "")
    test = (
        "import pytest\n"
        + top
        + "from tiny.calc import twice\n\n\ndef test_twice():\n"
        + skip
        + "    assert twice(2) == 4\n"
    )
    kept = {}
    for module in ("whatever", "gym_repost_no_such_distribution"):
        files = {
            **REPO,
            "src/tiny/calc.py": "def twice(x):\n    return 2 * x\n",
            "tests/test_calc.py": test.format(module),
        }
        root = tmp_path / module
        for path, text in files.items():
            (root / "tiny" / path).parent.mkdir(parents=True, exist_ok=True)
            (root / "tiny" / path).write_text(text)
        packages = root / "packages"
        with get_sandbox("local", packages_dir=str(packages), workers=1, preload=["pytest", "coverage"]) as sandbox:
            kept[module] = build_testfile_tasks(ingest(root / "tiny"), sandbox, workers=1)
    tasks, drops = kept["whatever"]
    assert [(t.evaluation.requirements, t.reference.tests, t.reference.passed) for t in tasks] == [(["whatever"], 1, 1)]
    if where == "guarded":
        empty = tmp_path / "fresh-packages"
        with get_sandbox("local", packages_dir=str(empty), workers=1, preload=["pytest", "coverage"]) as sandbox:
            run = run_test_file(sandbox, tasks[0], tasks[0].ground_truth, mutate=False)
        assert [t.outcome for t in run.tests] == ["passed"] and (empty / "whatever.py").exists()
    tasks, drops = kept["gym_repost_no_such_distribution"]
    assert tasks == [] and [d.reason for d in drops] == ["ground truth does not run"]
    said = "name 'that' is not defined" if where == "guarded" else "could not import 'gym_repost_no_such_distribution'"
    assert said in drops[0].detail
