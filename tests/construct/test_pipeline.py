"""The whole construction pipeline: real repositories in, validated tasks out; bad input."""

from __future__ import annotations

import contextlib
import shutil
import statistics
import tarfile
import textwrap
from pathlib import Path

import pytest
from busy import busy_machine

from gym_repost.construct.pipeline import BuildResult, BuildSettings, build_function_tasks
from gym_repost.errors import BuildError
from gym_repost.harness import run_function_tests
from gym_repost.harness.validation import validate_task
from gym_repost.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]

TINY_MODULE = textwrap.dedent('''\
    """Small text utilities."""

    import random

    VOWELS = "aeiou"


    def count_vowels(text):
        """How many vowels ``text`` has (case-insensitive)."""
        total = 0
        for ch in text.lower():
            if ch in VOWELS:
                total += 1
        return total


    def initials(name, sep="."):
        """Initials of a full name: ``initials("Ada Lovelace") == "A.L."``."""
        parts = [p for p in name.split() if p]
        if not parts:
            return ""
        return sep.join(p[0].upper() for p in parts) + sep


    def shuffle_words(text):
        """The words of ``text`` in a random order."""
        words = text.split()
        random.shuffle(words)
        return " ".join(words)


    def wait_for_server(host, port):
        """Block until a server answers (needs the network)."""
        import socket
        while True:
            try:
                return socket.create_connection((host, port), timeout=1)
            except OSError:
                continue
    ''')


MIT = (ROOT / "tasks" / "demo" / "repo" / "LICENSE").read_text()


def _tiny_repo(tmp_path: Path, license_text: str | None = MIT) -> Path:
    repo = tmp_path / "tinytext"
    (repo / "tinytext").mkdir(parents=True)
    (repo / "tinytext" / "__init__.py").write_text("")
    (repo / "tinytext" / "words.py").write_text(TINY_MODULE)
    (repo / "tinytext" / "broken.py").write_text("def oops(:\n    return 1\n")
    if license_text:
        (repo / "LICENSE").write_text(license_text)
    return repo


def _build(source: str | Path, sandbox: Sandbox, **settings: object) -> BuildResult:
    return build_function_tasks(str(source), BuildSettings(workers=2, **settings), sandbox)  # type: ignore[arg-type]


def test_a_small_directory_builds_and_every_kept_task_validates(tmp_path: Path, sandbox: Sandbox) -> None:
    result = _build(_tiny_repo(tmp_path), sandbox, split="eval")
    kept = {t.target.qualname for t in result.tasks}
    assert {"count_vowels", "initials"} <= kept
    reasons = {(d.qualname, d.stage): d.reason for d in result.drops}
    assert ("*", "extract") in reasons and "syntax" in reasons[("*", "extract")]  # broken.py
    assert any(q == "wait_for_server" for q, _ in reasons)  # network keyword
    for task in result.tasks:
        check = validate_task(sandbox, task, mutants=5, coverage=True)
        assert check.passed and not check.accepts_do_nothing, task.name
        assert check.coverage is not None and check.coverage.branch_coverage == 1.0  # the eval split
        assert task.provenance.license == "MIT" and task.metadata.split == "eval"
        assert "Body removed" in task.repository.files[task.repository.target_file]
    stats = result.statistics()
    assert stats["table2"]["tasks kept"] == len(result.tasks) and stats["drops"]
    assert set(stats["timings"]) >= {"ingest", "extract", "construction"}


