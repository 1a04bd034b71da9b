"""Task models and task-set I/O.

A task set is a JSONL file, one task per line. Every task is self-contained: the
repository view the agent may read, the evaluation script, the extra files the script
needs and the packages it imports all travel inside the line, so copying the file to
another machine is enough to run it offline.

Each line carries ``schema_version`` and a content-hash ``id`` (SHA-256 over the
canonical JSON of every other field), so runs can refer to tasks by id and an edited
task is detected.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gym_repost.errors import ConfigError, TaskFormatError, json_error_text

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""Version of the task JSONL schema written by this release."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Provenance(_Model):
    """Where a task comes from."""

    source: str
    """The source the task was built from: ``humaneval``, ``repost-eval``,
    ``manifest:NAME``, ``pypi:NAME==VERSION``, ``dir:NAME`` (a directory) or
    ``archive:FILE`` (never how a path was typed: the id depends on content only)."""
    repo: str
    """Name of the repository (or package) the target function belongs to."""
    version: str | None = None
    """Commit id or package version of the repository."""
    file: str
    """Path of the target's file inside the repository (POSIX, relative)."""
    qualname: str
    """Qualified name of the target inside its file: ``func`` or ``Class.method``."""
    license: str | None = None
    """SPDX identifier (or the license's name) of the repository, when known."""
    url: str | None = None
    """Where the repository can be found, when known."""


class Target(_Model):
    """The function the agent must write."""

    name: str
    """The function's own name (last part of the qualified name)."""
    qualname: str
    """``func`` or ``Class.method``."""
    class_name: str | None = None
    """Enclosing class for methods, else None."""
    signature: str
    """The ``def`` line(s), decorators excluded, ending with ``:``."""
    decorators: list[str] = Field(default_factory=list)
    """Decorator lines (without the ``@``), outermost first."""
    docstring: str | None = None
    """The original docstring, if any."""
    source: str
    """The original source of the function, decorators included, dedented: the ground truth."""

    @property
    def kind(self) -> Literal["function", "method"]:
        """``method`` when the target lives in a class."""
        return "method" if self.class_name else "function"


class RepositoryView(_Model):
    """The files the agent may read: the repository with the target's body removed."""

    files: dict[str, str]
    """POSIX relative path to text."""
    target_file: str
    """The file that holds the target (its body replaced by a placeholder)."""
    complete: bool = True
    """False when only the files of the dependency context are present."""


class Evaluation(_Model):
    """The evaluation script and how a candidate is placed into it."""

    script: str
    """The standalone evaluation script without the candidate: the original target,
    its dependencies and mocks, ``test_{name}()`` and a ``__main__`` that calls it."""
    insert_line: int = Field(ge=0)
    """0-based line index: the candidate is inserted before this line of ``script``."""
    indent: str = ""
    """Indentation applied to every candidate line (a class body's, for methods)."""
    test_function: str
    """Name of the test function the ``__main__`` block calls."""
    timeout: float = Field(default=10.0, gt=0)
    """CPU seconds each process of one run of the script may use (RLIMIT_CPU); a run that
    waits without computing is stopped at three times as many seconds of the wall clock
    (:data:`gym_repost.harness.WALL_FACTOR`), so a loaded machine changes no verdict."""
    files: dict[str, str] = Field(default_factory=dict)
    """Extra files written beside the script before it runs (example inputs, fixtures)."""
    requirements: list[str] = Field(default_factory=list)
    """Distributions (pip names) the script needs beyond the standard library."""


class TaskMetadata(_Model):
    """Facts about the task, measured or recorded when it was built."""

    num_tests: int = 0
    """Number of test functions in the script."""
    num_asserts: int = 0
    """Number of ``assert`` statements in the test functions."""
    branch_coverage: float | None = None
    """Branch coverage of the target reached by the tests (0..1), None if not measured."""
    standalone: bool = True
    """True when the target uses nothing else from its repository."""
    external_packages: list[str] = Field(default_factory=list)
    """Top-level import names outside the standard library used by the script."""
    split: Literal["train", "eval"] | None = None
    """The split the task was built for, when known."""
    checks: dict[str, Any] = Field(default_factory=dict)
    """Quality checks recorded by the builder (or published with an imported set)."""
    notes: list[str] = Field(default_factory=list)
    """Known issues of the task, written by the importer or builder."""


