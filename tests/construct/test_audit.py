"""``gym-repost audit``: mutants the repository's own tests reject, submitted to the tasks.

A task whose tests never reach what its target is about (an escape function tested on text
with nothing to escape) rewards known-wrong mutants; one whose tests cover the target's
cases rewards none.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gym_repost.analysis.mutation import AUDIT_OPERATORS, generate_mutants
from gym_repost.construct.audit import audit_tasks, audit_totals
from gym_repost.construct.ingest import ingest
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask, save_tasks
from tests.conftest import build_task

ROOT = Path(__file__).resolve().parents[2]

CORE = textwrap.dedent('''\
    def escape(text):
        """``text`` with ``&``, ``<`` and ``>`` as HTML entities."""
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


    def clamp(x, low, high):
        """``x`` within ``[low, high]``."""
        if x < low:
            return low
        if x > high:
            return high
        return x


    def untested(x):
        """No upstream test runs it."""
        return x * 2
    ''')

UPSTREAM_TESTS = textwrap.dedent("""\
    from esc.core import clamp, escape


    def test_escape():
        assert escape("a<b>&c") == "a&lt;b&gt;&amp;c"
        assert escape("plain") == "plain"


    def test_clamp():
        assert clamp(5, 0, 10) == 5
        assert clamp(-1, 0, 10) == 0
        assert clamp(11, 0, 10) == 10
        assert clamp(10, 0, 10) == 10
        assert clamp(0, 0, 10) == 0
    """)

WEAK_ESCAPE = CORE.split("\n\n\ndef clamp")[0] + textwrap.dedent("""


    def test_escape():
        assert escape("plain") == escape_new_implementation("plain")
        assert escape("more words") == escape_new_implementation("more words")
        assert escape("nothing") == escape_new_implementation("nothing")


    if __name__ == "__main__":
        test_escape()
    """)

CHEAP_AND_EXPENSIVE_TESTS = textwrap.dedent("""\
    from esc.core import clamp


    def test_cheap():
        assert clamp(7, 0, 10) == 7


    def test_expensive():
        assert sum(range(2 * 10**8)) > 0  # seconds of CPU: the run's limit is ten times it
        assert clamp(5, 0, 10) == 5
    """)
"""Two covering tests of ``clamp``: one of a millisecond, one of seconds of CPU."""


STRONG_CLAMP = (
    "def clamp"
    + CORE.split("\n\n\ndef clamp")[1].split("\n\n\ndef untested")[0]
    + textwrap.dedent("""


    def test_clamp():
        for x in range(-3, 14):
            assert clamp(x, 0, 10) == clamp_new_implementation(x, 0, 10)
        assert clamp(5, 5, 5) == clamp_new_implementation(5, 5, 5)
        assert clamp(2.5, 0, 1) == clamp_new_implementation(2.5, 0, 1)


    if __name__ == "__main__":
        test_clamp()
    """)
)

UNTESTED = (
    "def untested"
    + CORE.split("\n\n\ndef untested")[1]
    + textwrap.dedent("""

    def test_untested():
        assert untested(1) == untested_new_implementation(1)
        assert untested(2) == untested_new_implementation(2)
        assert untested(5) == untested_new_implementation(5)


    if __name__ == "__main__":
        test_untested()
    """)
)


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    root = tmp_path / "esc-1.0"
    for path, text in {"esc/__init__.py": "", "esc/core.py": CORE, "tests/test_esc.py": UPSTREAM_TESTS}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


def _tasks() -> list[FunctionTask]:
    files = {"esc/__init__.py": "", "esc/core.py": CORE}
    return [
        build_task(WEAK_ESCAPE, "escape", files, "esc/core.py"),
        build_task(STRONG_CLAMP, "clamp", files, "esc/core.py"),
        build_task(UNTESTED, "untested", files, "esc/core.py"),
    ]


def test_a_weak_task_is_caught_and_a_strong_one_is_not(sandbox: Sandbox, upstream: Path) -> None:
    audits = audit_tasks(sandbox, _tasks(), ingest(upstream, licenses="any"), mutants=40)
    weak, strong, untested = audits
    assert weak.status == strong.status == "audited" and weak.covering_tests == strong.covering_tests == 1
    assert weak.known_wrong and weak.false_accepts, weak
    assert any(m.operator in AUDIT_OPERATORS for m in weak.false_accepts)  # "&" emptied, say
    assert strong.known_wrong and not strong.false_accepts, strong.false_accepts
    assert untested.status == "uncovered" and not untested.mutants
    totals = audit_totals(audits)
    assert totals["false_accepts"] == len(weak.false_accepts)
    assert totals["tasks_rewarding_a_known_wrong_mutant"] == 1 and totals["tasks_with_known_wrong_mutants"] == 2


def test_the_audit_command(upstream: Path, tmp_path: Path) -> None:
    tasks_file = tmp_path / "tasks.jsonl"
    save_tasks(_tasks()[:2], tasks_file)
    out = tmp_path / "audit.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_repost.cli",
            "audit",
            str(tasks_file),
            "--upstream",
            str(upstream),
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "known-wrong mutants rewarded:" in result.stdout
        and "tasks rewarding a known-wrong mutant: 1/2" in result.stdout
    )
    report = json.loads(out.read_text("utf-8"))
    assert report["totals"]["false_accepts"] > 0
    assert report["tasks"][0]["false_accepted_mutants"] and not report["tasks"][1]["false_accepted_mutants"]


def test_the_audit_operators_go_beyond_the_builders() -> None:
    source = CORE.split("\n\n\ndef clamp")[0]
    found = {m.operator: m.replacement for m in generate_mutants(source, operators=AUDIT_OPERATORS)}
    assert found["identity_return"] == "return text" and found["empty_string"] == '""'
    assert not generate_mutants(source, operators=("drop_branch",))  # no if in escape


def test_a_build_drops_the_tasks_its_audit_catches(sandbox: Sandbox, upstream: Path) -> None:
    """``build --max-false-accept``: the pipeline audits what it built against the repository's
    own tests and drops the tasks above the limit, counted among the drops."""
    from gym_repost.construct.execution import PackageInstaller
    from gym_repost.construct.pipeline import BuildResult, BuildSettings, _drop_false_acceptors

    repo = ingest(upstream, licenses="any")
    built = BuildResult(repo=repo, tasks=_tasks()[:2], drops=[], candidates=2, timings={})
    _drop_false_acceptors(built, sandbox, BuildSettings(max_false_accept=0.0), PackageInstaller(sandbox))
    assert [t.target.name for t in built.tasks] == ["clamp"] and built.limits == []
    assert [(d.stage, d.reason, d.qualname) for d in built.drops] == [("audit", "false accepts", "escape")]
    assert built.statistics()["audit"]["false_accepts"] > 0
    # every mutant ran: none was left unrun by a task's CPU budget, and the record says so
    assert [a["not_run"] for a in built.audited.values()] == [0, 0]


def test_a_corpus_build_reports_its_audit_per_repository(sandbox: Sandbox, upstream: Path, tmp_path: Path) -> None:
    """``build LIST --max-false-accept 1``: every task audited, none dropped; the corpus
    statistics carry the known-wrong mutants and false accepts per repository and in total."""
    from gym_repost.construct.corpus import build_corpus, corpus_paths
    from gym_repost.construct.pipeline import BuildSettings
    from gym_repost.executor import LocalExecutor

    output = tmp_path / "out" / "corpus.jsonl"
    output.parent.mkdir()
    settings = BuildSettings(
        max_candidates=5,
        test_executions=200,
        trace=False,
        licenses="any",
        max_false_accept=1.0,
        keep=("single-statement",),
    )
    result = build_corpus([str(upstream)], output, settings, LocalExecutor(1, sandbox), eval_fraction=0.0)
    (row,) = result.rows()
    assert row["tasks"] >= 2 and row["known_wrong"] > 0 and row["false_accepts"] is not None
    totals = result.totals()
    assert totals["audited tasks"] == row["tasks"] and totals["known-wrong mutants"] == row["known_wrong"]
    assert totals["false accepts"] == row["false_accepts"] and "single-statement share" in totals
    assert totals["audit mutants left unrun by a task's CPU budget"] == 0
    assert totals["kept tasks the audit could not run (kept unaudited)"] == 0
    assert totals["kept tasks no passing upstream test covers"] == 0  # "untested" is too small a target
    table = corpus_paths(output)["stats_md"].read_text()
    assert "false_accept_rate" in table and "| known-wrong mutants |" in table


def test_the_two_halves_of_the_mutants_are_fixed_and_disjoint(sandbox: Sandbox, upstream: Path) -> None:
    """``build --max-false-accept`` filters on one half; ``audit --part held-out`` measures with
    the other, mutants the filter never saw."""
    from gym_repost.analysis.mutation import OPERATORS
    from gym_repost.construct.audit import in_part

    mutants = generate_mutants(CORE, operators=(*OPERATORS, *AUDIT_OPERATORS))
    build = {m.source for m in mutants if in_part(m, "build")}
    held_out = {m.source for m in mutants if in_part(m, "held-out")}
    assert build and held_out and not build & held_out and build | held_out == {m.source for m in mutants}
    repo = ingest(upstream, licenses="any")
    weak = _tasks()[:1]
    halves = [audit_tasks(sandbox, weak, repo, mutants=40, part=part)[0] for part in ("build", "held-out")]
    sources = [{(m.line, m.original, m.replacement) for m in a.mutants} for a in halves]
    assert sources[0] and sources[1] and not sources[0] & sources[1]


HOSTILE_CONFTEST = textwrap.dedent("""\
    def pytest_ignore_collect(path, config):  # the ``path`` argument pytest 9 refuses
        return None
    """)

HOSTILE_TESTS = textwrap.dedent("""\
    import os

    import pytest

    from esc.core import clamp, escape


    def test_escape_closes_a_shell_protocols_descriptors():
        for fd in (8, 9):  # as argcomplete's tests do with its shell protocol's
            try:
                os.close(fd)
            except OSError:
                pass
        assert escape("a<b>&c") == "a&lt;b&gt;&amp;c"


    @pytest.mark.parametrize("x", range(-200, 400))
    def test_clamp(x):
        assert clamp(x, 0, 10) == min(max(x, 0), 10)
    """)


def test_a_suite_written_for_an_older_pytest_that_closes_descriptors_is_traced_and_audited(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A ``conftest.py`` hook with the ``path`` argument (an error from pytest 9 on, which
    stopped docopt-ng's whole suite), a test that closes descriptors 8 and 9 (argcomplete's:
    pytest's copy of standard error was there, and the audit's result pipe could be), and a
    test parametrized hundreds of times (packaging's thousands overflowed the coverage
    report): the suite runs as its authors ran it, for the tracer and for the audit."""
    from gym_repost.construct.extract import extract_candidates
    from gym_repost.construct.testgen import trace_repository

    root = tmp_path / "esc-1.0"
    files = {"esc/__init__.py": "", "esc/core.py": CORE, "tests/conftest.py": HOSTILE_CONFTEST}
    files["tests/test_esc.py"] = HOSTILE_TESTS
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    repo = ingest(root, licenses="any")
    candidates = [c for c in extract_candidates(repo)[0] if c.name in ("escape", "clamp")]
    traced = trace_repository(sandbox, repo, candidates, timeout=120)
    assert traced.tests_run == 601 and traced.tests_failed == 0, traced.errors
    assert all(traced.calls[c.key] for c in candidates)
    weak, strong = audits = audit_tasks(sandbox, _tasks()[:2], repo, mutants=40)
    assert weak.status == strong.status == "audited", (weak.detail, strong.detail)
    assert (weak.covering_tests, strong.covering_tests) == (1, 600)
    assert weak.false_accepts and strong.known_wrong and not strong.false_accepts
    assert audit_totals(audits)["by_status"]["audited"] == 2


