"""Mine test-file tasks: pairs of a focal file and the repository's own test file for it.

``gym-repost build SOURCE --kind testfile`` ends here. Pairing works on text, as
methods2test/pymethod2test pair tests with their focal code, at file level:

1. *Test files*: ``test_*.py`` and ``*_test.py`` (``conftest.py`` excluded). Focal files
   are the other Python files that define a function or a class, outside test
   directories (``test``, ``tests``, ``testing``) and outside ``docs``/``examples``.
2. *Name*: ``test_strutils.py`` (or ``strutils_test.py``) names ``strutils.py``; longer
   names are cut at underscores (``test_tbutils_parsed_exc.py`` -> ``tbutils``), and a
   leading underscore of the module is ignored (``_deprecated``).
3. *Imports*: the repository modules the test file imports, each credited once per name
   imported from it; names a package re-exports (``from .version import Version`` in
   ``__init__.py``) are credited to the module that defines them.
4. The focal file is the named module the test imports (``name+import``); else the only
   module with that name (``name``); else the module credited with at least 60% of the
   imports (``import``). Anything else is dropped (``no focal file``, ``ambiguous``).

Each pair's ground truth is then run in the sandbox as a candidate would be
(:func:`~gym_repost.harness.testfile.run_test_file`, mutants included); pairs
whose ground truth does not run, fails a test, or barely covers its focal file are
dropped, and the kept ones record the ground truth's metrics as the task's reference.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import posixpath
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from gym_repost.analysis.packages import distribution_for
from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.pytest_files import count_assertions, count_tests, plugins_used
from gym_repost.construct.execution import PackageInstaller, missing_module, own_packages
from gym_repost.construct.stages import Drop, SourceRepository
from gym_repost.executor import Executor, need_sandbox, with_sandbox
from gym_repost.harness.testfile import TestFileRun, import_errors, run_test_file, session_problems
from gym_repost.harness.testfile_scoring import file_runs, metrics_from_run
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import (
    Provenance,
    RepositoryView,
    TaskMetadata,
    TestFileEvaluation,
    TestFileMetrics,
    TestFileTask,
)

logger = logging.getLogger(__name__)

_TEST_DIRS = frozenset({"test", "tests", "testing"})
_SKIP_DIRS = frozenset({"docs", "doc", "examples", "example", "benchmarks", "scripts"})
_STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
_DOMINANT = 0.6
_MAX_INSTALLS = 5
"""Most distributions a pair's measurement installs (as a function build's ground truth)."""


@dataclass(frozen=True)
class TestFilePair:
    """A test file and the focal file it tests."""

    __test__ = False  # not a pytest test class

    test_path: str
    focal_file: str
    focal_module: str
    python_path: tuple[str, ...]
    evidence: str
    """How the pair was found: ``name+import``, ``name`` or ``import``."""


@dataclass
class TestFileBuildSettings:
    """What a test-file build keeps, and the limits its tasks carry."""

    __test__ = False  # not a pytest test class

    min_pass_rate: float = 1.0
    """The ground truth's tests that must pass (1.0: all; the oracle must be able to pass)."""
    min_line_coverage: float = 0.2
    """Least line coverage of the focal file by the ground truth."""
    max_mutants: int = 50
    """The seeded cap on mutants per focal file, stored with each task."""
    timeout: float = 60.0
    test_timeout: float = 10.0
    mutation_timeout: float = 120.0
    constraints: tuple[str, ...] = ()
    """Pins (``NAME==VERSION``) every install of the build is held to
    (:func:`~gym_repost.construct.execution.read_constraints`)."""


@dataclass
class _Module:
    path: str
    name: str
    root: str
    is_test: bool
    focal: bool
    exports: dict[str, str] = field(default_factory=dict)
    """Names a package re-exports -> the module defining them."""