class FunctionTask(_Model):
    """A RepoST function task: write a function of a real repository.

    The candidate is inserted into :attr:`evaluation` ``.script`` under the name
    ``{target.name}_new_implementation`` (inside the class for methods) and the script's
    equivalence tests compare it with the original.
    """

    schema_version: int = SCHEMA_VERSION
    kind: Literal["function"] = "function"
    id: str = ""
    """Content hash of every other field; filled in by :meth:`with_id`."""
    name: str
    """Human-readable name, unique within its task set (``humaneval/HumanEval_0``)."""
    provenance: Provenance
    target: Target
    repository: RepositoryView
    evaluation: Evaluation
    context: str = ""
    """Dependency-only context: the modules the target depends on, as markdown blocks
    headed ``## path`` (as R2E and RepoST build it)."""
    prompt: str | None = None
    """A generation prompt published with the source data, when there is one."""
    metadata: TaskMetadata = Field(default_factory=TaskMetadata)

    def content_hash(self) -> str:
        """SHA-256 (first 16 hex digits) of the canonical JSON of every field but ``id``."""
        payload = self.model_dump(mode="json", exclude={"id"})
        canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def with_id(self) -> FunctionTask:
        """Return this task with its ``id`` set to its content hash."""
        self.id = self.content_hash()
        return self

    @property
    def ground_truth(self) -> str:
        """The original source of the target function."""
        return self.target.source


class TestFileEvaluation(_Model):
    """Where a test file goes, how it runs and how it is scored.

    The test file is written at :attr:`test_path` inside a copy of the repository view
    and run with pytest from the repository root (the repository's own pytest
    configuration is ignored; its ``conftest.py`` files are used). Coverage and mutants
    are those of :attr:`focal_file`.
    """

    __test__ = False  # not a pytest test class

    test_path: str
    """Where the test file is placed: the ground truth's own path (POSIX, relative)."""
    focal_file: str
    """The file under test (POSIX, relative)."""
    focal_module: str
    """Dotted module name the tests import the focal file by."""
    python_path: list[str] = Field(default_factory=lambda: [""])
    """Directories (relative to the root, ``""`` is the root) put first on ``sys.path``."""
    ground_truth: str
    """The repository's own test file: hidden from the agent."""
    requirements: list[str] = Field(default_factory=list)
    """Distributions (pip names) the tests need beyond the standard library and pytest."""
    plugins: list[str] = Field(default_factory=list)
    """pytest plugins loaded with ``-p`` (third-party plugins are not auto-loaded)."""
    timeout: float = Field(default=60.0, gt=0)
    """CPU seconds the whole test file may take (its run, and the coverage replay of its
    calls); a run that waits without computing is stopped at three times as many seconds
    of the wall clock."""
    test_timeout: float = Field(default=10.0, gt=0)
    """CPU seconds one test may take (and one replayed call); waiting, three times as
    many seconds of the wall clock."""
    max_mutants: int = Field(default=50, ge=0)
    """Seeded cap on the mutants of the focal file run per scoring (0: no mutation score)."""
    mutant_seed: int = 0
    """Seed of the mutant sample: the same mutants score every test file of the task."""
    mutation_timeout: float = Field(default=120.0, gt=0)
    """CPU seconds all mutants of one scoring may take together (every mutant's process
    counted); a loaded machine does not change how many are run. Waiting, three times as
    many seconds of the wall clock."""
    timeout_factor: float = Field(default=10.0, gt=0)
    """A mutant's run may take this multiple of its tests' CPU time in the baseline run, ..."""
    timeout_floor: float = Field(default=0.5, gt=0)
    """... plus this many CPU seconds, or three times the CPU time a run of every passing
    test takes in a mutant's process, whichever is larger. The floor covers a mutant's
    fixed costs, which its tests' time does not show: a mutant that breaks the focal
    module's import spends ~0.12 s in pytest's collection error alone."""

    @model_validator(mode="after")
    def _check_paths(self) -> TestFileEvaluation:
        for path in (self.test_path, self.focal_file, *[p for p in self.python_path if p]):
            parts = path.replace("\\", "/").split("/")
            if not path or path.startswith(("/", "\\")) or ".." in parts:
                raise ValueError(f"{path!r} must be a relative path inside the repository")
        return self