def test_a_suite_that_runs_no_test_leaves_its_tasks_unaudited_and_the_build_says_so(
    sandbox: Sandbox, upstream: Path
) -> None:
    """A suite that cannot load (its ``conftest.py`` needs what the sandbox lacks) is not
    "no test covers the target": the tasks are kept unaudited, each with the reason, and the
    build lists the gate that could not run among its limits."""
    from gym_repost.construct.execution import PackageInstaller
    from gym_repost.construct.pipeline import BuildResult, BuildSettings, _drop_false_acceptors

    (upstream / "tests" / "conftest.py").write_text("raise RuntimeError('needs a service')\n", encoding="utf-8")
    repo = ingest(upstream, licenses="any")
    audits = audit_tasks(sandbox, _tasks()[:2], repo)
    assert [a.status for a in audits] == ["error", "error"]
    assert "the repository's own tests ran no test" in audits[0].detail and "needs a service" in audits[0].detail
    built = BuildResult(repo=repo, tasks=_tasks()[:2], drops=[], candidates=2, timings={})
    _drop_false_acceptors(built, sandbox, BuildSettings(max_false_accept=0.0), PackageInstaller(sandbox))
    assert len(built.tasks) == 2 and len(built.limits) == 1
    assert built.limits[0].startswith("audit: 2 task(s) kept unaudited, the gate could not run: ")