def is_test_file(path: str) -> bool:
    """``test_*.py`` or ``*_test.py`` (``conftest.py`` is not one)."""
    base = posixpath.basename(path)
    return base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py"))


def _import_root(path: str, files: dict[str, str]) -> str:
    directory = posixpath.dirname(path)
    while directory and posixpath.join(directory, "__init__.py") in files:
        directory = posixpath.dirname(directory)
    return directory


def _module_name(path: str, root: str) -> str:
    rel = path[len(root) + 1 :] if root else path
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _defines_code(tree: ast.Module) -> bool:
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body)


def _parse(text: str) -> ast.Module | None:
    try:
        return parse_python(text)
    except (SyntaxError, ValueError):
        return None


def module_index(files: dict[str, str]) -> dict[str, _Module]:
    """Every parseable Python file of the repository by dotted module name."""
    index: dict[str, _Module] = {}
    trees: dict[str, ast.Module] = {}
    for path in sorted(p for p in files if p.endswith(".py")):
        tree = _parse(files[path])
        root = _import_root(path, files)
        name = _module_name(path, root)
        if tree is None or not name or name in index:
            continue
        dirs = set(path.split("/")[:-1])
        in_tests = bool(dirs & _TEST_DIRS) or is_test_file(path) or posixpath.basename(path) == "conftest.py"
        focal = not in_tests and not dirs & _SKIP_DIRS and path != "setup.py" and _defines_code(tree)
        index[name] = _Module(path, name, root, is_test_file(path), focal)
        trees[name] = tree
    for name, module in index.items():
        if module.path.endswith("__init__.py"):
            module.exports = _exports(trees[name], name, index, trees)
    return index


def _resolve(node: ast.ImportFrom, package: str) -> str | None:
    if node.level == 0:
        return node.module
    base = package.split(".")
    if node.level - 1 > len(base):
        return None
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base) or None


def _exports(tree: ast.Module, package: str, index: dict[str, _Module], trees: dict[str, ast.Module]) -> dict[str, str]:
    exports: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        source = _resolve(node, package)
        if source not in index or source == package:
            continue
        for alias in node.names:
            if alias.name == "*":
                exports.update(dict.fromkeys(_public_names(trees[source]), source))
            else:
                exports[alias.asname or alias.name] = source
    return exports


def _public_names(tree: ast.Module) -> list[str]:
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return [n for n in names if not n.startswith("_")]


def imported_modules(tree: ast.Module, package: str, index: dict[str, _Module]) -> Counter[str]:
    """Repository modules a test file imports, credited once per name imported from them."""
    credits: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found = _deepest(alias.name, index)
                if found:
                    credits[found] += 1
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(node, package)
            if source is None:
                continue
            for alias in node.names:
                found = _from_import(source, alias.name, index)
                if found:
                    credits[found] += 1
    return credits


def _deepest(dotted: str, index: dict[str, _Module]) -> str | None:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in index:
            return ".".join(parts[:end])
    return None


def _from_import(source: str, name: str, index: dict[str, _Module]) -> str | None:
    if f"{source}.{name}" in index:
        return f"{source}.{name}"
    module = index.get(source)
    if module is None:
        return _deepest(source, index)
    return module.exports.get(name, source)


def _stem_names(test_path: str) -> list[str]:
    stem = posixpath.basename(test_path)[:-3]
    stem = stem[5:] if stem.startswith("test_") else stem[:-5] if stem.endswith("_test") else stem
    words = [w for w in stem.split("_") if w]
    return ["_".join(words[:end]) for end in range(len(words), 0, -1)]