class TestFileMetrics(_Model):
    """The scores of one test file (the ground truth's are recorded with the task).

    Rates are in [0, 1]. ``branch_coverage`` is None when the focal file has no branches,
    ``mutation_score`` when no mutant was run.
    """

    __test__ = False  # not a pytest test class

    tests: int = 0
    """Tests collected."""
    passed: int = 0
    failed: int = 0
    """Tests whose assertions failed."""
    errors: int = 0
    """Tests that raised another exception, errored in a fixture, or timed out."""
    skipped: int = 0
    execution_rate: float = 0.0
    """Share of the tests that ran (skipped ones aside) that ran without an error; 0 when
    the file does not parse, import or collect, has no test, or the run timed out."""
    pass_rate: float = 0.0
    """Share of the tests that ran (skipped ones aside) that passed."""
    line_coverage: float = 0.0
    """Share of the focal file's statements run by the passing tests (or at import)."""
    branch_coverage: float | None = None
    """Share of the focal file's branches taken by the passing tests (or at import)."""
    lines: int = 0
    """Statements of the focal file."""
    branches: int = 0
    """Branches of the focal file."""
    mutation_score: float | None = None
    """``(killed + timeouts) / mutants run``."""
    mutants_killed: int = 0
    mutants_timeouts: int = 0
    """Mutants whose run timed out (counted as killed, reported apart)."""
    mutants_total: int = 0
    """Mutants in the score (sampled, minus those that could not be loaded)."""
    mutants_population: int = 0
    """Mutants of the focal file before the seeded cap."""
    mutants_unapplied: int = 0
    """Sampled mutants that could not be loaded into the running module (not scored)."""
    mutation_ci_low: float = 0.0
    """Lower end of the 95% interval of the mutation score (sampling uncertainty)."""
    mutation_ci_high: float = 1.0


class TestFileTask(_Model):
    """A Repo-Smith test-file task: write the tests of a focal file of a real repository.

    The agent sees the repository without the ground-truth test file and writes a pytest
    file placed at ``evaluation.test_path``; it is scored by execution rate, pass rate,
    line and branch coverage and mutation score of the focal file, each also relative to
    :attr:`reference`, the ground truth's scores.
    """

    __test__ = False  # not a pytest test class

    schema_version: int = SCHEMA_VERSION
    kind: Literal["testfile"] = "testfile"
    id: str = ""
    """Content hash of every other field; filled in by :meth:`with_id`."""
    name: str
    """Human-readable name, unique within its task set (``boltons/strutils``)."""
    provenance: Provenance
    """``file`` is the focal file, ``qualname`` its module name."""
    repository: RepositoryView
    """The repository without the ground-truth test file; ``target_file`` is the focal file."""
    evaluation: TestFileEvaluation
    reference: TestFileMetrics
    """The ground-truth test file's scores, measured when the task was built."""
    metadata: TaskMetadata = Field(default_factory=TaskMetadata)

    @model_validator(mode="after")
    def _check_focal_file(self) -> TestFileTask:
        if self.evaluation.focal_file not in self.repository.files:
            raise ValueError(f"the focal file {self.evaluation.focal_file!r} is not in the repository view")
        return self

    def content_hash(self) -> str:
        """SHA-256 (first 16 hex digits) of the canonical JSON of every field but ``id``."""
        payload = self.model_dump(mode="json", exclude={"id"})
        canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def with_id(self) -> TestFileTask:
        """Return this task with its ``id`` set to its content hash."""
        self.id = self.content_hash()
        return self

    @property
    def ground_truth(self) -> str:
        """The repository's own test file."""
        return self.evaluation.ground_truth


Task = Union[FunctionTask, TestFileTask]
"""Any task kind."""