def test_an_archive_source_builds_the_same(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = _tiny_repo(tmp_path)
    archive = tmp_path / "tinytext-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(repo, arcname="tinytext-1.0")
    result = _build(archive, sandbox, trace=False)
    assert {t.target.qualname for t in result.tasks} >= {"count_vowels", "initials"}
    assert result.repo.version == "1.0"


def test_a_task_id_depends_on_content_not_on_how_the_path_was_typed(
    tmp_path: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _tiny_repo(tmp_path / "here")
    elsewhere = Path(shutil.copytree(repo, tmp_path / "there" / "tinytext"))
    monkeypatch.chdir(repo)
    builds = [_build(source, sandbox, trace=False) for source in (".", repo, f"{elsewhere}/")]
    ids = [[t.id for t in result.tasks] for result in builds]
    assert ids[0] and ids[0] == ids[1] == ids[2]
    assert {t.provenance.source for r in builds for t in r.tasks} == {"dir:tinytext"}


DEMO_SETTINGS: dict[str, object] = {"max_candidates": 8, "trace": False, "keep": ("single-statement",)}
"""Eight candidates, the demo's one-line methods among them (easy tasks, so that the build
keeps several to compare; single-statement bodies are dropped by default)."""


@pytest.fixture(scope="module")
def demo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the demo repository (builds read it, never write it)."""
    return Path(shutil.copytree(ROOT / "tasks" / "demo" / "repo", tmp_path_factory.mktemp("demo") / "shopkit"))


@pytest.fixture(scope="module")
def demo_build(demo_repo: Path, sandbox: Sandbox) -> BuildResult:
    """The demo repository's build on whatever load the session has: built once, checked
    by the tests below (each asserts something different on it)."""
    return _build(demo_repo, sandbox, **DEMO_SETTINGS)


def test_the_demo_repository_builds(demo_build: BuildResult) -> None:
    assert demo_build.candidates == 8 and len(demo_build.tasks) >= 3
    assert all(d.reason for d in demo_build.drops)


def _kept(result: BuildResult) -> tuple[list[str], list[tuple[str, str]]]:
    """What a build decided: the kept tasks (content hashes: script, tests and all) and the drops."""
    return sorted(t.id for t in result.tasks), sorted((d.qualname, d.reason) for d in result.drops)


@pytest.mark.slow
def test_the_demo_build_keeps_the_same_tasks_on_a_busy_machine(
    demo_build: BuildResult, demo_repo: Path, sandbox: Sandbox
) -> None:
    """Budgets count work, not seconds: four CPU-burning processes change nothing that is kept."""
    quiet = demo_build
    with busy_machine(4):
        busy = _build(demo_repo, sandbox, **DEMO_SETTINGS)
    assert len(quiet.tasks) >= 3 and _kept(busy) == _kept(quiet)
    assert busy.statistics()["safety_limits"] == [] == quiet.statistics()["safety_limits"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: str(p / "missing"), "no such directory, archive or PyPI package"),
        (lambda p: (p / "x.tar.gz").write_text("not an archive") and str(p / "x.tar.gz"), "not a source archive"),
    ],
)
def test_unusable_sources_are_refused_clearly(tmp_path: Path, sandbox: Sandbox, make, message: str) -> None:
    with pytest.raises(BuildError, match=message):
        _build(make(tmp_path), sandbox)


def test_a_repository_without_a_license_is_refused_unless_asked(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = _tiny_repo(tmp_path, license_text=None)
    with pytest.raises(BuildError, match="no license"):
        _build(repo, sandbox)
    assert _build(repo, sandbox, licenses="any", trace=False).tasks


PACKAGES = [
    ("inflection", "0.5.1"),
    ("toolz", "1.2.0"),
    ("humanize", "4.17.0"),
    ("semver", "3.1.1"),
    ("python-slugify", "9.2.0"),
]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize(("name", "version"), PACKAGES)
def test_real_pypi_packages_meet_the_quality_target(name: str, version: str, sandbox: Sandbox) -> None:
    """Yield >= 30%, every kept ground truth passes, median coverage >= 90%, kill rate >= 80%."""
    result = _build(f"pypi:{name}=={version}", sandbox)
    table = result.statistics()["table2"]
    assert table["yield"] >= 0.3, table
    assert table["median branch coverage"] >= 0.9 and table["median mutant kill rate"] >= 0.8, table
    for task in result.tasks:
        assert run_function_tests(sandbox, task, task.ground_truth).passed, task.name
    assert statistics.median(t.metadata.num_asserts for t in result.tasks) >= 3


def test_a_target_whose_argument_is_of_a_class_it_never_names_is_tested_with_the_traced_calls(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    repo = tmp_path / "eng"
    files = {
        "eng/__init__.py": "",
        "eng/stack.py": """
            class Stack:
                def __init__(self, name):
                    self.name = name
                    self.steps = []

                def enable(self, what):
                    self.steps.append(what)
            """,
        "eng/build.py": '''
            def build(stack, options):
                """Enable on ``stack`` what ``options`` ask for."""
                if options.get("group"):
                    stack.enable("grouping")
                if options.get("case") == "upper":
                    stack.enable("upper")
                elif options.get("case"):
                    stack.enable("lower")
                return stack
            ''',
        "tests/test_build.py": """
            from eng.build import build
            from eng.stack import Stack

            def test_group():
                assert build(Stack("a"), {"group": True}).steps == ["grouping"]

            def test_case():
                assert build(Stack("b"), {"case": "upper"}).steps == ["upper"]
                assert build(Stack("c"), {"case": "title", "group": 1}).steps == ["grouping", "lower"]
                assert build(Stack("d"), {}).steps == []
            """,
        "LICENSE": MIT,
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(textwrap.dedent(text))
    result = _build(repo, sandbox, only=("build",))
    [task] = result.tasks
    script = task.evaluation.script
    # the repository's own calls build a Stack: the script defines it, so they run there
    assert "class Stack" in script and "_gr_build(Stack, {'name': 'c'" in script
    assert "traced)" in script
    assert run_function_tests(sandbox, task, task.ground_truth).passed
    wrong = task.ground_truth.replace('stack.enable("lower")', "pass")
    assert not run_function_tests(sandbox, task, wrong).passed


def test_a_repository_whose_own_tests_run_none_says_so_among_its_limits(sandbox: Sandbox, tmp_path: Path) -> None:
    """A suite that cannot even load (its ``conftest.py`` fails) leaves the build with the
    search's inputs only: a silent loss of tasks, unless the build reports it."""
    from gym_repost.construct.execution import PackageInstaller
    from gym_repost.construct.extract import extract_candidates
    from gym_repost.construct.ingest import ingest
    from gym_repost.construct.pipeline import trace_seeds

    root = tmp_path / "broken-1.0"
    files = {
        "broken/__init__.py": textwrap.dedent("""\
            def sign(x):
                \"\"\"-1, 0 or 1: the sign of ``x``.\"\"\"
                if x < 0:
                    return -1
                if x > 0:
                    return 1
                return 0
            """),
        "tests/conftest.py": "raise RuntimeError('this suite needs a service')\n",
        "tests/test_sign.py": "from broken import sign\n\n\ndef test_sign():\n    assert sign(-2) == -1\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    repo = ingest(root, licenses="any")
    candidates = [c for c in extract_candidates(repo)[0] if c.name == "sign"]
    assert candidates
    _, notes, limits = trace_seeds(sandbox, repo, candidates, PackageInstaller(sandbox))
    assert limits and limits[0].startswith("tracing: the repository's own tests ran no test: ")
    assert "this suite needs a service" in limits[0] and limits[0] in notes


def test_what_a_build_keeps_never_depends_on_what_other_builds_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository's tests may use an optional package (``pytest.importorskip``). When
    another repository's build had installed it into the shared package cache, this one's
    tests ran more calls, and its tasks differed: bitmath 2.1.1, built after more-itertools
    had installed hypothesis, kept 4 of its 9 tasks with other tests than on a fresh
    machine. Each build now sees only what it installed (a package set of its own)."""
    from gym_repost.construct import pipeline
    from gym_repost.sandbox.config import LocalSandboxConfig
    from gym_repost.sandbox.local import LocalSandbox

    repo = tmp_path / "sizes-1.0"
    files = {
        "sizes/__init__.py": textwrap.dedent('''\
            def describe(n):
                """A word for how large ``n`` is."""
                if n > 100:
                    return "big"
                if n > 10:
                    return "medium"
                return "small"
            '''),
        "tests/test_sizes.py": textwrap.dedent("""\
            import pytest
            from sizes import describe

            def test_small():
                assert describe(1) == "small"
                assert describe(50) == "medium"

            def test_with_the_optional_package():
                optional = pytest.importorskip("optional_sizes")
                assert describe(optional.BIG) == "big"
            """),
        "LICENSE": MIT,
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    packages = tmp_path / "packages"
    config = LocalSandboxConfig(workers=2, work_root=str(tmp_path), packages_dir=str(packages))

    def build_twice() -> tuple[BuildResult, BuildResult]:
        """On an empty cache, then on one where another build installed the optional package."""
        (packages / "optional_sizes.py").unlink(missing_ok=True)
        with LocalSandbox(config) as box:
            first = _build(repo, box, only=("describe",))
            (packages / "optional_sizes.py").write_text("BIG = 1000\n")
            second = _build(repo, box, only=("describe",))
        return first, second

    fresh, after = build_twice()
    assert [t.model_dump_json() for t in fresh.tasks] == [t.model_dump_json() for t in after.tasks]
    assert len(fresh.tasks) == 1 and not fresh.limits
    assert not list((packages / ".sets").iterdir())  # each build's set is gone with it

    @contextlib.contextmanager
    def shared(sandbox: Sandbox):  # type: ignore[no-untyped-def]
        yield sandbox, None

    monkeypatch.setattr(pipeline, "own_packages", shared)  # as before: one cache for every build
    fresh, after = build_twice()
    assert [t.model_dump_json() for t in fresh.tasks] != [t.model_dump_json() for t in after.tasks]
    call = "_gr_outcome(describe, 1000)"  # the optional test's call, traced
    assert call in after.tasks[0].evaluation.script and call not in fresh.tasks[0].evaluation.script


def _sizes_repo(tmp_path: Path, tests: str) -> Path:
    """A one-function repository, ``sizes.describe``, whose suite is ``tests``."""
    repo = tmp_path / "sizes-1.0"
    files = {
        "sizes/__init__.py": 'def describe(n):\n    if n > 100:\n        return "big"\n    return "small"\n',
        "tests/test_sizes.py": tests,
        "LICENSE": MIT,
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    return repo


def _empty_cache_sandbox(tmp_path: Path) -> Sandbox:
    """A local sandbox whose package cache starts empty (what a build installs is seen)."""
    from gym_repost.sandbox.config import LocalSandboxConfig
    from gym_repost.sandbox.local import LocalSandbox

    return LocalSandbox(LocalSandboxConfig(workers=2, work_root=str(tmp_path), packages_dir=str(tmp_path / "packages")))


@pytest.mark.network
def test_a_module_the_tests_importorskip_is_installed_and_their_calls_are_traced(tmp_path: Path) -> None:
    """A test that ``pytest.importorskip``s a module the build's package set lacks was
    skipped, and its calls were never traced (bitmath's, commonmark's, Markdown's hypothesis
    tests); pytest now says why it skips (``-rfEs``), and the module is installed like one an
    import needs."""
    repo = _sizes_repo(
        tmp_path,
        textwrap.dedent("""\
            import pytest
            from sizes import describe

            def test_small():
                assert describe(1) == "small"

            def test_with_an_optional_package():
                pytest.importorskip("whatever")
                assert describe(1000) == "big"
            """),
    )
    with _empty_cache_sandbox(tmp_path) as box:
        built = _build(repo, box, only=("describe",))
    assert [t.evaluation.requirements for t in built.tasks] == [["whatever"]]
    assert "_gr_outcome(describe, 1000)" in built.tasks[0].evaluation.script
    assert [pin.split("==")[0] for pin in built.installed] == ["whatever"]


@pytest.mark.network
def test_a_module_whose_failed_import_leaves_a_name_undefined_is_installed_in_the_build_and_the_audit(
    tmp_path: Path,
) -> None:
    """mccabe's tests import hypothesis in a ``try: ... except ImportError`` and use its
    ``settings`` at module level: in a package set without it, the module failed to
    collect on ``NameError: name 'settings' is not defined``, which names no module, so
    nothing was installed, no test ran, and the audit had no coverage run. The ``try``'s
    modules are installed, in the build and in the audit."""
    from gym_repost.construct.audit import audit_tasks
    from gym_repost.construct.execution import PackageInstaller, own_packages
    from gym_repost.construct.ingest import ingest

    repo = _sizes_repo(
        tmp_path,
        textwrap.dedent("""\
            try:
                from whatever import that
            except ImportError:
                pass

            from sizes import describe

            SIZE = that + 1000

            def test_sizes():
                assert describe(1000) == "big" and describe(7) == "small"
            """),
    )
    with _empty_cache_sandbox(tmp_path) as box:
        built = _build(repo, box, only=("describe",))
        assert "_gr_outcome(describe, 1000)" in built.tasks[0].evaluation.script  # traced
        assert [pin.split("==")[0] for pin in built.installed] == ["whatever"]
        with own_packages(box) as (own, _):
            audits = audit_tasks(own, built.tasks, ingest(str(repo)), install=PackageInstaller(own).provide)
    assert [a.status for a in audits] == ["audited"], audits[0].detail
    assert audits[0].known_wrong and not audits[0].false_accepts


@pytest.mark.network
def test_a_suite_using_a_plugin_s_fixture_runs_with_the_plugin_in_the_build_and_in_the_audit(tmp_path: Path) -> None:
    """A test taking pytest-mock's ``mocker`` errored ("fixture 'mocker' not found") in a
    build's package set, which never held the plugin: its calls were not traced and the
    audit found no test covering the target. The plugin is installed first, and the audit's
    runs of the suite load it."""
    from gym_repost.construct.audit import audit_tasks
    from gym_repost.construct.execution import PackageInstaller, own_packages
    from gym_repost.construct.ingest import ingest

    repo = _sizes_repo(
        tmp_path,
        textwrap.dedent("""\
            import sizes

            def test_big(mocker):
                spy = mocker.spy(sizes, "describe")
                assert sizes.describe(1000) == "big" and sizes.describe(7) == "small"
                assert spy.call_count == 2
            """),
    )
    with _empty_cache_sandbox(tmp_path) as box:
        built = _build(repo, box, only=("describe",))
        assert "_gr_outcome(describe, 1000)" in built.tasks[0].evaluation.script  # traced
        assert "pytest-mock" in [pin.split("==")[0] for pin in built.installed]
        with own_packages(box) as (own, _):
            audits = audit_tasks(own, built.tasks, ingest(str(repo)), install=PackageInstaller(own).provide)
    assert [a.status for a in audits] == ["audited"], audits[0].detail
    assert audits[0].known_wrong and not audits[0].false_accepts


def test_a_script_too_long_for_write_script_is_dropped_saying_so(
    tmp_path: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wcwidth's module, with its Unicode tables, is 470,077 characters: ``write_script``
    refused it, and the drop said "no script yet: call write_script first", the error of
    the step after. A module over the limit is dropped when it is assembled; a script that
    the generated tests take over it is dropped with what the tool said."""
    from gym_repost import tools

    repo = tmp_path / "table"
    (repo / "table").mkdir(parents=True)
    (repo / "LICENSE").write_text(MIT)
    rows = ",\n".join(f"    ({i}, {i * 7 % 1000})" for i in range(tools.MAX_ARG_CHARS // 10))
    (repo / "table" / "__init__.py").write_text(
        f"TABLE = (\n{rows},\n)\n\n\ndef width(code):\n    for low, high in TABLE:\n"
        "        if low <= code <= high:\n            return 2\n    return 1\n"
    )
    dropped = _build(repo, sandbox, only=("width",))
    assert not dropped.tasks
    [drop] = [d for d in dropped.drops if d.qualname == "width"]
    assert (drop.stage, drop.reason) == ("sandboxing", "script too long")
    assert f"a build's write_script takes at most {tools.MAX_ARG_CHARS:,}" in drop.detail

    small = _tiny_repo(tmp_path)
    whole = _build(small, sandbox, only=("count_vowels",))
    assert [t.target.qualname for t in whole.tasks] == ["count_vowels"]
    module = whole.tasks[0].evaluation.script.split("\n\n\ndef test_count_vowels")[0]
    monkeypatch.setattr(tools, "MAX_ARG_CHARS", len(module) + 100)  # the module fits, not its tests
    refused = _build(small, sandbox, only=("count_vowels",))
    [drop] = [d for d in refused.drops if d.qualname == "count_vowels"]
    assert (drop.stage, drop.reason) == ("tests", "script not accepted")
    assert f"the limit is {len(module) + 100}" in drop.detail