@pytest.mark.network
def test_a_module_the_suite_s_conftest_imports_is_installed_for_the_audit(upstream: Path, tmp_path: Path) -> None:
    """prettytable's ``conftest.py`` loads a plugin the audit's package set lacked: pytest
    reports that on its standard error, which the audit did not read, so the suite ran no
    test and its tasks were reported ``uncovered``. The module is installed and the suite
    run again."""
    from gym_repost.construct.execution import PackageInstaller, own_packages
    from gym_repost.sandbox.config import LocalSandboxConfig
    from gym_repost.sandbox.local import LocalSandbox

    (upstream / "tests" / "conftest.py").write_text("import whatever  # noqa: F401\n", encoding="utf-8")
    repo = ingest(upstream, licenses="any")
    config = LocalSandboxConfig(workers=2, work_root=str(tmp_path), packages_dir=str(tmp_path / "packages"))
    with LocalSandbox(config) as box, own_packages(box) as (own, _):
        installer = PackageInstaller(own)
        weak, strong = audit_tasks(own, _tasks()[:2], repo, mutants=40, install=installer.provide)
    assert weak.status == strong.status == "audited", (weak.detail, strong.detail)
    assert [pin.split("==")[0] for pin in installer.installed] == ["whatever"]


def test_the_coverage_report_is_read_as_untrusted_data(upstream: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report comes from a process that ran the repository's code: a malformed entry of
    its table of tests is left out without moving the others, and an index outside the
    table or not an integer is ignored."""
    from gym_repost.construct import audit as audit_module
    from gym_repost.sandbox.base import RunResult
    from gym_repost.sandbox.programs import ProgramRun

    payload = {
        "names": [["tests/t.py::a", 0.5], ["tests/t.py::b", "slow"], 7, ["tests/t.py::c", 1]],
        "covering": {"k": [0, 1, 2, 3, 9, -1, "0", 1.0], "other": "all"},
        "tests": 4,
    }
    monkeypatch.setattr(
        audit_module, "run_program", lambda *a, **k: ProgramRun(RunResult(0, "", ""), payload, True, None)
    )
    repo = ingest(upstream, licenses="any")
    target = audit_module._Target(_tasks()[0], "k", "esc/core.py", (2, 3), 0, 1, [])
    covering, problem, at_import, _ = audit_module._covering(None, repo, [target])  # type: ignore[arg-type]
    assert problem is None and covering == {"k": [["tests/t.py::a", 0.5], ["tests/t.py::c", 1]]}
    assert at_import == set()


def test_a_task_whose_ground_truth_cannot_run_is_an_audit_error_not_a_clean_task(
    upstream: Path, tmp_path: Path
) -> None:
    """In a package set of its own, an audit starts without the task's requirements. Every
    submission then fails on the import, known-wrong mutants included, and would count as
    rejected: a clean task, wrongly. The audit runs the ground truth first, installs what it
    cannot import, and says when it still fails."""
    from gym_repost.sandbox.config import LocalSandboxConfig
    from gym_repost.sandbox.local import LocalSandbox

    needing = WEAK_ESCAPE.replace("def escape(text):", "import escape_helper\n\n\ndef escape(text):", 1)
    task = build_task(needing, "escape", {"esc/__init__.py": "", "esc/core.py": CORE}, "esc/core.py")
    repo = ingest(upstream, licenses="any")
    packages = tmp_path / "packages"
    asked: list[str] = []

    def install(module: str) -> bool:
        asked.append(module)
        (packages / ".sets" / "b-audit" / f"{module}.py").write_text("")
        return True

    config = LocalSandboxConfig(workers=2, work_root=str(tmp_path), packages_dir=str(packages))
    with LocalSandbox(config) as sandbox:
        own = sandbox.package_set("b-audit")
        (packages / "escape_helper.py").write_text("")  # another build's: not in this set
        [failed] = audit_tasks(own, [task], repo, mutants=40)
        assert failed.status == "error" and not failed.mutants
        assert (
            failed.detail
            == "the task's ground truth fails here: missing package escape_helper (pip install escape-helper)"
        )
        [audited] = audit_tasks(own, [task], repo, mutants=40, install=install)
        assert asked == ["escape_helper"]
        assert audited.status == "audited" and audited.known_wrong and audited.false_accepts


WRAPPED = (
    textwrap.dedent("""\
    import functools
    import types


    def logged(function):
        @functools.wraps(function)
        def inner(*args):
            return function(*args)

        return inner


    @logged
    """)
    + "def clamp"
    + CORE.split("\n\n\ndef clamp")[1].split("\n\n\ndef untested")[0]
    + "\n"
)

SWAP_CASES = {
    # decorated, and tested through an alias another module holds: the swap reaches both
    "wrapped-and-aliased": (WRAPPED, "from esc.core import clamp as limit\n", 1, None),
    # run at import: collecting with the original code would not see the mutant there
    "run-at-import": (
        WRAPPED + "\nTABLE = [clamp(x, 0, 10) for x in range(3)]\n",
        "from esc.core import clamp as limit\n",
        0,
        None,
    ),
    # a copy of its code under another name, which the swap misses: the cross-check finds out
    "copied-under-another-name": (
        WRAPPED.replace("@logged\n", "")
        + '\n\nlimit = types.FunctionType(clamp.__code__.replace(co_name="limit", co_qualname="limit"), globals())\n',
        "from esc.core import limit\n",
        0,
        "disagreed",
    ),
}


@pytest.mark.parametrize("case", list(SWAP_CASES))
def test_mutants_swapped_into_tests_collected_once_get_the_verdicts_of_runs_of_their_own(
    sandbox: Sandbox, tmp_path: Path, case: str
) -> None:
    """The kill runs collect the covering tests once and swap each mutant's code into the
    target's function objects, and the known-wrong ones are judged in a batch; every
    verdict is the one runs of the mutant's own give, and where a swap could differ (the
    target runs at import, a copy of its code escapes the swap) the mutants have runs of
    their own."""
    from gym_repost.construct import audit as audit_module

    core, api, swapped_at_least, fallback = SWAP_CASES[case]
    tests = "from esc.api import limit\n\n\ndef test_limit():\n" + "".join(
        f"    assert limit({x}, 0, 10) == {min(max(x, 0), 10)}\n" for x in (-1, 0, 5, 10, 11)
    )
    root = tmp_path / "esc-1.0"
    for path, text in {
        "esc/__init__.py": "",
        "esc/core.py": core,
        "esc/api.py": api,
        "tests/test_esc.py": tests,
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    repo = ingest(root, licenses="any")
    script = core.split("\n\nTABLE")[0].split("\n\nlimit")[0] + "\n\n" + STRONG_CLAMP.split("\n\n\n", 1)[1]
    task = build_task(script, "clamp", {"esc/__init__.py": "", "esc/core.py": core}, "esc/core.py")
    target = audit_module._target(task, repo, 40, 0, "all")
    assert isinstance(target, audit_module._Target) and len(target.mutants) >= 8
    covering, problem, at_import, _ = audit_module._covering(sandbox, repo, [target])
    assert problem is None and covering[target.key]
    assert (target.key in at_import) == (case == "run-at-import")
    audits = [
        audit_module._audit_target(
            sandbox, repo, target, covering[target.key], patch=target.key not in at_import and fast, batch=fast
        )
        for fast in (True, False)
    ]
    swapped, own = ([(m.line, m.replacement, m.upstream, m.killed_by, m.accepted) for m in a.mutants] for a in audits)
    assert swapped == own and any(verdict[2] == "killed" for verdict in own)
    assert audits[1].swapped == 0
    if swapped_at_least:
        assert audits[0].swapped >= len(target.mutants) // 2 and audits[0].swap_fallback is None
    else:
        assert audits[0].swapped == 0
    assert (fallback or "") in (audits[0].swap_fallback or "") and (fallback is None) == (
        audits[0].swap_fallback is None
    )


def _ingested(root: Path, files: dict[str, str]):
    """The repository of ``files`` written under ``root``, ingested."""
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return ingest(root, licenses="any")


def _audit_both_ways(sandbox: Sandbox, root: Path, files: dict[str, str], script: str, mutate=None):
    """The target ``clamp`` of ``esc/core.py`` audited with its covering tests collected once
    (swapped mutants) and with runs of their own; ``mutate`` replaces the mutant sample."""
    from gym_repost.construct import audit as audit_module

    repo = _ingested(root, files)
    task = build_task(script, "clamp", {"esc/__init__.py": "", "esc/core.py": files["esc/core.py"]}, "esc/core.py")
    target = audit_module._target(task, repo, 40, 0, "all")
    assert isinstance(target, audit_module._Target)
    if mutate is not None:
        target.mutants = mutate(target.mutants)
    covering, problem, at_import, _ = audit_module._covering(sandbox, repo, [target])
    assert problem is None and covering[target.key] and target.key not in at_import
    return [
        audit_module._audit_target(sandbox, repo, target, covering[target.key], patch=fast, batch=fast)
        for fast in (True, False)
    ]


def test_a_mutant_s_run_ends_at_its_first_failure(sandbox: Sandbox, tmp_path: Path) -> None:
    """Once a covering test fails the verdict is known: the run ends there, and neither the
    subtests after it nor their tracebacks are paid for. Here every subtest after a failed
    one loops, so a run that went on would end at its CPU limit, a timeout."""
    tests = textwrap.dedent("""\
        import unittest

        from esc.core import clamp

        FAILED = []


        class ClampTests(unittest.TestCase):
            def test_cases(self):
                for x in range(-3, 14):
                    with self.subTest(x=x):
                        while FAILED:  # only once a case has failed
                            pass
                        try:
                            self.assertEqual(clamp(x, 0, 10), min(max(x, 0), 10))
                        except AssertionError:
                            FAILED.append(x)
                            raise
        """)
    files = {"esc/__init__.py": "", "esc/core.py": CORE, "tests/test_esc.py": tests}
    audits = _audit_both_ways(sandbox, tmp_path / "esc-1.0", files, STRONG_CLAMP)
    for audit in audits:
        verdicts = [m.upstream for m in audit.mutants]
        assert verdicts.count("killed") >= 5 and "timeout" not in verdicts, verdicts
        assert all(m.killed_by and m.killed_by.endswith("test_cases") for m in audit.mutants if m.upstream == "killed")
    assert audits[0].swapped >= 5 and audits[1].swapped == 0


def test_a_mutant_that_loops_in_a_cheap_test_is_stopped_at_that_test_s_limit(sandbox: Sandbox, tmp_path: Path) -> None:
    """Each covering test has a CPU limit of its own in a mutant's run (a multiple of what it
    took, plus :data:`TEST_CPU_FLOOR`), as PIT's per-test timeouts: a mutant that makes a
    test of a millisecond spin for seconds is a timeout, though the run's limit (a multiple of
    every covering test's CPU together, an expensive test's among them) would let it pass."""
    from dataclasses import replace

    from gym_repost.construct.audit import CPU_FACTOR, CPU_FLOOR, TEST_CPU_FLOOR

    tests = CHEAP_AND_EXPENSIVE_TESTS
    files = {"esc/__init__.py": "", "esc/core.py": CORE, "tests/test_esc.py": tests}
    # five times test_expensive's CPU, at 7 only: within the run's limit, far past test_cheap's
    spin = "return x if x != 7 or sum(range(10**9)) > 0 else x"

    def one_spinning_mutant(mutants: list) -> list:
        last = [m for m in mutants if m.original == "return x"]
        assert last, [(m.line, m.original) for m in mutants]
        return [replace(last[0], replacement=spin)]

    script = STRONG_CLAMP.replace("range(-3, 14)", "range(-3, 7)")  # the task's tests: no 7
    audits = _audit_both_ways(sandbox, tmp_path / "esc-1.0", files, script, one_spinning_mutant)
    for audit in audits:
        [mutant] = audit.mutants
        assert mutant.upstream == "timeout", mutant
        assert mutant.accepted  # the task's tests never reach the spin: a false accept
    assert TEST_CPU_FLOOR < CPU_FLOOR and CPU_FACTOR > 1


def test_a_target_s_mutants_after_its_last_allowed_timeout_are_not_run_whatever_their_cpu_time(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's budget per target is a count of timeouts, not of CPU seconds: a CPU
    budget is spent by one mutant more or fewer on a busy machine, so two builds would
    audit a task with other mutants. With a budget of two timeouts (the default is
    :data:`MAX_TIMEOUTS`; two keeps this test's loops few), three looping mutants, then two
    the tests reject: the third loop and the rest are ``not run``, both ways of running (a
    budget of 300 CPU seconds ran all five: three runs stopped at their 3-second limits,
    two killed)."""
    from dataclasses import replace

    from gym_repost.construct import audit as audit_module

    monkeypatch.setattr(audit_module, "MAX_TIMEOUTS", 2)
    files = {"esc/__init__.py": "", "esc/core.py": CORE, "tests/test_esc.py": UPSTREAM_TESTS}
    loop = "return x if not any(iter(int, 1)) else x"  # int() is 0: never ends, constant memory

    def loops_then_wrong(mutants: list) -> list:
        [last] = [m for m in mutants if m.original == "return x"][:1]
        return [replace(last, replacement=r) for r in (loop, loop, loop, "return x + 1", "return -x")]

    audits = _audit_both_ways(sandbox, tmp_path / "esc-1.0", files, STRONG_CLAMP, loops_then_wrong)
    for audit in audits:
        assert [m.upstream for m in audit.mutants] == ["timeout", "timeout", "not run", "not run", "not run"]
        assert audit.record()["known_wrong"] == 2  # the two timeouts; no mutant after them judged


