"""Inputs from the repository's own tests: run them once in the sandbox, record the targets' calls.

:func:`trace_repository` runs the repository's test suite (and the doctests of the
targets' files) with pytest inside the sandbox, under a tracer that records the
arguments real tests pass to each target, written back as source at call time
(:mod:`gym_repost.programs.trace`). A suite that fails, hangs or cannot be
collected gives partial or no traces, never an exception: the result says what happened,
and which modules were missing so that the caller can install them and trace again
(:func:`trace_with_installs` does both).
"""

from __future__ import annotations

import configparser
import fnmatch
import logging
import posixpath
import re
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.pytest_files import modules_behind, plugins_used
from gym_repost.construct.extract import is_test_path
from gym_repost.construct.stages import Candidate, SourceRepository
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.programs import WALL_STRETCH, run_program

logger = logging.getLogger(__name__)

CALL_BUDGET = 150_000_000
"""Python calls the tracer's hook may see in one run (the budget, counted work: the suite
stops after the test that spends it, at the same test on any machine and under any load)."""
CPU_BUDGET = 1800.0
"""CPU seconds of one tracing run: a safety limit, far above what the suites measured need,
so that the call budget or the suite's end stops a run first. more-itertools 11.2.1's whole
suite, traced for 100 targets, makes 136 million calls in about 200 CPU seconds; pyparsing
3.2.3's 1,916 tests make 67 million in 122 to 135. Yet one corpus build's run of that suite,
beside another build and CI, reached the limit of 600 s this had at test 1,812, and a run
just after it did not: CPU time is work, but the same work takes more of it on a busy
machine (shared caches and cores), so where this limit stops a suite varies from run to run,
and the build says so, with the CPU time the run used (:attr:`TraceResult.cpu_seconds`)."""
TEST_CPU_SECONDS = 60.0
"""CPU seconds a test may run while traced before it is interrupted: a safety limit, four times
the slowest traced test found in the corpus's suites, so that tests end by themselves. Tracing
slows a suite (while a trace function is set, Python 3.11 runs every instruction
unspecialised): pyparsing 3.2.3's ``test_make_compressed_re_random`` takes 4.8 CPU seconds
untraced and 14.9 under a trace function that does nothing, so the 10 s this had stopped it
in every build, at a point the machine's load decides, and a test stopped part-way records
other calls, and leaves the library's state otherwise, than one run to its end (with tests
stopped at 2.5 s, pyparsing's suite made 93 million calls instead of 67)."""
WALL_TIMEOUT = 5400.0
"""Wall-clock seconds of one tracing run: a safety limit, three times the CPU limit, so that
a loaded machine (a third of a core for the run) still meets that first."""
CLOCK_SHIFT = 2.5 * 86400
"""Seconds the verification run's clock is moved ahead (:func:`verify_trace`): past a day, so
that ``date.today()`` gives another date at any hour."""
MAX_RESULT_CHARS = 50_000_000
"""The largest tracer result read (characters of its JSON; it travels compressed)."""
_CONFIGURATIONS = (
    ("pytest.ini", "pytest"),
    ("pyproject.toml", None),
    ("tox.ini", "pytest"),
    ("setup.cfg", "tool:pytest"),
)
"""Where pytest reads its settings, in its order: the file and its section (None: TOML)."""


@dataclass(frozen=True)
class RecordedCall:
    """One call of a target, written as source.

    Attributes:
        args: source of a tuple expression, e.g. ``"(1, 'a', [2, 3])"``.
        kwargs: source of a dict expression, e.g. ``"{'sep': '-'}"``.
        instance: for methods and properties, source of an expression that rebuilds
            ``self`` (``Counter(5)``, ``_gr_build(Counter, {'value': 5})``), else None.
        origin: ``traced``, ``strategy`` or ``search``.
        names: the repository's classes and functions the sources name, as ``(qualified
            name, module)`` pairs: the script must define them for the call to run
            (:func:`~gym_repost.construct.dependencies.slice_dependencies` takes them in).
    """

    args: str
    kwargs: str
    instance: str | None = None
    origin: str = "traced"
    names: tuple[tuple[str, str], ...] = field(default=(), compare=False)


