"""Which files of a source are read, and the bounds on reading them: text files by
suffix, directories skipped, sizes and counts capped (:class:`IngestLimits`)."""

from __future__ import annotations

import io
import logging
import os
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gym_repost.errors import BuildError

logger = logging.getLogger(__name__)


SOURCE_FORMS = (
    "a local directory, a source archive (.tar.gz, .tgz, .tar.bz2, .tar.xz, .tar, .zip) or pypi:NAME[==VERSION]"
)

TEXT_SUFFIXES = frozenset(
    {
        ".py",
        ".pyi",
        ".txt",
        ".json",
        ".jsonl",
        ".toml",
        ".cfg",
        ".ini",
        ".conf",
        ".yaml",
        ".yml",
        ".csv",
        ".tsv",
        ".md",
        ".rst",
        ".xml",
        ".html",
        ".htm",
        ".in",
        ".sql",
        ".j2",
        ".jinja",
        ".jinja2",
        ".tmpl",
        ".template",
        ".typed",
        ".properties",
    }
)
"""Suffixes of the files kept besides extension-less ones (``LICENSE``, ``Makefile``)."""
_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "__MACOSX"})
_SKIP_TOP_DIRS = frozenset({"build", "dist"})
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class IngestLimits:
    """Bounds on what ingest reads.

    Attributes:
        max_file_bytes: a text file larger than this is left out (and noted).
        max_total_bytes: the kept files together; more raises BuildError.
        max_files: kept files; more raises BuildError.
        archive_max_bytes: an archive's unpacked size (and an sdist's download size);
            more raises BuildError (archive bombs).
        archive_max_members: entries in an archive; more raises BuildError.
        network_timeout: seconds to wait on PyPI per request.
    """

    max_file_bytes: int = 1_000_000
    max_total_bytes: int = 50_000_000
    max_files: int = 20_000
    archive_max_bytes: int = 200_000_000
    archive_max_members: int = 100_000
    network_timeout: float = 60.0


# --- files ------------------------------------------------------------------------------


def skip_directory(rel: PurePosixPath) -> bool:
    """Whether a directory (relative to the root) holds nothing a task needs: VCS, caches,
    virtual environments, build output, hidden directories."""
    name = rel.name
    return (
        name.startswith(".")
        or name in _SKIP_DIRS
        or name.endswith(".egg-info")
        or (len(rel.parts) == 1 and name in _SKIP_TOP_DIRS)
        or (name == "_build" and rel.parent.name in {"docs", "doc"})
    )


def wanted_file(rel: PurePosixPath) -> bool:
    """Python files, small data/config files, extension-less files; not hidden ones."""
    return not rel.name.startswith(".") and (rel.suffix.lower() in TEXT_SUFFIXES or rel.suffix == "")


def _walk(root: Path) -> Iterator[tuple[PurePosixPath, Path]]:
    """Every file under ``root`` not in a skipped directory, in sorted order."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = PurePosixPath(Path(dirpath).relative_to(root).as_posix())
        dirnames[:] = sorted(d for d in dirnames if not skip_directory(here / d))
        for filename in sorted(filenames):
            yield here / filename, Path(dirpath, filename)


def collect_files(
    root: Path, limits: IngestLimits = IngestLimits(), label: str | None = None
) -> tuple[dict[str, str], list[str]]:
    """The text files a task may need, POSIX path -> content, and notes on what was left out.

    Raises:
        BuildError: more than ``limits.max_files`` files or ``limits.max_total_bytes`` bytes.
    """
    label = label or str(root)
    files: dict[str, str] = {}
    notes: list[str] = []
    total = 0
    for rel, path in _walk(root):
        if not wanted_file(rel):
            continue
        key = rel.as_posix()
        if path.is_symlink() or not path.is_file():
            notes.append(f"{key}: left out, a link or special file")
            continue
        size = path.stat().st_size
        if size > limits.max_file_bytes:
            notes.append(f"{key}: left out, {size} bytes is over the limit of {limits.max_file_bytes} per file")
            continue
        text = decode_text(path.read_bytes(), python=rel.suffix in {".py", ".pyi"})
        if text is None:
            notes.append(f"{key}: left out, not UTF-8 text")
            continue
        total += size
        if total > limits.max_total_bytes:
            raise BuildError(
                f"{label}: more than {limits.max_total_bytes} bytes of text files "
                "(IngestLimits.max_total_bytes); too large to build from"
            )
        if len(files) >= limits.max_files:
            raise BuildError(
                f"{label}: more than {limits.max_files} text files (IngestLimits.max_files); too large to build from"
            )
        files[key] = text
    return files, notes


def decode_text(data: bytes, *, python: bool = False) -> str | None:
    """UTF-8 text (a Python file: the encoding its coding line declares), or None for
    binary or undecodable data."""
    if b"\x00" in data:
        return None
    try:
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0] if python else "utf-8"
        return data.decode(encoding)
    except (UnicodeDecodeError, SyntaxError, LookupError):
        return None