def test_a_mutant_that_loops_at_import_is_stopped_at_the_collection_s_limit(sandbox: Sandbox, tmp_path: Path) -> None:
    """A target that runs at import (more-itertools' ``iter_index``, called by ``sieve`` at
    the module's top level) has a collection per mutant, and a mutant that loops there was
    stopped only at the limit of every covering test together (10 times their CPU + 5 s:
    minutes for more-itertools). The run until its collection is done now has a limit of
    its own, 10 times what the coverage run's took + 3 s: a mutant that spins at import for
    eight times an expensive test's CPU (well within the run's limit) is a timeout."""
    from dataclasses import replace

    from gym_repost.construct import audit as audit_module

    core = CORE + "\n\nDEFAULT = clamp(6, 0, 10)  # at import: the only call with 6\n"
    tests = CHEAP_AND_EXPENSIVE_TESTS
    files = {"esc/__init__.py": "", "esc/core.py": core, "tests/test_esc.py": tests}
    repo = _ingested(tmp_path / "esc-1.0", files)
    script = STRONG_CLAMP.replace("range(-3, 14)", "range(-3, 6)")  # the task's tests: no 6
    task = build_task(script, "clamp", {"esc/__init__.py": "", "esc/core.py": core}, "esc/core.py")
    target = audit_module._target(task, repo, 40, 0, "all")
    assert isinstance(target, audit_module._Target)
    [last] = [m for m in target.mutants if m.original == "return x"][:1]
    target.mutants = [replace(last, replacement="return x if x != 6 or sum(range(16 * 10**8)) > 0 else x")]
    covering, problem, at_import, collect_cpu = audit_module._covering(sandbox, repo, [target])
    assert problem is None and target.key in at_import and len(covering[target.key]) == 2
    assert collect_cpu is not None and 0 < collect_cpu < 10
    tests_of_target = covering[target.key]
    audit = audit_module._audit_target(sandbox, repo, target, tests_of_target, patch=False, collect_cpu=collect_cpu)
    [mutant] = audit.mutants
    assert mutant.upstream == "timeout", mutant
    assert mutant.accepted  # the task's tests never call clamp with 6: a false accept