@dataclass
class TraceResult:
    """What running the repository's tests under the tracer gave.

    Attributes:
        calls: ``Candidate.key`` -> recorded calls (every candidate has a list, maybe empty).
        missing_modules: top-level modules the tests could not import that are neither
            the repository's own nor the standard library's: install them and trace again.
        errors: collection errors and what went wrong, short.
        tests_run: test items run (doctests included).
        tests_failed: reports that failed (a failing test may still have given traces).
        timed_out: the wall clock's deadline stopped the suite, before a test or (``cut``)
            during one, or the sandbox killed the run (a safety limit: a loaded machine, or
            tests that sleep or wait).
        budget_limited: the call budget (:data:`CALL_BUDGET`, counted) stopped the suite
            after a test; the calls recorded until then are kept.
        cpu_limited: the run's CPU-time limit stopped the suite, before a test or (``cut``)
            by SIGXCPU during one; the calls recorded until then are kept.
        cut: the run was cut during a test that overran its own limits (one that swallows
            the timer's exception, as unittest's ``subTest`` does); ``errors`` says which.
        wall_stops: tests stopped by the wall clock's safety limit rather than by their
            CPU-time limit (a loaded machine, or a test that sleeps or waits).
        duration: seconds of the sandbox run.
        events: Python calls the tracer's hook saw (what the call budget counts).
        cpu_seconds: CPU time the tracing run used (0.0 when it did not say).
        verify_cpu_seconds: CPU time the verification run used.
        verified: the calls are those a second run of their tests made again
            (:func:`verify_trace`).
        unsteady: calls recorded that the verification run did not make again (they held
            the time, a random draw of the operating system's or a temporary path): dropped.
        pools: every call recorded, per candidate, before selection (for :func:`verify_trace`).
        digests: a verification run's digests of the calls it saw, per candidate.
        max_calls: most calls kept per candidate.
    """

    calls: dict[str, list[RecordedCall]]
    missing_modules: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tests_run: int = 0
    tests_failed: int = 0
    timed_out: bool = False
    budget_limited: bool = False
    cpu_limited: bool = False
    cut: bool = False
    wall_stops: int = 0
    duration: float = 0.0
    events: int = 0
    cpu_seconds: float = 0.0
    verify_cpu_seconds: float = 0.0
    verified: bool = False
    unsteady: int = 0
    pools: dict[str, list[Any]] = field(default_factory=dict, repr=False, compare=False)
    digests: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    max_calls: int = 40

    @property
    def traced(self) -> int:
        """Number of candidates with at least one recorded call."""
        return sum(1 for calls in self.calls.values() if calls)


def test_files(repo: SourceRepository) -> list[str]:
    """The files the repository's own runner collects, sorted: pytest's ``python_files`` (the
    repository's own setting in ``pytest.ini``, ``pyproject.toml``, ``tox.ini`` or
    ``setup.cfg``, else ``test_*.py *_test.py``), and unittest's discovery pattern
    ``test*.py`` in a test directory or at the top (``tests/tests.py``, ``test.py``). Given
    by name, pytest collects each whatever its name, ``unittest.TestCase`` classes included;
    so a file pytest would never reach is left out: one below a directory of the setting's
    ``norecursedirs`` (pytest's defaults where it sets none), and ``setup.py``, which runs
    setuptools at import (boolean.py's ``python_files = *.py`` named it)."""
    patterns = python_files_setting(repo) or ["test_*.py", "*_test.py"]
    skipped = pytest_setting(repo, "norecursedirs") or list(NORECURSEDIRS)
    found = []
    for path in repo.python_files:
        name = posixpath.basename(path)
        if name in ("conftest.py", "setup.py"):
            continue
        if any(fnmatch.fnmatch(part, pattern) for part in path.split("/")[:-1] for pattern in skipped):
            continue
        if any(fnmatch.fnmatch(name, pattern) for pattern in patterns):
            found.append(path)
        elif fnmatch.fnmatch(name, "test*.py") and (is_test_path(path) or "/" not in path):
            found.append(path)
    return sorted(found)


def suite_plugins(repo: SourceRepository) -> list[str]:
    """The pytest plugin modules whose fixtures or marks the repository's tests and
    ``conftest.py`` files use (``mocker``: ``pytest_mock``): what the build installs before
    it runs them, and what the audit loads (``-p``), since without them those tests error
    instead of running."""
    found: set[str] = set()
    for path in [*test_files(repo), *(p for p in repo.python_files if posixpath.basename(p) == "conftest.py")]:
        try:
            found.update(plugins_used(parse_python(repo.files[path])))
        except (SyntaxError, ValueError):
            continue
    return sorted(found)