_TASK_KINDS: dict[str, type[FunctionTask] | type[TestFileTask]] = {"function": FunctionTask, "testfile": TestFileTask}


class TaskList(list[Any]):
    """A list of tasks read from a file, plus the lines that could not be read.

    Attributes:
        errors: one :class:`TaskFormatError` per rejected line.
        path: the file the tasks came from.
    """

    def __init__(
        self, tasks: Iterable[Task] = (), *, errors: list[TaskFormatError] | None = None, path: str | None = None
    ) -> None:
        super().__init__(tasks)
        self.errors: list[TaskFormatError] = errors or []
        self.path = path

    def by_id(self) -> dict[str, Task]:
        """Tasks keyed by id."""
        return {t.id: t for t in self}


def parse_task(data: Any, *, path: str | None = None, line: int | None = None, check_id: bool = True) -> Task:
    """Validate one decoded JSON object as a task.

    Raises:
        TaskFormatError: naming the file, the line and the first offending field.
    """
    if not isinstance(data, dict):
        raise TaskFormatError(f"expected a JSON object, got {type(data).__name__}", path=path, line=line)
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise TaskFormatError("missing or non-integer schema_version", path=path, line=line, field="schema_version")
    if version > SCHEMA_VERSION:
        raise TaskFormatError(
            f"schema_version {version} is newer than this gym-repost supports ({SCHEMA_VERSION}); upgrade gym-repost",
            path=path,
            line=line,
            field="schema_version",
        )
    check_json_text(data, path=path, line=line)
    kind = data.get("kind")
    model = _TASK_KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise TaskFormatError(
            f"unknown task kind {kind!r} (known: {sorted(_TASK_KINDS)})", path=path, line=line, field="kind"
        )
    try:
        task = model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise TaskFormatError(f"{first['msg']}{more}", path=path, line=line, field=field) from None
    if check_id and task.id != task.content_hash():
        raise TaskFormatError(
            "id does not match the task's content hash: the line was edited after it was built "
            "(rebuild the task set, or re-save it with gym_repost.task.save_tasks)",
            path=path,
            line=line,
            field="id",
        )
    return task


MAX_TASK_DEPTH = 64
"""Deepest nesting of objects and arrays a task line may have."""


def check_json_text(data: Any, *, path: str | None = None, line: int | None = None) -> None:
    """Check every string (keys included) of decoded JSON is Unicode text that encodes as
    UTF-8, and the nesting is at most :data:`MAX_TASK_DEPTH` deep.

    JSON can spell a lone surrogate (``"\\ud800"``), which Python decodes into a string
    no UTF-8 writer, hash or sandbox accepts.

    Raises:
        TaskFormatError: naming the file, the line and the field.
    """
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            _check_text(value, where, path, line)
        elif isinstance(value, (dict, list)):
            if len(where) >= MAX_TASK_DEPTH:
                raise TaskFormatError(
                    f"nested more than {MAX_TASK_DEPTH} levels deep", path=path, line=line, field=_field(where)
                )
            items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
            for key, _ in items:
                if isinstance(key, str):
                    _check_text(key, (*where, key), path, line, what="the key")
            stack.extend(((item, (*where, str(key))) for key, item in reversed(items)))


def _check_text(text: str, where: tuple[str, ...], path: str | None, line: int | None, what: str = "the text") -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start].encode("utf-8", "backslashreplace").decode("ascii")
        raise TaskFormatError(
            f"{what} is not valid Unicode: a lone surrogate {bad} (a JSON \\u escape of half "
            f"a surrogate pair) at character {exc.start}",
            path=path,
            line=line,
            field=_field(where),
        ) from None


def _field(where: tuple[str, ...]) -> str | None:
    """A dotted field name that prints anywhere (surrogates escaped)."""
    return ".".join(p.encode("utf-8", "backslashreplace").decode("utf-8") for p in where) or None