def find_focal(test_path: str, files: dict[str, str], index: dict[str, _Module]) -> tuple[_Module | None, str]:
    """The focal module of a test file and how it was found, or None and why not."""
    tree = _parse(files[test_path])
    if tree is None:
        return None, "test file does not parse"
    package = _module_name(test_path, _import_root(test_path, files)).rpartition(".")[0]
    credits = Counter({m: c for m, c in imported_modules(tree, package, index).items() if index[m].focal})
    for stem in _stem_names(test_path):
        named = [m for m in index.values() if m.focal and m.name.rpartition(".")[2].lstrip("_") == stem]
        imported = [m for m in named if credits[m.name]]
        if imported:
            return max(imported, key=lambda m: (credits[m.name], m.name)), "name+import"
        if len(named) == 1:
            return named[0], "name"
        if len(named) > 1:
            return None, "ambiguous focal file"
    total = sum(credits.values())
    if total:
        best, count = max(credits.items(), key=lambda item: (item[1], item[0]))
        if count >= _DOMINANT * total:
            return index[best], "import"
        return None, "ambiguous focal file"
    return None, "no focal file"


def find_pairs(repo: SourceRepository) -> tuple[list[TestFilePair], list[Drop]]:
    """Every test file of the repository paired with its focal file (or dropped)."""
    index = module_index(repo.files)
    pairs, drops = [], []
    for path in sorted(p for p in repo.files if is_test_file(p)):
        module, how = find_focal(path, repo.files, index)
        if module is None:
            drops.append(Drop(path, "", "extract", how))
            continue
        roots = tuple(dict.fromkeys(["", module.root]))
        pairs.append(TestFilePair(path, module.path, module.name, roots, how))
    return pairs, drops


def pair_rank(pair: TestFilePair, seed: int) -> bytes:
    """A seeded, platform-independent rank: ``max_pairs`` keeps the lowest ranks."""
    return hashlib.blake2b(f"{seed}\0{pair.test_path}".encode(), digest_size=8).digest()


def _requirements(sources: Iterable[str], own: set[str]) -> list[str]:
    """The distributions the modules ``sources`` import at run time: not the standard
    library's, not the repository's own (``own``), not pytest, and not what only a type
    checker imports (``if TYPE_CHECKING:``, such as ``_typeshed``)."""
    names: set[str] = set()
    for text in sources:
        tree = _parse(text)
        for node in _run_time_nodes(tree) if tree else ():
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    third = sorted(n for n in names if n not in _STDLIB and n not in own and n not in ("pytest", "_pytest"))
    return sorted({distribution_for(n) for n in third})