def guarded_modules(repo: SourceRepository, undefined: Any) -> list[str]:
    """The third-party modules behind the names whose ``NameError`` failed a test file's
    collection (``undefined``: ``[[path, name], ...]`` as a run reports them), where an
    import in a ``try:`` that catches ``ImportError`` binds the name: that ``try``'s modules,
    one of which this sandbox lacks (:func:`~gym_repost.analysis.pytest_files.guarded_imports`).
    Missing like a module that says ``No module named``, they are installed as such."""
    found: set[str] = set()
    for item in undefined if isinstance(undefined, list) else []:
        if isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) for part in item):
            path, name = item
            found.update(modules_behind(repo.files.get(path, ""), [name]))
    local = local_modules(repo)
    return sorted(m for m in found if m not in local and m not in sys.stdlib_module_names)


NORECURSEDIRS = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}")
"""pytest's ``norecursedirs`` where a repository sets none."""


def python_files_setting(repo: SourceRepository) -> list[str]:
    """The repository's own pytest ``python_files`` globs, [] where it sets none."""
    return pytest_setting(repo, "python_files")


def pytest_setting(repo: SourceRepository, key: str) -> list[str]:
    """A pytest setting of the repository's that is a list of words (``python_files``,
    ``norecursedirs``), [] where it sets none (read as data, from the first of pytest's
    configuration files, in the order pytest reads them, that sets it)."""
    for name, section in _CONFIGURATIONS:
        text = repo.files.get(name)
        if text is None:
            continue
        value = _pyproject_setting(text, key) if section is None else _ini_setting(text, section, key)
        if value:
            return value
    return []


