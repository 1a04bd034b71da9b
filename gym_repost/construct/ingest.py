"""Stage 1 of the construction pipeline: read a SOURCE into a :class:`SourceRepository`.

A SOURCE is a local directory, a source archive (``.tar.gz``, ``.tgz``, ``.tar.bz2``,
``.tar.xz``, ``.tar``, ``.zip``; recognised by content, not by name) or
``pypi:NAME[==VERSION]`` (the sdist, fetched through PyPI's JSON API, its sha256 checked;
``pypi:NAME==VERSION --hash=sha256:HEX`` pins the digest, see :func:`~.pypi.split_pin`).

Nothing here runs repository code: archives are unpacked member by member with every
path checked (no absolute paths, no ``..``, no links out of the archive, no device files,
a bound on the unpacked size), metadata is read as text from ``PKG-INFO``,
``pyproject.toml`` and ``setup.cfg`` (``setup.py`` is never run), and ``pip`` is never
used (fetching an sdist with it runs the package's build backend).

Cache (``$GYM_REPOST_HOME``, default ``~/.cache/gym-repost``)::

    sdists/NAME/VERSION.json     the release PyPI described (``latest.json`` for pypi:NAME,
                                 trusted for a day, then asked again)
    sdists/FILE.tar.gz           the downloaded sdist, checked against its sha256 on reuse
    sources/STEM-DIGEST/         an unpacked archive (STEM: the file name, DIGEST: its sha256)

A second ingest of the same ``pypi:NAME==VERSION`` or archive makes no network request
and unpacks nothing.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gym_repost.construct.archives import archive_stem, unpack_archive
from gym_repost.construct.licenses import (
    LicensePolicy,
    check_license,
    parse_license_policy,
)
from gym_repost.construct.pypi import fetch_sdist, parse_pypi_spec, split_pin
from gym_repost.construct.source_files import SOURCE_FORMS, IngestLimits, collect_files
from gym_repost.construct.source_metadata import detect_license, read_metadata
from gym_repost.construct.stages import SourceRepository
from gym_repost.errors import BuildError
from gym_repost.sandbox.environments import home as default_cache_dir

logger = logging.getLogger(__name__)


def ingest(
    source: str | os.PathLike[str],
    *,
    cache_dir: Path | None = None,
    limits: IngestLimits = IngestLimits(),
    licenses: LicensePolicy | str | Iterable[str] = "permissive",
) -> SourceRepository:
    """Read SOURCE into a repository the later stages can work on.

    Args:
        source: a local directory, a source archive, or ``pypi:NAME[==VERSION]``.
        cache_dir: where sdists and unpacked archives are kept; default
            ``$GYM_REPOST_HOME`` or ``~/.cache/gym-repost``.
        limits: size bounds.
        licenses: which licenses to accept: ``"permissive"`` (default), ``"any"``, or SPDX
            ids (a set, or a comma-separated string).

    Raises:
        BuildError: the source does not exist, cannot be fetched or unpacked, is too
            large, holds no Python file, or its license is not allowed (the message says
            how to proceed).
    """
    policy = licenses if isinstance(licenses, frozenset) else parse_license_policy(licenses)
    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).expanduser().absolute()
    located = locate_source(str(source), cache, limits)
    files, file_notes = collect_files(located.root, limits, label=str(source))
    if not any(path.endswith(".py") for path in files):  # before the license: nothing would be built anyway
        raise BuildError(f"{source} has no Python files (.py): nothing to build from")
    metadata = read_metadata(located.root)
    name = metadata.name or located.name
    detected = detect_license(located.root, metadata)
    check_license(name, detected, policy)
    logger.info(
        "ingested %s: %d files (%d Python), license %s",
        source,
        len(files),
        sum(p.endswith(".py") for p in files),
        detected.license,
    )
    return SourceRepository(
        name=name,
        version=metadata.version or located.version,
        source=located.label,
        root=located.root,
        files=files,
        license=detected.license,
        license_kind=detected.kind,
        url=metadata.url or located.url,
        notes=[*located.notes, *detected.notes, *file_notes],
    )


@dataclass(frozen=True)
class LocatedSource:
    """Where a SOURCE's files are on disk, and what its location says about it."""

    root: Path
    name: str
    version: str | None = None
    url: str | None = None
    notes: tuple[str, ...] = ()
    label: str = ""
    """The source as tasks record it (their provenance): what was read, never how its path
    was typed, so that ``.`` and its full path give the same tasks, ids included:
    ``pypi:NAME==VERSION`` as PyPI names the release, ``dir:NAME`` for a directory,
    ``archive:FILE`` for an archive (its file name)."""


def locate_source(source: str, cache: Path, limits: IngestLimits) -> LocatedSource:
    """Find (fetching and unpacking as needed) the directory SOURCE's files are in.

    Raises:
        BuildError: SOURCE is none of the accepted forms, or cannot be fetched or unpacked.
    """
    if source.startswith("pypi:"):
        return _locate_pypi(source, cache, limits)
    path = Path(source).expanduser()
    if path.is_dir():
        root = path.resolve()
        return LocatedSource(root=root, name=root.name, label=f"dir:{root.name}")
    if path.is_file():
        root = unpack_archive(path, cache / "sources", limits)
        # No single top-level directory: the unpack directory is the root, named after the file.
        stem = archive_stem(path.name) if root.parent == cache / "sources" else root.name
        name, version = split_name_version(stem)
        return LocatedSource(root=root, name=name, version=version, label=f"archive:{path.name}")
    raise BuildError(f"{source}: no such directory, archive or PyPI package; SOURCE is {SOURCE_FORMS}")


def _locate_pypi(source: str, cache: Path, limits: IngestLimits) -> LocatedSource:
    spec, sha256 = split_pin(source)
    name, version = parse_pypi_spec(spec)
    archive, release, notes = fetch_sdist(name, version, cache_dir=cache, limits=limits, sha256=sha256)
    root = unpack_archive(archive, cache / "sources", limits)
    return LocatedSource(
        root=root,
        name=release.name,
        version=release.version,
        url=release.page_url,
        notes=tuple(notes),
        label=f"pypi:{release.name}=={release.version}",
    )


def split_name_version(stem: str) -> tuple[str, str | None]:
    """``boltons-26.2.0`` -> (``boltons``, ``26.2.0``); no version part -> (stem, None)."""
    match = re.fullmatch(r"(?P<name>.+?)-(?P<version>\d[\w.+!]*)", stem)
    return (match.group("name"), match.group("version")) if match else (stem, None)
