"""A task file built on another machine runs here: the requirements its build installed are
installed when its ground truth cannot import them, and nothing else is."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_repost.harness import reference_for, run_function_tests
from gym_repost.harness.requirements import install_named
from gym_repost.sandbox import get_sandbox
from gym_repost.sandbox.base import RunResult
from tests.conftest import build_task

SCRIPT = textwrap.dedent("""\
    import whatever


    def double(x):
        return 2 * x


    def test_double():
        for x in (0, 1, 5):
            assert double(x) == double_new_implementation(x)


    if __name__ == "__main__":
        test_double()
    """)


def _task(requirements: list[str]):  # type: ignore[no-untyped-def]
    task = build_task(SCRIPT, "double", {"m.py": SCRIPT.split("\n\n\ndef test_double")[0]}, "m.py")
    return task.model_copy(update={"evaluation": task.evaluation.model_copy(update={"requirements": requirements})})


@pytest.mark.network
def test_a_task_s_requirement_missing_here_is_installed_before_its_reference(tmp_path: Path) -> None:
    packages = tmp_path / "packages"
    with get_sandbox("local", packages_dir=str(packages), workers=1) as sandbox:
        unnamed = reference_for(sandbox, _task([]))  # whatever is not among its requirements
        assert not unnamed.passed and unnamed.report.exception == "ModuleNotFoundError"
        assert not (packages / "whatever.py").exists()
        task = _task(["whatever"])
        reference = reference_for(sandbox, task)
        assert reference.passed, reference.report.to_text()
        assert (packages / "whatever.py").is_file()
        assert run_function_tests(sandbox, task, task.ground_truth).passed
        assert not run_function_tests(sandbox, task, task.ground_truth.replace("2 * x", "x + x + 1")).passed


@pytest.mark.network
def test_a_reference_made_in_a_build_s_package_set_is_not_reused_where_the_set_is_gone(tmp_path: Path) -> None:
    """A build makes its references in its own package set, which holds what the task needs,
    and removes the set. Evaluated afterwards in the package cache, a correct candidate
    other than the ground truth failed on the import ("called your function 0 times")
    against the build's stored reference."""
    packages = tmp_path / "packages"
    task = _task(["whatever"])
    with get_sandbox("local", packages_dir=str(packages), workers=1) as sandbox:
        own = sandbox.package_set("b-build")
        assert not reference_for(own, task).passed  # a set is filled by its build's installer only
        assert not (packages / ".sets" / "b-build" / "whatever.py").exists()
        (packages / ".sets" / "b-build" / "whatever.py").write_text("")  # what the build installed
        assert reference_for(own, task).passed
        assert own.describe()["package_set"] == "b-build" and "package_set" not in sandbox.describe()
        sandbox.remove_package_set("b-build")
        right = task.ground_truth.replace("2 * x", "x * 2")
        report = run_function_tests(sandbox, task, right)
        assert report.passed, report.to_text()
        assert (packages / "whatever.py").is_file()  # installed for this evaluation


class _Cache:
    """A sandbox's package cache as ``install_named`` sees it: installs are counted."""

    def __init__(self, packages_dir: str) -> None:
        self.packages_dir = packages_dir
        self.installs: list[str] = []

    def describe(self) -> dict[str, object]:
        return {"backend": "local", "packages_dir": self.packages_dir}

    def install(self, requirements: list[str]):  # type: ignore[no-untyped-def]
        self.installs.extend(requirements)
        return RunResult(returncode=0, stdout="", stderr="")


def test_each_evaluation_runs_again_once_for_a_requirement_installed_once(tmp_path: Path) -> None:
    """Two evaluations at once needing wcwidth: the second found it installed by the first
    and ran no second time, failing the oracle of one test-file task in seven (prettytable)."""
    cache = _Cache(str(tmp_path))
    error = "E   ModuleNotFoundError: No module named 'wcwidth'"
    first: set[str] = set()
    second: set[str] = set()
    assert install_named(cache, ["wcwidth"], error, "a", first)  # type: ignore[arg-type]
    assert install_named(cache, ["wcwidth"], error, "b", second)  # type: ignore[arg-type]
    assert cache.installs == ["wcwidth"]
    # a run that still misses it (or prints the message on purpose) is not run again, nor installs
    assert not install_named(cache, ["wcwidth"], error, "a", first)  # type: ignore[arg-type]
    assert not install_named(cache, ["other"], error, "a", set())  # type: ignore[arg-type]
    assert not install_named(cache, [], error, "a", set())  # type: ignore[arg-type]
    assert cache.installs == ["wcwidth"]
