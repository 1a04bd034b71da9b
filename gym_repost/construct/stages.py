"""What the construction stages hand each other.

The pipeline (``gym-repost build SOURCE``) runs, per repository::

    ingest -> extract -> dependencies -> sandboxing -> test generation -> execution -> quality
    SourceRepository  Candidate  DependencySlice  SandboxedScript  GeneratedTests   ...   FunctionTask

Every stage records what it did per candidate; a candidate that cannot go on becomes a
:class:`Drop` with the stage and a short reason category (the build's table of why
candidates were dropped counts them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Stage = Literal["ingest", "extract", "dependencies", "sandboxing", "tests", "execution", "quality", "audit"]
LicenseKind = Literal["permissive", "copyleft", "proprietary", "unknown"]


@dataclass
class SourceRepository:
    """A repository ready for construction (the output of ingest).

    Attributes:
        name: distribution or directory name.
        version: package version or commit, when known.
        source: the SOURCE as the user gave it.
        root: the directory the files were read from (an extracted archive lives in the
            cache). Read it, never execute it outside the sandbox.
        files: every kept text file, POSIX path relative to ``root`` -> content: the
            Python files plus small data files tests may need.
        license: SPDX identifier (or the license's name) when detected.
        license_kind: permissive, copyleft, proprietary or unknown.
        url: where the repository or package can be found.
        notes: what ingest left out and why (oversized, undecodable, ...).
    """

    name: str
    version: str | None
    source: str
    root: Path
    files: dict[str, str]
    license: str | None = None
    license_kind: LicenseKind = "unknown"
    url: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def python_files(self) -> list[str]:
        """Paths of the Python files, sorted."""
        return sorted(p for p in self.files if p.endswith(".py"))


@dataclass(frozen=True)
class Candidate:
    """A function or method that may become a task (the output of extract).

    Lines are 1-based and inclusive; ``source`` is the exact text of lines
    ``start_line..end_line`` (decorators included, indentation as in the file).
    """

    file: str
    module: str
    """Dotted module name of ``file`` (``pkg/sub/mod.py`` -> ``pkg.sub.mod``)."""
    qualname: str
    """``func`` or ``Class.method`` (nested classes: ``Outer.Inner.method``)."""
    name: str
    class_name: str | None
    kind: Literal["function", "method", "staticmethod", "classmethod", "property"]
    start_line: int
    def_line: int
    end_line: int
    signature: str
    decorators: tuple[str, ...]
    docstring: str | None
    source: str
    is_async: bool = False
    is_generator: bool = False
    body_statements: int = 0
    """Statements in the body, docstring excluded (nested blocks counted)."""
    branches: int = 0
    """Branch points in the body: if/elif, loops, try handlers, boolean operators,
    conditional expressions, comprehension conditions, match cases."""

    @property
    def key(self) -> str:
        """``file::qualname``: unique within a repository."""
        return f"{self.file}::{self.qualname}"


@dataclass(frozen=True)
class Drop:
    """Why a candidate (or a whole file) did not become a task."""

    file: str
    qualname: str
    stage: Stage
    reason: str
    """A short category shared by similar drops (``gpu keyword``, ``trivial body``,
    ``unresolved name``, ``no inputs``, ``coverage below threshold``, ...)."""
    detail: str = ""


@dataclass(frozen=True)
class Fragment:
    """A top-level statement of the repository the sandboxed script needs.

    ``source`` is the statement's original text (a class may have methods the target
    cannot reach removed; the target itself is never edited), dedented to column 0.
    """

    file: str
    module: str
    name: str
    """The top-level name the statement binds (for an assignment, the first target)."""
    kind: Literal["function", "class", "assign", "import", "other"]
    source: str
    start_line: int
    end_line: int


@dataclass
class DependencySlice:
    """The target and everything it reaches in the repository (dependencies' output).

    Attributes:
        target: the candidate.
        fragments: repository statements in an order that defines every name before
            import-time use (base classes before subclasses, decorators and constants
            before their users); the target's own top-level statement (its function,
            or its class for a method) is among them.
        external_imports: import statements of modules outside the repository (standard
            library or third-party) that the fragments use, as source lines, deduplicated.
        shims: statements that bind names the fragments use under another spelling
            (``from .x import a as b`` -> ``b = a``; ``import pkg.mod as m`` ->
            ``m = types.SimpleNamespace(...)``), placed after the fragments. (A shim some
            fragment needs while the module is imported is a fragment of kind ``import``
            instead, placed before that user.)
        context: the dependency-only context (for the agent's prompt, as R2E builds it):
            per file, its imports and the fragments from it, as markdown blocks headed
            ``## path``.
        standalone: True when no fragment other than the target's own comes from the
            repository.
        third_party: top-level names of third-party modules imported.
        renamed: names changed to avoid a clash in the script's single namespace,
            ``module.name`` (or the import's local name) -> the name in the script.
    """

    target: Candidate
    fragments: list[Fragment]
    external_imports: list[str] = field(default_factory=list)
    shims: list[str] = field(default_factory=list)
    context: str = ""
    standalone: bool = True
    third_party: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SandboxedScript:
    """A standalone module holding the target and its dependencies (no tests yet).

    ``module`` runs on its own: external imports, fragments, shims. Test generation
    appends ``test_{name}()`` and the ``__main__`` block to it.
    """

    target: Candidate
    module: str


@dataclass(frozen=True)
class GeneratedTests:
    """Equivalence tests written for a target (test generation's output).

    Attributes:
        code: ``test_{name}()`` (with the helpers it needs) and the ``__main__`` block;
            appended to the sandboxed module it forms the evaluation script.
        inputs: how many concrete inputs the test uses, per origin (``traced``,
            ``strategy``, ``search``).
        assertions: assert statements in the test.
        branch_coverage: branch coverage of the target the inputs reached during the
            search (the quality stage measures it again on the final script).
        deterministic: False when the ground truth gave different results on the same
            input (then ``code`` seeds what it can, or the candidate is dropped).
        notes: what the generator observed (seeded randomness, skipped inputs, ...).
        safety_limits: the wall-clock safety limits that fired during the search (then the
            test may differ from the one an unloaded machine builds); empty normally.
    """

    code: str
    inputs: dict[str, int]
    assertions: int
    branch_coverage: float | None = None
    deterministic: bool = True
    notes: tuple[str, ...] = ()
    safety_limits: tuple[str, ...] = ()
