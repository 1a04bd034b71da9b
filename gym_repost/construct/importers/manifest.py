"""Import hand-written function tasks described by a TOML manifest.

A manifest points at a repository directory and lists, per task, the target and the
evaluation script written for it (the way RepoST builds one: the target and its
dependencies in one file, mocks for external services, ``test_{name}()`` comparing
``{name}`` with ``{name}_new_implementation`` and a ``__main__`` that calls it)::

    [repository]
    name = "shopkit"            # repository name
    path = "repo"               # relative to the manifest
    license = "MIT"
    version = "1.0.0"           # optional
    url = "https://..."         # optional

    [[task]]
    file = "shopkit/pricing.py"           # the target's file in the repository
    qualname = "apply_discount"           # or "Cart.total"
    script = "scripts/apply_discount.py"  # the evaluation script
    context = ["shopkit/models.py"]       # dependency-only context (the target's file is added)
    files = { "data/rates.json" = "fixtures/rates.json" }   # extra files for the script
    requirements = []                     # distributions the script needs
    standalone = false                    # does the target use other repository code?
    timeout = 10.0

``gym-repost build path/to/manifest.toml -o tasks/x.jsonl`` turns it into a task set.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_repost.construct.function_task import make_function_task, repository_view
from gym_repost.context import render_context
from gym_repost.errors import BuildError
from gym_repost.task import FunctionTask, Provenance

_SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".tox", ".venv", "venv", "node_modules"}
_MAX_FILE_BYTES = 1_000_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ManifestRepository(_Strict):
    """The ``[repository]`` table."""

    name: str
    path: str
    license: str | None = None
    version: str | None = None
    url: str | None = None


class ManifestTask(_Strict):
    """One ``[[task]]`` entry."""

    file: str
    qualname: str
    script: str
    context: list[str] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict)
    requirements: list[str] = Field(default_factory=list)
    standalone: bool = False
    timeout: float = Field(default=10.0, gt=0)
    name: str | None = None


class Manifest(_Strict):
    """A whole manifest file."""

    repository: ManifestRepository
    task: list[ManifestTask] = Field(default_factory=list)


def read_repository(root: Path) -> dict[str, str]:
    """Every text file of a repository directory (POSIX relative path to content)."""
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or any(p in _SKIP_DIRS or p.startswith(".") for p in rel.parts):
            continue
        if path.stat().st_size > _MAX_FILE_BYTES:
            continue
        try:
            files[rel.as_posix()] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return files


def load_manifest(path: Path) -> Manifest:
    """Read and validate a manifest.

    Raises:
        BuildError: the file is missing, not TOML, or has a wrong field (named).
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BuildError(f"{path}: no such manifest") from None
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{path}: not valid TOML: {exc}") from None
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise BuildError(f"{path}: field '{field}': {first['msg']}") from None


def manifest_task(base: Path, manifest: Manifest, entry: ManifestTask, files: dict[str, str]) -> FunctionTask:
    """One manifest entry as a function task.

    Raises:
        BuildError: a referenced file is missing, or the script is unusable.
    """
    repo = manifest.repository
    script_path = base / entry.script
    if not script_path.is_file():
        raise BuildError(f"script {entry.script} not found next to the manifest")
    extra: dict[str, str] = {}
    for dest, src in entry.files.items():
        if not (base / src).is_file():
            raise BuildError(f"file {src} (for {dest}) not found next to the manifest")
        extra[dest] = (base / src).read_text(encoding="utf-8")
    provenance = Provenance(
        source=f"manifest:{repo.name}",
        repo=repo.name,
        version=repo.version,
        file=entry.file,
        qualname=entry.qualname,
        license=repo.license,
        url=repo.url,
    )
    context_paths = [p for p in entry.context if p != entry.file] + [entry.file]
    return make_function_task(
        name=entry.name or f"{repo.name}/{entry.qualname}",
        provenance=provenance,
        script=script_path.read_text(encoding="utf-8"),
        repository=repository_view(files, entry.file, entry.qualname, complete=True),
        context=render_context(files, context_paths),
        extra_files=extra,
        requirements=entry.requirements,
        timeout=entry.timeout,
        standalone=entry.standalone,
        local_modules=frozenset(p.split("/")[0].removesuffix(".py") for p in files),
    )


def import_manifest(path: str | Path) -> Iterator[FunctionTask | BuildError]:
    """Yield the tasks of a manifest (or, per entry, why it could not be built).

    Raises:
        BuildError: the manifest itself or its repository directory is unusable.
    """
    path = Path(path)
    manifest = load_manifest(path)
    base = path.parent
    root = base / manifest.repository.path
    if not root.is_dir():
        raise BuildError(f"{path}: repository directory {manifest.repository.path} not found")
    files = read_repository(root)
    for number, entry in enumerate(manifest.task, start=1):
        try:
            yield manifest_task(base, manifest, entry, files)
        except BuildError as exc:
            yield BuildError(f"{path} task #{number} ({entry.qualname}): {exc}")
