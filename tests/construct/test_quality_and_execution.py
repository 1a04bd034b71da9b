"""Stages 6 and 7: installing what a script lacks, and the quality checks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_repost.construct.execution import PackageInstaller, missing_module, read_constraints, run_with_installs
from gym_repost.construct.quality import QualityThresholds, check_quality, sanity_checks
from gym_repost.errors import BuildError
from gym_repost.sandbox import Sandbox, get_sandbox
from gym_repost.sandbox.base import CONSTRAINTS_FILE, install_files, pip_install_command
from gym_repost.task import FunctionTask
from tests.conftest import build_task

ORIGINAL = "def score(values, cap=100):"


def test_missing_module_reads_the_error_message() -> None:
    assert missing_module("ModuleNotFoundError: No module named 'yaml.composer'") == "yaml"
    assert missing_module("all good") is None


def test_thresholds_follow_the_split() -> None:
    assert QualityThresholds.for_split("train").min_branch_coverage == 0.8
    assert QualityThresholds.for_split("eval", min_kill_rate=0.9).min_branch_coverage == 1.0


def test_sanity_checks_pass_on_a_good_task(function_task: FunctionTask) -> None:
    checks = sanity_checks(function_task, function_task.target.source)
    assert checks == {name: True for name in checks}


def _variant(task: FunctionTask, script: str) -> FunctionTask:
    return build_task(
        script,
        "score",
        task.repository.files | {"tiny/score.py": task.repository.files["tiny/score.py"]},
        "tiny/score.py",
    )


@pytest.mark.parametrize(
    ("edit", "failed"),
    [
        (
            lambda s: s.replace(
                'if __name__ == "__main__":\n    test_score()',
                'if __name__ == "__main__":\n    try:\n        test_score()\n    except Exception:\n        pass',
            ),
            "main calls the test outside try",
        ),
        (lambda s: s.replace("            continue\n", "            pass\n", 1), "target unchanged (AST)"),
    ],
)
def test_sanity_checks_catch_what_repost_checks(function_task: FunctionTask, edit, failed: str) -> None:
    task = _variant(function_task, edit(function_task.evaluation.script))
    checks = sanity_checks(task, function_task.target.source)
    assert not checks[failed] and sum(not ok for ok in checks.values()) == 1


def test_quality_keeps_a_strong_task_and_measures_it(function_task: FunctionTask, sandbox: Sandbox) -> None:
    report = check_quality(
        sandbox,
        function_task,
        function_task.target.source,
        QualityThresholds(min_branch_coverage=1.0, min_kill_rate=0.5, mutants=8),
    )
    assert report.passed, (report.reason, report.detail)
    assert report.branch_coverage == 1.0 and report.kill_rate is not None and report.kill_rate >= 0.5


def test_quality_rejects_weak_tests(function_task: FunctionTask, sandbox: Sandbox) -> None:
    weak = function_task.evaluation.script.replace(
        "        assert score(values, cap) == score_new_implementation(values, cap)\n", "        pass\n"
    )
    weak = weak.replace(
        "assert score([1]) == score_new_implementation([1])", "assert score([]) == score_new_implementation([])"
    )
    weak = weak.replace(
        "assert score([9, 9]) == score_new_implementation([9, 9])",
        "assert score([]) == score_new_implementation([]) or True\n    assert True",
    )
    task = _variant(function_task, weak)
    report = check_quality(sandbox, task, function_task.target.source, QualityThresholds(mutants=8))
    assert not report.passed
    weak_reasons = ("tests accept a do-nothing candidate", "tests accept a trivial candidate")
    assert report.reason in (*weak_reasons, "branch coverage below threshold")


@pytest.mark.network
def test_run_with_installs_installs_a_missing_distribution(tmp_path: Path) -> None:
    script = textwrap.dedent("""\
        import inflection


        def shout(word):
            return inflection.underscore(word).upper()


        def test_shout():
            for word in ("DeviceType", "IOError", "x"):
                assert shout(word) == shout_new_implementation(word)


        if __name__ == "__main__":
            test_shout()
        """)
    task = build_task(script, "shout", {"m.py": script.split("\n\n\ndef test_shout")[0]}, "m.py")
    # Its own empty package directory: the session's shared one may hold inflection already.
    with get_sandbox("local", packages_dir=str(tmp_path / "packages")) as sandbox:
        installer = PackageInstaller(sandbox, refuse=frozenset({"m"}))
        outcome = run_with_installs(sandbox, task, installer)
        assert outcome.passed, outcome.report.to_text()
        assert installer.installed == {"inflection": "inflection"}
        assert outcome.installs == ["installed inflection"]
        again = run_with_installs(sandbox, task, installer)
        assert again.passed and again.installs == []


def test_the_repositorys_own_package_is_never_installed(sandbox: Sandbox) -> None:
    installer = PackageInstaller(sandbox, refuse=frozenset({"shopkit"}))
    ok, what = installer.install_for("shopkit")
    assert not ok and "repository's own package" in what


def test_a_constraints_file_is_read_as_pins_and_a_bad_line_says_where(tmp_path: Path) -> None:
    good = tmp_path / "constraints.txt"
    good.write_text("# test dependencies\nsix==1.16.0\n\nhypothesis==6.170.17  # its examples change\nsix==1.16.0\n")
    assert read_constraints(good) == ("hypothesis==6.170.17", "six==1.16.0")
    bad = tmp_path / "bad.txt"
    bad.write_text("six==1.16.0\nhypothesis>=6\n")
    with pytest.raises(BuildError, match=r"bad.txt:2: 'hypothesis>=6' is not a pin \(NAME==VERSION\)"):
        read_constraints(bad)
    with pytest.raises(BuildError, match="cannot read the constraints file"):
        read_constraints(tmp_path / "missing.txt")
    assert pip_install_command(["six"], ("six==1.16.0",))[-3:] == ["-c", CONSTRAINTS_FILE, "six"]
    assert "-c" not in pip_install_command(["six"])
    assert install_files(("six==1.16.0",)) == {CONSTRAINTS_FILE: "six==1.16.0\n"} and install_files(()) == {}
    with pytest.raises(ValueError, match="constraint lines"):
        install_files(("six==1.16.0\n--index-url http://elsewhere",))


@pytest.mark.network
def test_installs_are_held_to_the_constraints(tmp_path: Path) -> None:
    """A corpus rebuilt later installs its tests' dependencies at the versions of its first
    build, not at PyPI's newest (six 1.17.0 is newer than the pin)."""
    with get_sandbox("local", packages_dir=str(tmp_path / "packages")) as sandbox:
        own = sandbox.package_set("b-pins")
        installer = PackageInstaller(own, constraints=("six==1.16.0",))
        assert installer.provide("six")
        probe = own.run({}, ["python3", "-c", "import six; print(six.__version__)"])
        assert probe.stdout == "1.16.0\n", probe
        assert installer.pins() == ["six==1.16.0"]