def _ini_setting(text: str, section: str, key: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
        return parser.get(section, key, fallback="").split()
    except configparser.Error:
        return []


def _pyproject_setting(text: str, key: str) -> list[str]:
    try:
        options = tomllib.loads(text).get("tool", {}).get("pytest", {}).get("ini_options", {})
    except tomllib.TOMLDecodeError:
        return []
    value = options.get(key) if isinstance(options, dict) else None
    if isinstance(value, str):
        return value.split()
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def doctest_files(repo: SourceRepository, candidates: Sequence[Candidate]) -> list[str]:
    """The candidates' files that hold doctests (``>>>``), sorted."""
    files = {c.file for c in candidates}
    tests = set(test_files(repo))
    return sorted(f for f in files if f in repo.files and ">>>" in repo.files[f] and f not in tests)


def suite_files(repo: SourceRepository) -> dict[str, str]:
    """The files a run of the repository's own tests gets: the repository's, and its
    metadata as an installed distribution's (``NAME-VERSION.dist-info/METADATA``, from its
    ``PKG-INFO``) at the root, which is on ``sys.path``: a package that reads its own
    version at import (pqdict's ``importlib.metadata.version("pqdict")``) fails there
    otherwise, and every test with it."""
    if not repo.version:
        return repo.files
    name = re.sub(r"[-_.]+", "_", repo.name).lower()
    info = repo.files.get("PKG-INFO") or f"Metadata-Version: 2.1\nName: {repo.name}\nVersion: {repo.version}\n"
    return {**repo.files, f"{name}-{repo.version}.dist-info/METADATA": info}


SOURCE_DIRECTORIES = ("src", "lib")
"""Directories a layout keeps its importable code in, below the root."""


def source_roots(repo: SourceRepository) -> list[str]:
    """Directories to put on ``sys.path`` besides the root: ``src`` or ``lib`` when it holds a
    package (``src/pkg/__init__.py``) or a module of its own (toposort's ``src/toposort.py``,
    markdown2's ``lib/markdown2.py``), as the layout's install would."""
    roots = []
    for root in SOURCE_DIRECTORIES:
        for path in repo.python_files:
            parts = path.split("/")
            if parts[0] == root and (len(parts) > 2 or parts[-1] not in ("setup.py", "conftest.py", "__init__.py")):
                roots.append(root)
                break
    return roots


def local_modules(repo: SourceRepository) -> set[str]:
    """Top-level module names the repository itself provides (below its source roots too)."""
    roots = set(source_roots(repo))
    names = set()
    for path in repo.python_files:
        parts = path.split("/")
        if parts[0] in roots and len(parts) > 1:
            parts = parts[1:]
        names.add(parts[0][:-3] if parts[0].endswith(".py") else parts[0])
    return names


def pytest_arguments(repo: SourceRepository, candidates: Sequence[Candidate]) -> list[str]:
    """Command-line arguments of the tracing pytest run (and of the audit's run of the
    repository's tests). ``-rfEs`` lists why tests were skipped (a test that
    ``pytest.importorskip``s a module this sandbox lacks says ``No module named``, and the
    module is installed like one an import needs) besides pytest's default failures and
    errors: ``-rs`` alone drops the ``ERROR file - NameError: ...`` lines of files that
    failed to collect, which say why a suite ran no test."""
    args = [
        "-q",
        "-rfEs",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-p",
        "no:randomly",
        "--continue-on-collection-errors",
        *test_files(repo),
    ]
    doctests = doctest_files(repo, candidates)
    if doctests:
        args += ["--doctest-modules", *doctests]
    return args


def _targets(candidates: Sequence[Candidate]) -> list[dict[str, Any]]:
    return [
        {
            "key": c.key,
            "file": c.file,
            "lines": sorted({c.start_line, c.def_line}),
            "name": c.name,
            "kind": c.kind,
            "class_name": c.class_name,
        }
        for c in candidates
    ]


def trace_repository(
    sandbox: Sandbox,
    repo: SourceRepository,
    candidates: Sequence[Candidate],
    *,
    timeout: float = WALL_TIMEOUT,
    max_calls_per_target: int = 40,
    test_timeout: float = TEST_CPU_SECONDS,
    cpu_seconds: float = CPU_BUDGET,
    max_events: int = CALL_BUDGET,
    verify: bool = True,
) -> TraceResult:
    """Run the repository's tests in the sandbox and record the candidates' calls, then keep
    those a second run makes again (``verify``: :func:`verify_trace`).

    Args:
        sandbox: where the tests run.
        repo: the repository (all its files go into the run directory).
        candidates: the functions whose calls to record.
        timeout: seconds for the whole run (wall clock, a safety limit); the suite stops
            15 s before, and a test still running 5 s before is cut (``timed_out``, ``cut``).
            Both guards stretch while the tests compute, up to ``WALL_STRETCH`` times as long
            (a loaded machine does not change what is traced); the sandbox's own timeout is
            that much longer.
        max_calls_per_target: most calls kept per candidate (spread over the tests).
        test_timeout: CPU seconds per test before it is interrupted (the wall clock stops
            it only at ``WALL_FACTOR`` times that, a safety limit counted in ``wall_stops``).
        cpu_seconds: CPU seconds for the whole run (a safety limit), its RLIMIT_CPU in
            place of the sandbox's limit for one evaluation. The suite stops between tests a
            few seconds before; a test that overruns its own limit up to this one is cut by
            SIGXCPU (``cpu_limited``, ``cut``).
        max_events: the budget: Python calls the tracer's hook may see; the suite stops
            after the test that reaches it (``budget_limited``). A count, so the tests
            traced are the same in every run, whatever the machine's load.
        verify: run the tests that recorded calls again and keep only the calls made again
            (:func:`verify_trace`); ``False`` for a run whose result decides only what to
            install before the suite is traced again.

    Raises:
        SandboxError: the sandbox itself failed (infrastructure).
    """
    if not candidates or not (test_files(repo) or doctest_files(repo, candidates)):
        return TraceResult(calls={c.key: [] for c in candidates}, errors=["no tests to run"])
    limits: dict[str, Any] = {
        "timeout": timeout,
        "test_timeout": test_timeout,
        "cpu_seconds": cpu_seconds,
        "max_events": max_events,
    }
    config = _config(repo, candidates, max_calls_per_target, **limits)
    traced = _run(sandbox, repo, candidates, {**config, "pools": True}, timeout, cpu_seconds)
    traced.max_calls = max_calls_per_target
    return verify_trace(sandbox, repo, candidates, traced, **limits) if verify else traced


def _config(
    repo: SourceRepository,
    candidates: Sequence[Candidate],
    max_calls: int,
    *,
    timeout: float,
    test_timeout: float,
    cpu_seconds: float,
    max_events: int,
) -> dict[str, Any]:
    return {
        "targets": _targets(candidates),
        "max_calls": max_calls,
        "max_events": max_events,
        "test_timeout": test_timeout,
        "deadline": max(5.0, timeout - 15.0),
        "cut": max(5.0, timeout - 5.0),
        "sys_path": source_roots(repo),
        "args": pytest_arguments(repo, candidates),
    }


def _run(
    sandbox: Sandbox,
    repo: SourceRepository,
    candidates: Sequence[Candidate],
    config: dict[str, Any],
    timeout: float,
    cpu_seconds: float,
) -> TraceResult:
    """One run of the tracer; a result with no calls and the reason when it gave none."""
    run = run_program(
        sandbox,
        "trace",
        suite_files(repo),
        config,
        timeout=WALL_STRETCH * timeout,
        token=True,
        max_chars=MAX_RESULT_CHARS,
        cpu_seconds=cpu_seconds,
    )
    result = run.result
    traced = _result(run.payload, repo, candidates, result.duration) if run.completed else None
    if traced is None:
        why = "timed out" if result.timed_out else f"exited with {result.returncode}"
        logger.warning("tracing %s %s (%s)", repo.name, why, run.problem or "a malformed result")
        return TraceResult(
            calls={c.key: [] for c in candidates},
            timed_out=result.timed_out,
            errors=[f"the tracer {why}: {(result.stderr or '')[-300:]}"],
            duration=result.duration,
        )
    return traced


def verify_trace(
    sandbox: Sandbox,
    repo: SourceRepository,
    candidates: Sequence[Candidate],
    traced: TraceResult,
    *,
    timeout: float = WALL_TIMEOUT,
    test_timeout: float = TEST_CPU_SECONDS,
    cpu_seconds: float = CPU_BUDGET,
    max_events: int = CALL_BUDGET,
) -> TraceResult:
    """``traced`` with only the calls that a second run of the tests that made them makes again.

    A value a test computes from the clock, from the operating system's random source
    (``uuid4()``, ``os.urandom``) or from a temporary path is another in every run, so two
    builds of the same sdist traced other calls and made other tasks (boltons' ``daterange``
    called with ``date.today()``, ``is_uuid`` with ``uuid4()``; funcy's ``format_time`` with
    an elapsed time). The verification run runs, in another run directory, only the tests
    that recorded calls, with the clock the standard library's Python functions read moved
    :data:`CLOCK_SHIFT` ahead (:func:`gym_repost.programs.trace.shift_clock`), and reports
    the calls it saw; a call it did not see is dropped (counted in ``unsteady``). The calls
    kept are then chosen as the first run would have (:func:`gym_repost.programs.trace.select`).
    If the second run gives no result, no call is kept.
    """
    from gym_repost.programs.trace import call_digest, select

    tests = sorted({entry[1] for pool in traced.pools.values() for entry in pool})
    if not tests:
        return replace(traced, verified=True, pools={})
    limits: dict[str, Any] = {
        "timeout": timeout,
        "test_timeout": test_timeout,
        "cpu_seconds": cpu_seconds,
        "max_events": max_events,
    }
    config = _config(repo, candidates, traced.max_calls, **limits)
    config["verify"] = {"tests": tests, "clock_shift": CLOCK_SHIFT}
    again = _run(sandbox, repo, candidates, config, timeout, cpu_seconds)
    made = {key: set(found) for key, found in again.digests.items()}
    calls: dict[str, list[RecordedCall]] = {}
    unsteady = 0
    for candidate in candidates:
        kept: tuple[list[Any], list[Any]] = ([], [])
        for function, _test, call, spare in traced.pools.get(candidate.key, []):
            if call_digest((call["instance"], call["args"], call["kwargs"])) in made.get(candidate.key, ()):
                kept[bool(spare)].append((function, call))
            else:
                unsteady += 1
        calls[candidate.key] = [_recorded(r) for r in select(kept[0], kept[1], traced.max_calls)]
    return replace(
        traced,
        calls=calls,
        verified=True,
        unsteady=unsteady,
        pools={},
        errors=traced.errors + [f"the verification run: {e}" for e in again.errors[:3]],
        timed_out=traced.timed_out or again.timed_out,
        cpu_limited=traced.cpu_limited or again.cpu_limited,
        budget_limited=traced.budget_limited or again.budget_limited,
        cut=traced.cut or again.cut,
        wall_stops=traced.wall_stops + again.wall_stops,
        duration=traced.duration + again.duration,
        verify_cpu_seconds=again.cpu_seconds,
    )


def _result(
    data: dict[str, Any] | None, repo: SourceRepository, candidates: Sequence[Candidate], duration: float
) -> TraceResult | None:
    """The tracer's result; None when it is malformed (the repository's tests share the output)."""
    try:
        return _read_result(data or {}, repo, candidates, duration)
    except (KeyError, TypeError, AttributeError, ValueError):
        return None


def _read_result(
    data: dict[str, Any], repo: SourceRepository, candidates: Sequence[Candidate], duration: float
) -> TraceResult:
    local = local_modules(repo)
    missing = [m for m in data["missing"] if m not in local and m not in sys.stdlib_module_names]
    missing += [m for m in guarded_modules(repo, data.get("undefined")) if m not in missing]
    calls = {c.key: [_recorded(r) for r in data["calls"].get(c.key, [])] for c in candidates}
    return TraceResult(
        calls=calls,
        missing_modules=missing,
        errors=data["errors"],
        tests_run=data["tests_run"],
        tests_failed=data["tests_failed"],
        timed_out=data["deadline_hit"],
        budget_limited=bool(data.get("budget_hit")),
        cpu_limited=bool(data["cpu_limit_hit"]),
        cut=bool(data["cut"]),
        wall_stops=int(data.get("wall_stops", 0)),
        duration=duration,
        events=int(data.get("events", 0)),
        cpu_seconds=float(data.get("cpu", 0.0)),
        pools=_pools(data.get("pools") or {}),
        digests={str(k): [str(d) for d in v] for k, v in dict(data.get("digests") or {}).items()},
    )


def _pools(data: Any) -> dict[str, list[Any]]:
    """The tracer's pools, checked entry by entry (ValueError: a malformed result; the
    repository's tests run in the process that wrote it)."""
    pools: dict[str, list[Any]] = {}
    for key, entries in dict(data).items():
        pools[str(key)] = []
        for function, test, call, spare in entries:
            if not (isinstance(function, str) and isinstance(test, str) and isinstance(spare, bool)):
                raise ValueError("a malformed pool entry")
            _recorded(call)
            pools[str(key)].append([function, test, call, spare])
    return pools


def _recorded(r: dict[str, Any]) -> RecordedCall:
    args, kwargs, instance = r["args"], r["kwargs"], r["instance"]
    if not (isinstance(args, str) and isinstance(kwargs, str) and (instance is None or isinstance(instance, str))):
        raise ValueError("a malformed call")
    return RecordedCall(
        args=args,
        kwargs=kwargs,
        instance=instance,
        names=tuple(sorted((str(q), str(m)) for q, m in dict(r.get("names") or {}).items())),
    )


def trace_with_installs(
    sandbox: Sandbox,
    repo: SourceRepository,
    candidates: Sequence[Candidate],
    install: Callable[[str], bool],
    *,
    max_rounds: int = 3,
    **options: Any,
) -> TraceResult:
    """:func:`trace_repository`, installing missing modules and tracing again.

    Args:
        install: installs the distribution for a top-level module name; True on success
            (e.g. ``lambda m: installer.install_for(m)[0]``).
        max_rounds: most install-and-retrace rounds.
        options: passed to :func:`trace_repository`.
    """
    tried: set[str] = set()
    verify = options.pop("verify", True)
    result = trace_repository(sandbox, repo, candidates, verify=False, **options)
    for _ in range(max_rounds):
        todo = [m for m in result.missing_modules if m not in tried]
        if not todo:
            break
        tried.update(todo)
        if not any([install(m) for m in todo]):
            break
        result = trace_repository(sandbox, repo, candidates, verify=False, **options)
    if not verify:
        return result
    limits = {k: v for k, v in options.items() if k in ("timeout", "test_timeout", "cpu_seconds", "max_events")}
    return verify_trace(sandbox, repo, candidates, result, **limits)