def iter_task_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, Task | TaskFormatError]]:
    """Yield ``(line_number, task_or_error)`` for every non-blank line of a JSONL file."""
    p = str(path)
    with open(p, encoding="utf-8", errors="strict") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as exc:
                yield number, TaskFormatError(f"not valid JSON ({json_error_text(exc)})", path=p, line=number)
                continue
            except RecursionError:
                yield number, TaskFormatError(f"nested more than {MAX_TASK_DEPTH} levels deep", path=p, line=number)
                continue
            except ValueError as exc:  # an integer with more digits than Python converts
                yield number, TaskFormatError(f"not valid JSON ({exc})", path=p, line=number)
                continue
            try:
                yield number, parse_task(data, path=p, line=number)
            except TaskFormatError as exc:
                yield number, exc


_NOT_JSON_OBJECT = ("not valid JSON", "expected a JSON object")
"""How the reasons of lines that are not JSON objects begin (see :func:`iter_task_lines`)."""


def load_tasks(path: str | os.PathLike[str], *, strict: bool = False, log: bool = True) -> TaskList:
    """Read a task set from a JSONL file.

    Lines that are not valid tasks are skipped, logged (unless ``log=False``: the caller
    reports ``.errors`` itself, as the CLI does), and kept in ``.errors`` so the other
    tasks still run; with ``strict=True`` the first bad line raises. A file none of whose
    lines is a task (a README, say) raises one error rather than one per line.

    Raises:
        TaskFormatError: the file cannot be read or is not JSON Lines, or (strict) a line
            is invalid, or two tasks share an id.
    """
    p = Path(path)
    if p.is_dir():
        raise TaskFormatError("is a directory; give a task file (JSONL, one task per line)", path=str(p))
    if not p.is_file():
        raise TaskFormatError("no such task file", path=str(p))
    tasks: list[Task] = []
    errors: list[TaskFormatError] = []
    seen: dict[str, int] = {}
    try:
        for number, item in iter_task_lines(p):
            if isinstance(item, TaskFormatError):
                if strict:
                    raise item
                errors.append(item)
                continue
            if item.id in seen:
                err = TaskFormatError(
                    f"duplicate task id {item.id} (first on line {seen[item.id]})", path=str(p), line=number, field="id"
                )
                if strict:
                    raise err
                errors.append(err)
                continue
            seen[item.id] = number
            tasks.append(item)
    except UnicodeDecodeError as exc:
        raise TaskFormatError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=str(p)) from None
    if errors and not tasks and all(e.reason.startswith(_NOT_JSON_OBJECT) for e in errors):
        raise TaskFormatError(
            f"not a JSONL task file: none of its {len(errors)} non-empty line(s) is a JSON object "
            f"(line {errors[0].line}: {errors[0].reason})",
            path=str(p),
        )
    for error in errors if log else ():
        logger.warning("%s", error)
    return TaskList(tasks, errors=errors, path=str(p))


def select_tasks(tasks: Sequence[Task], patterns: Sequence[str] = (), limit: int | None = None) -> list[Task]:
    """The tasks whose name or id matches one of the shell-style ``patterns``
    (``demo/pricing.*``; every task when there are none), in file order, the first ``limit``.

    Raises:
        ConfigError: no task matches, or ``limit`` is below 1.
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit {limit}: give at least 1")
    chosen = [
        t
        for t in tasks
        if not patterns or any(fnmatch.fnmatchcase(t.name, p) or fnmatch.fnmatchcase(t.id, p) for p in patterns)
    ]
    if not chosen:
        example = f" (names look like {tasks[0].name})" if tasks else ""
        raise ConfigError(f"no task matches --task {' '.join(map(repr, patterns))} among {len(tasks)}{example}")
    return chosen[:limit]


def save_tasks(tasks: Iterable[Task], path: str | os.PathLike[str]) -> int:
    """Write tasks as JSONL atomically (write to a temporary file, then rename).

    Ids are recomputed so the file is always consistent. Returns the number written.
    """
    return write_lines_atomically((task.with_id().model_dump_json() for task in tasks), path)


def write_lines_atomically(lines: Iterable[str], path: str | os.PathLike[str]) -> int:
    """Write one line per item to ``path``, atomically: a temporary file beside it, then a
    rename, so readers see the old file or the whole new one. Returns the lines written."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=str(p.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line + "\n")
                count += 1
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count