def _run_time_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` but the bodies of ``if TYPE_CHECKING:``."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _own_modules(repo: SourceRepository) -> set[str]:
    """The top-level names the repository's own modules are imported by."""
    return {_module_name(p, _import_root(p, repo.files)).split(".")[0] for p in repo.python_files}


def make_task(
    repo: SourceRepository, pair: TestFilePair, settings: TestFileBuildSettings, seed: int = 0
) -> TestFileTask:
    """The task of a pair, its reference not yet measured."""
    ground_truth = repo.files[pair.test_path]
    tree = _parse(ground_truth) or ast.Module(body=[], type_ignores=[])
    own = _own_modules(repo)
    view = {p: t for p, t in repo.files.items() if p != pair.test_path}
    evaluation = TestFileEvaluation(
        test_path=pair.test_path,
        focal_file=pair.focal_file,
        focal_module=pair.focal_module,
        python_path=list(pair.python_path),
        ground_truth=ground_truth,
        requirements=_requirements([ground_truth, repo.files[pair.focal_file]], own),
        plugins=plugins_used(tree),
        timeout=settings.timeout,
        test_timeout=settings.test_timeout,
        max_mutants=settings.max_mutants,
        mutant_seed=seed,
        mutation_timeout=settings.mutation_timeout,
    )
    provenance = Provenance(
        source=repo.source,
        repo=repo.name,
        version=repo.version,
        file=pair.focal_file,
        qualname=pair.focal_module,
        license=repo.license,
        url=repo.url,
    )
    metadata = TaskMetadata(
        num_tests=count_tests(ground_truth),
        num_asserts=count_assertions(ground_truth),
        external_packages=evaluation.requirements,
        checks={"pairing": pair.evidence},
    )
    return TestFileTask(
        name=f"{repo.name}/{pair.test_path}",
        provenance=provenance,
        repository=RepositoryView(files=view, target_file=pair.focal_file),
        evaluation=evaluation,
        reference=TestFileMetrics(),
        metadata=metadata,
    )


def measure_pair(
    repo: SourceRepository, pair: TestFilePair, sandbox: Sandbox, settings: TestFileBuildSettings, seed: int = 0
) -> TestFileTask | Drop:
    """Run the pair's ground truth; the task with its reference, or why it is dropped.

    The run sees a package set of its own (:func:`~gym_repost.construct.execution.own_packages`),
    empty at first: what a module it imports is missing is installed into it (the
    distributions the task then requires, held to ``settings.constraints``) and the ground
    truth run again, so what is kept never depends on what other builds installed.

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    task = make_task(repo, pair, settings, seed)
    with own_packages(sandbox) as (box, shared):
        installer = PackageInstaller(box, refuse=frozenset(_own_modules(repo)), constraints=settings.constraints)
        run = run_test_file(box, task, task.ground_truth)
        tried: set[str] = set()
        while len(tried) < _MAX_INSTALLS and (module := missing_module(import_errors(run, task.ground_truth), tried)):
            tried.add(module)
            ok, what = installer.install_for(module)
            logger.info("%s: %s", pair.test_path, what)
            if not ok:
                break
            run = run_test_file(box, task, task.ground_truth)
    metrics = metrics_from_run(run)
    drop = _quality_drop(pair, run, metrics, settings)
    if drop is not None:
        return drop
    requirements = sorted({*task.evaluation.requirements, *installer.installed})
    task.evaluation.requirements = task.metadata.external_packages = requirements
    if shared:
        task.metadata.notes.append(shared)
    task.reference = metrics
    task.metadata.branch_coverage = metrics.branch_coverage
    task.metadata.checks["ground_truth_mutation_status"] = run.mutation_status
    if run.mutation_status == "timeout":
        # the mutation budget (CPU seconds) or its wall-clock guard ran out: say so rather than hide it
        not_run = sum(m.status == "not run" for m in run.mutants)
        note = (
            f"the mutation run was cut short ({run.mutation_message or 'its budget ran out'}) with "
            f"{not_run} mutant(s) not run; they count as surviving in the reference mutation score"
        )
        logger.warning("%s: %s", pair.test_path, note)
        task.metadata.notes.append(note)
    return task.with_id()


def _quality_drop(
    pair: TestFilePair, run: TestFileRun, metrics: TestFileMetrics, settings: TestFileBuildSettings
) -> Drop | None:
    if not file_runs(run):
        # a conftest.py that failed to load, a skipped module or skipped tests: no collection error
        skips = [f"{t.nodeid} skipped: {t.message}" for t in run.tests if t.outcome == "skipped" and t.message]
        problems = " ".join([*session_problems(run), *skips[:1]])
        cause = run.collection_errors[0].message if run.collection_errors else problems or run.message or "no test ran"
        reason = "ground truth timed out" if run.status == "timeout" else "ground truth does not run"
        return Drop(pair.test_path, pair.focal_module, "execution", reason, cause[:300])
    if metrics.pass_rate < settings.min_pass_rate:
        failing = [t.nodeid for t in run.tests if t.outcome in ("failed", "error", "timeout")]
        return Drop(
            pair.test_path,
            pair.focal_module,
            "execution",
            "ground truth fails",
            f"{len(failing)} failing: {', '.join(failing[:3])}",
        )
    if metrics.line_coverage < settings.min_line_coverage:
        return Drop(
            pair.test_path,
            pair.focal_module,
            "quality",
            "low coverage",
            f"line coverage {metrics.line_coverage:.2f} < {settings.min_line_coverage}",
        )
    return None


def mining_summary(repo: SourceRepository, tasks: list[TestFileTask], drops: list[Drop]) -> dict[str, object]:
    """Counts of a build: test files, pairs found and measured, tasks kept; drops by reason."""
    pairs, unpaired = find_pairs(repo)
    reasons: Counter[tuple[str, str]] = Counter((d.stage, d.reason) for d in drops)
    measured = len(tasks) + sum(d.stage != "extract" for d in drops)
    return {
        "test_files": len(pairs) + len(unpaired),
        "pairs": len(pairs),
        "pairs_measured": measured,
        "kept": len(tasks),
        "drops": [
            {
                "stage": stage,
                "reason": reason,
                "count": count,
                "example": next(d.file for d in drops if (d.stage, d.reason) == (stage, reason)),
            }
            for (stage, reason), count in reasons.most_common()
        ],
    }


@dataclass(frozen=True)
class _PairWork:
    """Measuring one (test file, focal file) pair: a unit of :func:`build_testfile_tasks`."""

    repo: SourceRepository
    settings: TestFileBuildSettings
    seed: int

    def __call__(self, pair: TestFilePair, sandbox: Sandbox | None) -> TestFileTask | Drop:
        return measure_pair(self.repo, pair, need_sandbox(sandbox, "a test-file measurement"), self.settings, self.seed)


def build_testfile_tasks(
    repo: SourceRepository,
    sandbox: Sandbox | None = None,
    *,
    max_pairs: int = 30,
    seed: int = 0,
    settings: TestFileBuildSettings | None = None,
    workers: int = 2,
    on_pair: Callable[[TestFileTask | Drop], None] | None = None,
    executor: Executor | None = None,
) -> tuple[list[TestFileTask], list[Drop]]:
    """Mine test-file tasks from a repository.

    Pairs are tried in a seeded order until ``max_pairs`` are kept; each try runs the
    ground truth once in the sandbox (with its mutants). Pairs are measured in rounds of
    as many as are still wanted, so the pairs measured, and those kept, are the same
    whatever the executor and its workers: the shortest run of the seeded order that
    holds ``max_pairs`` kept pairs.

    Args:
        repo: the ingested repository.
        sandbox: a started sandbox (``preload=["pytest", "coverage"]`` makes it fast);
            None with an executor that has its own (Ray's actors, or one given a sandbox
            config).
        max_pairs: most tasks to keep (0: every pair that passes).
        seed: order of the pairs tried, and the mutant sample of every task.
        settings: thresholds and limits.
        workers: ground truths run at once on the default executor.
        on_pair: called in this process with each kept task or drop, as they finish.
        executor: where the ground truths run, one pair a unit of work (default:
            ``workers`` threads over ``sandbox``).

    Returns:
        The kept tasks (in the seeded order) and every drop (pairing and measurement).

    Raises:
        SandboxError: the sandbox failed (infrastructure).
        ConfigError: neither ``sandbox`` nor ``executor`` gives the pairs a sandbox.
    """
    settings = settings or TestFileBuildSettings()
    pairs, drops = find_pairs(repo)
    pairs.sort(key=lambda p: pair_rank(p, seed))
    kept: list[TestFileTask] = []
    runner, work = with_sandbox(executor, sandbox, workers), _PairWork(repo, settings, seed)
    tried = 0
    wanted = max_pairs if max_pairs > 0 else len(pairs)
    while tried < len(pairs) and len(kept) < wanted:
        batch = pairs[tried : tried + wanted - len(kept)]  # all may be kept: never more measured than needed
        tried += len(batch)
        for outcome in runner.map(work, batch, on_pair):
            (kept if isinstance(outcome, TestFileTask) else drops).append(outcome)  # type: ignore[arg-type]
    logger.info("%s: %d test files paired, %d tasks kept, %d dropped", repo.name, len(pairs), len(kept), len(drops))
    return kept, drops