def test_a_test_that_draws_from_random_covers_its_target_in_every_coverage_run(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A repository's test whose outcome hangs on a draw from the global ``random`` (seeded
    by the OS in each forked run) passed in one coverage run and failed in another, so two
    audits judged a target with other covering tests. The global generators are seeded
    before each test (with 0, the first draw is 0.84)."""
    from gym_repost.construct import audit as audit_module

    tests = textwrap.dedent("""\
        import random

        from esc.core import clamp


        def test_lucky():
            assert clamp(5, 0, 10) == 5
            assert random.random() > 0.5  # half the runs, unseeded
        """)
    files = {"esc/__init__.py": "", "esc/core.py": CORE, "tests/test_esc.py": tests}
    repo = _ingested(tmp_path / "esc-1.0", files)
    task = build_task(STRONG_CLAMP, "clamp", {"esc/__init__.py": "", "esc/core.py": CORE}, "esc/core.py")
    target = audit_module._target(task, repo, 40, 0, "all")
    assert isinstance(target, audit_module._Target)
    for _ in range(4):
        covering, problem, _, _ = audit_module._covering(sandbox, repo, [target])
        assert problem is None and [t[0] for t in covering[target.key]] == ["tests/test_esc.py::test_lucky"]


@pytest.mark.timeout(600)
def test_a_process_a_test_forks_and_leaves_blocked_does_not_hold_the_coverage_run(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """humanfriendly's spinner test forks a process that blocks on a pipe and outlives the
    test run, holding the report pipe's write end: the coverage run waited for the pipe to
    close until its wall-clock guard, 30 minutes of nothing. Once the run's own process has
    exited its report is whole: it is read, and the leftover process killed with the group."""
    from gym_repost.construct import audit as audit_module

    tests = textwrap.dedent("""\
        import os

        from esc.core import clamp


        def test_clamp_with_a_helper_left_behind():
            if os.fork() == 0:  # a helper that waits forever on a pipe nobody writes to
                read_end, _ = os.pipe()
                os.read(read_end, 1)
                os._exit(0)
            assert clamp(5, 0, 10) == 5
        """)
    files = {"esc/__init__.py": "", "esc/core.py": CORE, "tests/test_esc.py": tests}
    repo = _ingested(tmp_path / "esc-1.0", files)
    task = build_task(STRONG_CLAMP, "clamp", {"esc/__init__.py": "", "esc/core.py": CORE}, "esc/core.py")
    target = audit_module._target(task, repo, 40, 0, "all")
    assert isinstance(target, audit_module._Target)
    covering, problem, _, _ = audit_module._covering(sandbox, repo, [target])
    assert problem is None
    assert [t[0] for t in covering[target.key]] == ["tests/test_esc.py::test_clamp_with_a_helper_left_behind"]


SPIN = textwrap.dedent('''\


    def spin(n):
        """Pure-Python work: coverage.py's tracing slows it several times."""
        total = 0
        for i in range(n):
            total += i
        return total
    ''')
SPINS = 3 * 10**6
"""Iterations of :data:`SPIN`'s loop in the upstream test: a fraction of a CPU second."""


def _slow_and_wrong(tmp_path: Path, tests: str, spins: int):
    """The repository of ``clamp`` and ``spin`` with the upstream ``tests``, and the target
    ``clamp`` with two mutants: a right one that spins ``spins`` times on ``clamp(5.5, ...)``,
    and a wrong one."""
    from dataclasses import replace

    from gym_repost.construct import audit as audit_module

    core = CORE + SPIN
    files = {"esc/__init__.py": "", "esc/core.py": core, "tests/test_esc.py": tests}
    repo = _ingested(tmp_path / "esc-1.0", files)
    task = build_task(STRONG_CLAMP, "clamp", {"esc/__init__.py": "", "esc/core.py": core}, "esc/core.py")
    target = audit_module._target(task, repo, 40, 0, "all")
    assert isinstance(target, audit_module._Target)
    [last] = [m for m in target.mutants if m.original == "return x"][:1]
    slow = f"return x if x != 5.5 or spin({spins}) > 0 else x"
    target.mutants = [replace(last, replacement=slow), replace(last, replacement="return x + 1")]
    return repo, target


def test_a_mutant_s_limits_come_from_a_run_of_the_original_code_not_from_the_traced_coverage_run(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """more-itertools' ``polynomial_from_roots`` with its ``convolve`` arguments swapped is
    right and a hundred times slower on ``test_large``: a timeout in one build, survived in
    another. The limit was ten times the test's CPU in the coverage run, where tracing made
    it 6 times slower (3.8 s, 0.65 s untraced), by a factor that hangs on the machine's
    load. The limits now come from the original code's run of the covering tests, made as
    a mutant's is, just before: a mutant 20 times slower than the code is a timeout, where
    ten times the traced test let it pass. (The floor is lowered so the test is cheap.)"""
    import time

    from gym_repost.construct import audit as audit_module

    monkeypatch.setattr(audit_module, "TEST_CPU_FLOOR", 0.2)
    tests = f"from esc.core import clamp, spin\n\n\ndef test_heavy():\n    assert spin({SPINS}) > 0\n"
    tests += "    assert clamp(5.5, 0, 10) == 5.5\n"
    repo, target = _slow_and_wrong(tmp_path, tests, 20 * SPINS)  # right, 20 times the test's work
    covering, problem, _, _ = audit_module._covering(sandbox, repo, [target])
    assert problem is None
    [[nodeid, traced]] = covering[target.key]
    started = time.process_time()
    exec(compile(SPIN, "spin", "exec"), namespace := {})
    namespace["spin"](SPINS)
    untraced = time.process_time() - started
    # the old limit, ten times the traced test (4.5 times the untraced here), let the mutant pass
    assert audit_module.CPU_FACTOR * traced + audit_module.TEST_CPU_FLOOR > 20 * untraced, (traced, untraced)
    for fast in (True, False):
        audit = audit_module._audit_target(sandbox, repo, target, covering[target.key], patch=fast, batch=fast)
        assert [m.upstream for m in audit.mutants] == ["timeout", "killed"], audit
        assert audit.calibration is None and audit.mutants[1].killed_by == nodeid


def test_a_mutant_s_whole_run_limit_comes_from_the_original_code_s_run_too(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the per-test limits a mutant's whole run had a backstop, ten times the covering
    tests' CPU seconds in the traced coverage run: a mutant a few times slower in each of
    several cheap tests stayed within each test's limit and reached that one, or not, as the
    coverage run had been fast or slow. It is now ten times the original code's run of
    the tests, untraced, as theirs are, so the verdict is the same whatever the coverage run took:
    here a right mutant five times slower in each of four tests survives, whether the
    coverage run measured the tests as they are or four times faster (floors lowered so the
    test is cheap)."""
    import time

    from gym_repost.construct import audit as audit_module

    monkeypatch.setattr(audit_module, "TEST_CPU_FLOOR", 0.2)
    monkeypatch.setattr(audit_module, "CPU_FLOOR", 0.2)
    tests = "from esc.core import clamp, spin\n"
    for i in range(4):
        tests += f"\n\ndef test_{i}():\n    assert spin({SPINS}) > 0\n    assert clamp(5.5, 0, 10) == 5.5\n"
    repo, target = _slow_and_wrong(tmp_path, tests, 4 * SPINS)  # right, five times each test's work
    covering, problem, _, _ = audit_module._covering(sandbox, repo, [target])
    assert problem is None and len(covering[target.key]) == 4
    started = time.process_time()
    exec(compile(SPIN, "spin", "exec"), namespace := {})
    namespace["spin"](SPINS)
    untraced = time.process_time() - started
    faster = [[nodeid, untraced / 4] for nodeid, _ in covering[target.key]]
    # the old backstop with the faster coverage run: ten times its four tests, under the mutant's run
    assert audit_module.CPU_FACTOR * 4 * (untraced / 4) + audit_module.CPU_FLOOR < 4 * 5 * untraced
    for measured in (covering[target.key], faster):
        for fast in (True, False):
            audit = audit_module._audit_target(sandbox, repo, target, measured, patch=fast, batch=fast)
            assert [m.upstream for m in audit.mutants] == ["survived", "killed"], audit
            assert audit.calibration is None


def test_a_covering_test_that_fails_when_run_alone_is_left_out_not_a_killer_of_every_mutant(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A mutant's run runs the target's covering tests only. One that passed in the whole
    suite because an earlier test set things up fails alone, and it failed every mutant's
    run: each was "known wrong", right ones too, and a task that rewarded a right one was
    dropped for a false accept. The original code's run finds such tests; they are left
    out, named in the audit, and the mutants are judged by the rest."""
    from gym_repost.construct import audit as audit_module

    tests = textwrap.dedent("""\
        from esc.core import clamp

        READY = []


        def test_setup():
            READY.append(True)


        def test_after_setup():
            assert READY  # passes only after test_setup, which covers nothing of clamp
            assert clamp(5, 0, 10) == 5


        def test_clamp():
            assert clamp(-1, 0, 10) == 0
            assert clamp(11, 0, 10) == 10
            assert clamp(10, 0, 10) == 10
        """)
    files = {"esc/__init__.py": "", "esc/core.py": CORE, "tests/test_esc.py": tests}
    repo = _ingested(tmp_path / "esc-1.0", files)
    task = build_task(STRONG_CLAMP, "clamp", {"esc/__init__.py": "", "esc/core.py": CORE}, "esc/core.py")
    target = audit_module._target(task, repo, 40, 0, "all")
    assert isinstance(target, audit_module._Target)
    covering, problem, _, _ = audit_module._covering(sandbox, repo, [target])
    assert problem is None and len(covering[target.key]) == 2
    for fast in (True, False):
        audit = audit_module._audit_target(sandbox, repo, target, covering[target.key], patch=fast, batch=fast)
        assert "1 covering tests left out" in (audit.calibration or "") and "test_after_setup" in audit.calibration
        killers = {m.killed_by for m in audit.mutants if m.upstream == "killed"}
        assert killers == {"tests/test_esc.py::test_clamp"}, killers
        assert any(m.upstream == "survived" for m in audit.mutants)  # test_clamp never tries 5
        assert audit.record()["calibration"] == audit.calibration