def test_what_pip_installed_for_a_build_is_recorded_with_versions_and_added_up_over_a_corpus() -> None:
    """A build's package set is removed at its end: the versions pip installed into it are
    recorded from pip's own report, per repository and for the corpus (the constraints of the
    next build)."""
    from gym_repost.construct.corpus import CorpusResult, RepositoryBuild, merge_units
    from gym_repost.construct.execution import pip_installed
    from gym_repost.sandbox.base import RunResult

    said = "Collecting hypothesis\nSuccessfully installed hypothesis-6.170.17 pytest-lazy-fixtures-1.4.1 "
    said += "sortedcontainers-2.4.0\n"
    assert pip_installed(said) == {
        "hypothesis": "6.170.17",
        "pytest-lazy-fixtures": "1.4.1",
        "sortedcontainers": "2.4.0",
    }
    assert pip_installed("ERROR: No matching distribution\n") == {}

    class Pip:
        name = "fake"

        def install(self, requirements, timeout=900.0, constraints=()):  # type: ignore[no-untyped-def]
            return RunResult(returncode=0, stdout=said, stderr="")

    installer = PackageInstaller(Pip())  # type: ignore[arg-type]
    assert installer.provide("hypothesis")
    assert installer.pins() == ["hypothesis==6.170.17", "pytest-lazy-fixtures==1.4.1", "sortedcontainers==2.4.0"]

    first = RepositoryBuild("pypi:a==1", name="a", statistics={"installed": ["six==1.17.0", "Zeta==2"]})
    second = RepositoryBuild("pypi:b==1", name="b", statistics={"installed": ["six==1.17.0", "attrs==26.1.0"]})
    corpus = CorpusResult([first, second], duplicates={}, split={})
    assert corpus.installed() == ["attrs==26.1.0", "six==1.17.0", "Zeta==2"]
    chunks = [
        RepositoryBuild("pypi:a==1", name="a", statistics={"installed": ["six==1.17.0"]}, chunk=(0, 2)),
        RepositoryBuild("pypi:a==1", name="a", statistics={"installed": ["attrs==26.1.0"]}, chunk=(1, 2)),
    ]
    assert merge_units(chunks).statistics["installed"] == ["attrs==26.1.0", "six==1.17.0"]
