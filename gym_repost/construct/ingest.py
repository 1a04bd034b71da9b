"""Stage 1 of the construction pipeline: read a SOURCE into a :class:`SourceRepository`.

A SOURCE is a local directory, a source archive (``.tar.gz``, ``.tgz``, ``.tar.bz2``,
``.tar.xz``, ``.tar``, ``.zip``; recognised by content, not by name) or
``pypi:NAME[==VERSION]`` (the sdist, fetched through PyPI's JSON API, its sha256 checked).

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

import configparser
import email.parser
import hashlib
import http.client
import io
import json
import logging
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
import tokenize
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from gym_repost.construct.licenses import (
    DetectedLicense,
    LicensePolicy,
    check_license,
    combine_license_evidence,
    identify_license_text,
    license_from_metadata,
    parse_license_policy,
)
from gym_repost.construct.model import SourceRepository
from gym_repost.errors import BuildError
from gym_repost.sandbox.environments import home as default_cache_dir

logger = logging.getLogger(__name__)

PYPI_URL_ENV = "GYM_REPOST_PYPI_URL"
DEFAULT_PYPI_URL = "https://pypi.org"
SOURCE_FORMS = (
    "a local directory, a source archive (.tar.gz, .tgz, .tar.bz2, .tar.xz, .tar, .zip) or pypi:NAME[==VERSION]"
)
LATEST_TTL_SECONDS = 24 * 3600
"""How long ``pypi:NAME`` (no version) trusts the release it resolved last time."""

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
_CHUNK = 1 << 20


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
            large, or its license is not allowed (the message says how to proceed).
    """
    policy = licenses if isinstance(licenses, frozenset) else parse_license_policy(licenses)
    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).expanduser().absolute()
    located = locate_source(str(source), cache, limits)
    metadata = read_metadata(located.root)
    name = metadata.name or located.name
    detected = detect_license(located.root, metadata)
    check_license(name, detected, policy)
    files, file_notes = collect_files(located.root, limits, label=str(source))
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
        source=str(source),
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
        return LocatedSource(root=root, name=root.name)
    if path.is_file():
        root = unpack_archive(path, cache / "sources", limits)
        # No single top-level directory: the unpack directory is the root, named after the file.
        stem = _archive_stem(path.name) if root.parent == cache / "sources" else root.name
        name, version = split_name_version(stem)
        return LocatedSource(root=root, name=name, version=version)
    raise BuildError(f"{source}: no such directory, archive or PyPI package; SOURCE is {SOURCE_FORMS}")


def _locate_pypi(source: str, cache: Path, limits: IngestLimits) -> LocatedSource:
    name, version = parse_pypi_spec(source)
    archive, release, notes = fetch_sdist(name, version, cache_dir=cache, limits=limits)
    root = unpack_archive(archive, cache / "sources", limits)
    return LocatedSource(
        root=root, name=release.name, version=release.version, url=release.page_url, notes=tuple(notes)
    )


def split_name_version(stem: str) -> tuple[str, str | None]:
    """``boltons-26.2.0`` -> (``boltons``, ``26.2.0``); no version part -> (stem, None)."""
    match = re.fullmatch(r"(?P<name>.+?)-(?P<version>\d[\w.+!]*)", stem)
    return (match.group("name"), match.group("version")) if match else (stem, None)


# --- PyPI -------------------------------------------------------------------------------

_PYPI_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_PYPI_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")


def parse_pypi_spec(source: str) -> tuple[str, str | None]:
    """``pypi:NAME`` or ``pypi:NAME==VERSION`` -> (NAME, VERSION or None).

    Raises:
        BuildError: anything else after ``pypi:``.
    """
    spec = source.removeprefix("pypi:").strip()
    name, sep, version = (part.strip() for part in spec.partition("=="))
    if not _PYPI_NAME.fullmatch(name) or (sep and not _PYPI_VERSION.fullmatch(version)):
        raise BuildError(
            f"{source}: not a PyPI package; write pypi:NAME or pypi:NAME==VERSION "
            "(other version specifiers are not supported)"
        )
    return name, version or None


@dataclass(frozen=True)
class SdistRelease:
    """The sdist of one release, as PyPI's JSON API describes it."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    page_url: str


def pypi_index_url() -> str:
    """The package index to ask: ``$GYM_REPOST_PYPI_URL`` or https://pypi.org."""
    return os.environ.get(PYPI_URL_ENV, DEFAULT_PYPI_URL).rstrip("/")


def fetch_sdist(
    name: str, version: str | None, *, cache_dir: Path, limits: IngestLimits = IngestLimits()
) -> tuple[Path, SdistRelease, list[str]]:
    """The sdist of ``name`` (``version``, or the latest release), from the cache or PyPI.

    Returns:
        the archive's path, the release, and notes (a stale cache used while offline).

    Raises:
        BuildError: PyPI cannot be reached (and nothing is cached), the package or
            version does not exist, the release has no sdist, or the download's sha256
            differs from the one PyPI published.
    """
    sdists = cache_dir / "sdists"
    record = sdists / _normalize_name(name) / f"{version or 'latest'}.json"
    cached = _load_release(record)
    usable = cached is not None and _archive_matches(sdists / cached.filename, cached.sha256)
    if cached and usable and (version or time.time() - record.stat().st_mtime < LATEST_TTL_SECONDS):
        logger.debug("using the cached sdist %s", cached.filename)
        return sdists / cached.filename, cached, []
    try:
        release = query_pypi(name, version, timeout=limits.network_timeout)
    except BuildError as exc:
        if cached and usable:
            logger.warning("%s; using the cached %s", exc, cached.filename)
            return sdists / cached.filename, cached, [f"PyPI was not reachable; used the cached {cached.filename}"]
        raise
    archive = sdists / release.filename
    if not _archive_matches(archive, release.sha256):
        download_file(release.url, archive, release.sha256, limits)
    _save_release(record, release)
    _save_release(sdists / _normalize_name(name) / f"{release.version}.json", release)
    return archive, release, []


def _normalize_name(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _load_release(path: Path) -> SdistRelease | None:
    try:
        return SdistRelease(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _save_release(path: Path, release: SdistRelease) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(asdict(release), indent=1))
    os.replace(tmp, path)


def query_pypi(name: str, version: str | None, *, timeout: float = 60.0) -> SdistRelease:
    """Ask the index's JSON API for the sdist of a release.

    A pinned version is asked of ``/pypi/NAME/VERSION/json``; an index that does not
    serve that route is asked of ``/pypi/NAME/json``, whose ``releases`` list every version.

    Raises:
        BuildError: the index cannot be reached, the package or version does not exist,
            or the release has no sdist.
    """
    index = pypi_index_url()
    wanted = f"pypi:{name}" + (f"=={version}" if version else "")
    url = f"{index}/pypi/{urllib.parse.quote(name)}/{urllib.parse.quote(version)}/json" if version else ""
    data = _get_json(url, index, wanted, timeout) if version else None
    if data is None:
        url = f"{index}/pypi/{urllib.parse.quote(name)}/json"
        data = _get_json(url, index, wanted, timeout)
        if data is None:
            raise BuildError(f"{wanted}: no package named {name} on {index}")
        if version:
            data = _release_from_project(data, version, wanted, index)
    return _sdist_release(data, wanted, index, url)


def _get_json(url: str, index: str, wanted: str, timeout: float) -> Any:
    """The JSON document at ``url``; None when the index answers 404."""
    try:
        with urllib.request.urlopen(_request(url), timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise BuildError(f"{wanted}: PyPI at {index} answered HTTP {exc.code} ({exc.reason})") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise BuildError(_unreachable(index, exc)) from None
    except ValueError as exc:
        raise BuildError(f"{wanted}: PyPI at {index} answered something that is not JSON ({exc})") from None


def _release_from_project(project: Any, version: str, wanted: str, index: str) -> dict[str, Any]:
    """The ``{info, urls}`` of one version, out of a project's JSON document."""
    releases = project.get("releases") if isinstance(project, dict) else None
    info = project.get("info") if isinstance(project, dict) else None
    if not isinstance(releases, dict) or not isinstance(info, dict):
        raise BuildError(f"{wanted}: PyPI at {index} answered JSON without 'info' and 'releases'")
    if version not in releases:
        name = info.get("name", wanted)
        raise BuildError(
            f"{wanted}: no version {version} of {name} on {index} (latest: {info.get('version', 'unknown')})"
        )
    return {"info": {**info, "version": version}, "urls": releases[version]}


def _request(url: str) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"User-Agent": "gym-repost (+ingest)", "Accept": "application/json"})


def _unreachable(index: str, exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return f"cannot reach PyPI at {index}: {reason}; check the network or give a local archive"


def _sdist_release(data: Any, wanted: str, index: str, document_url: str) -> SdistRelease:
    """Pick the sdist (a ``.tar.gz`` before a ``.zip``) from a JSON API answer; file URLs
    may be relative to the document (mirrors serve them so)."""
    try:
        info, files = data["info"], list(data["urls"])
        name, version = str(info["name"]), str(info["version"])
    except (KeyError, TypeError):
        raise BuildError(f"{wanted}: PyPI at {index} answered JSON without 'info' and 'urls'") from None
    sdists = [f for f in files if isinstance(f, dict) and f.get("packagetype") == "sdist"]
    if not sdists:
        kinds = sorted({str(f.get("packagetype")) for f in files if isinstance(f, dict)})
        have = f"only {', '.join(kinds)}" if kinds else "no files at all"
        raise BuildError(
            f"{wanted}: {name} {version} has no source distribution (sdist) on PyPI ({have}); "
            "gym-repost builds from sources: give a local archive or another version"
        )
    best = min(sdists, key=lambda f: not str(f.get("filename", "")).endswith(".tar.gz"))
    filename, sha256 = str(best.get("filename", "")), (best.get("digests") or {}).get("sha256")
    url = urllib.parse.urljoin(document_url, str(best.get("url", "")))
    if (
        not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", filename)
        or not sha256
        or urllib.parse.urlsplit(url).scheme not in {"http", "https"}
    ):
        raise BuildError(
            f"{wanted}: PyPI's entry for the sdist lacks a plain file name, an http(s) url or a sha256 digest"
        )
    page = f"{index}/project/{name}/{version}/"
    return SdistRelease(name, version, filename, url, str(sha256).lower(), page)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _archive_matches(path: Path, sha256: str) -> bool:
    return path.is_file() and _sha256_file(path) == sha256


def download_file(url: str, dest: Path, sha256: str, limits: IngestLimits = IngestLimits()) -> None:
    """Download ``url`` to ``dest`` if its sha256 is ``sha256`` (else nothing is kept).

    Raises:
        BuildError: the host cannot be reached, the file exceeds
            ``limits.archive_max_bytes``, or the digest differs.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    logger.info("downloading %s", url)
    try:
        with urllib.request.urlopen(_request(url), timeout=limits.network_timeout) as response, tmp.open("wb") as out:
            got = _copy_hashing(response, out, limits.archive_max_bytes, dest.name)
    except BuildError:
        tmp.unlink(missing_ok=True)
        raise
    except urllib.error.HTTPError as exc:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"{url}: HTTP {exc.code} ({exc.reason}) while downloading the sdist") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        tmp.unlink(missing_ok=True)
        raise BuildError(_unreachable(urllib.parse.urlsplit(url).netloc or url, exc)) from None
    if got != sha256:
        tmp.unlink(missing_ok=True)
        raise BuildError(
            f"{dest.name}: the download's sha256 {got} differs from the {sha256} PyPI published; "
            "the file is damaged or was tampered with, so it is not used"
        )
    os.replace(tmp, dest)


def _copy_hashing(src: IO[bytes], out: IO[bytes], max_bytes: int, label: str) -> str:
    digest, size = hashlib.sha256(), 0
    while chunk := src.read(_CHUNK):
        size += len(chunk)
        if size > max_bytes:
            raise BuildError(f"{label}: larger than {max_bytes} bytes (IngestLimits.archive_max_bytes)")
        digest.update(chunk)
        out.write(chunk)
    return digest.hexdigest()


# --- archives ---------------------------------------------------------------------------

_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz", ".tar", ".zip")
_MAGIC = (
    (b"\x1f\x8b", "gzip data"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"PK", "zip data"),
    (b"\x7fELF", "an executable"),
    (b"%PDF", "a PDF document"),
)


def archive_kind(path: Path) -> str:
    """``tar`` or ``zip``, judged by content (compressed tars included).

    Raises:
        BuildError: ``x: not a source archive (...)`` with what the file seems to be.
    """
    if zipfile.is_zipfile(path):
        return "zip"
    if tarfile.is_tarfile(path):
        return "tar"
    with path.open("rb") as f:
        head = f.read(512)
    seems = next((what for magic, what in _MAGIC if head.startswith(magic)), None)
    if seems in {"gzip data", "bzip2 data", "xz data"}:
        seems = f"{seems} that is not a tar archive, or a damaged one"
    elif seems == "zip data":
        seems = "a damaged zip"
    elif seems is None:
        seems = "empty" if not head else "text" if _looks_like_text(head) else "unrecognised binary data"
    raise BuildError(f"{path}: not a source archive ({seems}); SOURCE is {SOURCE_FORMS}")


def _looks_like_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def _archive_stem(filename: str) -> str:
    """The file name without its archive suffix, reduced to safe characters."""
    lower = filename.lower()
    stem = next((filename[: -len(s)] for s in _ARCHIVE_SUFFIXES if lower.endswith(s)), filename)
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", stem).strip("._") or "archive"


def _unpack_dir_name(archive: Path) -> str:
    return f"{_archive_stem(archive.name)}-{_sha256_file(archive)[:16]}"


def unpack_archive(archive: Path, dest_dir: Path, limits: IngestLimits = IngestLimits()) -> Path:
    """Unpack a source archive safely under ``dest_dir`` (once per archive content).

    Only directories and regular files are written; links inside the archive are left
    out (the files they point to are there anyway).

    Returns:
        the repository root: the archive's single top-level directory, or the unpack
        directory when the archive has several top-level entries.

    Raises:
        BuildError: not an archive, a damaged one, a member with an absolute path or
            ``..``, a link pointing out of the archive, a device file, or over the limits.
    """
    kind = archive_kind(archive)
    target = dest_dir / _unpack_dir_name(archive)
    if not target.is_dir():
        dest_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest_dir))
        try:
            (_unpack_tar if kind == "tar" else _unpack_zip)(archive, staging, limits)
            staging.chmod(0o755)  # mkdtemp's 0700 would hide the sources from a sandbox's run user
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # not a concurrent unpack of the same archive
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return _repository_root(target)


def _repository_root(target: Path) -> Path:
    entries = list(target.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else target


def member_path(name: str, label: str) -> PurePosixPath | None:
    """The relative path an archive member may be written to; None for the root itself.

    Raises:
        BuildError: an absolute path (``/x``, ``C:\\x``) or one that climbs out (``..``).
    """
    clean = name.replace("\\", "/")
    if clean.startswith("/") or re.match(r"[A-Za-z]:", clean):
        raise BuildError(f"{label}: member {name!r} has an absolute path; refusing the archive")
    parts = [p for p in clean.split("/") if p not in {"", "."}]
    if ".." in parts:
        raise BuildError(f"{label}: member {name!r} climbs out of the archive ('..'); refusing the archive")
    return PurePosixPath(*parts) if parts else None


def link_stays_inside(member: PurePosixPath, target: str, *, hard: bool) -> bool:
    """Whether a link at ``member`` pointing to ``target`` stays within the archive.

    A symbolic link's target is relative to the link's directory, a hard link's to the
    archive root.
    """
    target = target.replace("\\", "/")
    if not target or target.startswith("/") or re.match(r"[A-Za-z]:", target):
        return False
    depth = 0 if hard else len(member.parts) - 1
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in {"", "."}:
            depth += 1
    return True


def _check_link(label: str, member: PurePosixPath, target: str, *, hard: bool) -> None:
    if not link_stays_inside(member, target, hard=hard):
        raise BuildError(f"{label}: member {member} links outside the archive (to {target!r}); refusing the archive")
    logger.info("%s: link %s -> %s left out", label, member, target)


class _Budget:
    """Bytes and members an unpack may still write."""

    def __init__(self, label: str, limits: IngestLimits) -> None:
        self.label, self.limits, self.bytes, self.members = label, limits, 0, 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.archive_max_members:
            raise BuildError(
                f"{self.label}: more than {self.limits.archive_max_members} members "
                "(IngestLimits.archive_max_members); refusing it"
            )

    def spend(self, size: int) -> None:
        self.bytes += size
        if self.bytes > self.limits.archive_max_bytes:
            raise BuildError(
                f"{self.label}: unpacks to more than {self.limits.archive_max_bytes} bytes "
                "(IngestLimits.archive_max_bytes); refusing it as a possible archive bomb"
            )


def _write_member(src: IO[bytes], dest: Path, budget: _Budget) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as out:
        while chunk := src.read(_CHUNK):
            budget.spend(len(chunk))
            out.write(chunk)


def _unpack_tar(archive: Path, staging: Path, limits: IngestLimits) -> None:
    label, budget = str(archive), _Budget(str(archive), limits)
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                budget.member()
                rel = member_path(member.name, label)
                if rel is None or rel.parts[0] == "__MACOSX":
                    continue
                if member.isdir():
                    (staging / rel).mkdir(parents=True, exist_ok=True)
                elif member.issym() or member.islnk():
                    _check_link(label, rel, member.linkname, hard=member.islnk())
                elif not member.isfile():
                    raise BuildError(f"{label}: member {rel} is a device or special file; refusing the archive")
                else:
                    src = tar.extractfile(member)
                    assert src is not None  # a regular file always has data
                    _write_member(src, staging / rel, budget)
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
        raise BuildError(f"{label}: not a source archive (a damaged tar: {exc})") from None


def _unpack_zip(archive: Path, staging: Path, limits: IngestLimits) -> None:
    label, budget = str(archive), _Budget(str(archive), limits)
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                budget.member()
                rel = member_path(info.filename, label)
                if rel is None or rel.parts[0] == "__MACOSX":
                    continue
                mode = info.external_attr >> 16
                if info.is_dir():
                    (staging / rel).mkdir(parents=True, exist_ok=True)
                elif stat.S_ISLNK(mode):
                    _check_link(label, rel, zf.read(info)[:4096].decode("utf-8", "replace"), hard=False)
                elif stat.S_IFMT(mode) and not stat.S_ISREG(mode):
                    raise BuildError(f"{label}: member {rel} is a device or special file; refusing the archive")
                else:
                    with zf.open(info) as src:
                        _write_member(src, staging / rel, budget)
    except (
        zipfile.BadZipFile,
        zlib.error,
        lzma.LZMAError,
        EOFError,
        NotImplementedError,
        RuntimeError,
        OSError,
    ) as exc:
        raise BuildError(f"{label}: not a source archive (a damaged or encrypted zip: {exc})") from None


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


# --- metadata ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PackageMetadata:
    """What ``PKG-INFO``, ``pyproject.toml`` and ``setup.cfg`` say, read as text.

    Attributes:
        name, version, url: the package's; None when no file says.
        license_expression: an SPDX expression (``License-Expression``, ``license = "MIT"``).
        license_field: the free-text license (``License:``, ``license = {text = ...}``).
        classifiers: trove classifiers.
        license_files: files the metadata names as holding the license text.
    """

    name: str | None = None
    version: str | None = None
    url: str | None = None
    license_expression: str | None = None
    license_field: str | None = None
    classifiers: tuple[str, ...] = ()
    license_files: tuple[str, ...] = field(default=())


def read_metadata(root: Path) -> PackageMetadata:
    """The package metadata at ``root``: ``PKG-INFO`` first, then ``pyproject.toml``
    (``[project]``, then ``[tool.poetry]``), then ``setup.cfg``; each field from the first
    file that has it. ``setup.py`` is never run."""
    found = [_pkg_info(root), *_pyproject(root), _setup_cfg(root)]

    def first(attr: str) -> Any:
        return next((getattr(m, attr) for m in found if getattr(m, attr)), None)

    files = tuple(dict.fromkeys(f for m in found for f in m.license_files))
    return PackageMetadata(
        name=first("name"),
        version=first("version"),
        url=first("url"),
        license_expression=first("license_expression"),
        license_field=first("license_field"),
        classifiers=first("classifiers") or (),
        license_files=files,
    )


def _read_small(path: Path, max_bytes: int = 5_000_000) -> str | None:
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > max_bytes:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _str(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _pkg_info(root: Path) -> PackageMetadata:
    text = _read_small(root / "PKG-INFO")
    if text is None:
        return PackageMetadata()
    headers = email.parser.HeaderParser().parsestr(text)
    urls = {}
    for entry in headers.get_all("Project-URL") or []:
        label, _, url = str(entry).partition(",")
        urls[label.strip()] = url.strip()
    home = _str(headers.get("Home-page"))
    return PackageMetadata(
        name=_str(headers.get("Name")),
        version=_str(headers.get("Version")),
        url=_pick_url(urls) or (home if home and home.upper() != "UNKNOWN" else None),
        license_expression=_str(headers.get("License-Expression")),
        license_field=_unfold(headers.get("License")),
        classifiers=tuple(str(c).strip() for c in headers.get_all("Classifier") or []),
        license_files=tuple(str(f).strip() for f in headers.get_all("License-File") or []),
    )


def _unfold(value: Any) -> str | None:
    """A multi-line header value without its continuation indent (and setuptools' ``|``)."""
    if value is None:
        return None
    lines = str(value).splitlines()
    rest = [re.sub(r"^\s*\|?", "", line) for line in lines[1:]]
    return _str("\n".join([lines[0] if lines else "", *rest]))


def _pyproject(root: Path) -> list[PackageMetadata]:
    text = _read_small(root / "pyproject.toml")
    try:
        data = tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError:
        logger.info("%s: pyproject.toml does not parse; its metadata is ignored", root)
        return []
    poetry = _table(_table(data, "tool"), "poetry")
    return [_project_table(root, _table(data, "project")), _poetry_table(poetry)]


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _project_table(root: Path, project: dict[str, Any]) -> PackageMetadata:
    license_value = project.get("license")
    table = license_value if isinstance(license_value, dict) else {}
    files = [table["file"]] if isinstance(table.get("file"), str) else []
    patterns = project.get("license-files")
    for pattern in patterns if isinstance(patterns, list) else []:
        if isinstance(pattern, str) and ".." not in pattern and not pattern.startswith("/"):
            files.extend(p.relative_to(root).as_posix() for p in sorted(root.glob(pattern)) if p.is_file())
    urls = project.get("urls")
    classifiers = project.get("classifiers")
    return PackageMetadata(
        name=_str(project.get("name")),
        version=_str(project.get("version")),
        url=_pick_url(urls) if isinstance(urls, dict) else None,
        license_expression=_str(license_value),
        license_field=_str(table.get("text")),
        classifiers=tuple(c for c in classifiers if isinstance(c, str)) if isinstance(classifiers, list) else (),
        license_files=tuple(files),
    )


def _poetry_table(poetry: dict[str, Any]) -> PackageMetadata:
    classifiers = poetry.get("classifiers")
    return PackageMetadata(
        name=_str(poetry.get("name")),
        version=_str(poetry.get("version")),
        url=_str(poetry.get("homepage")) or _str(poetry.get("repository")),
        license_field=_str(poetry.get("license")),
        classifiers=tuple(c for c in classifiers if isinstance(c, str)) if isinstance(classifiers, list) else (),
    )


def _setup_cfg(root: Path) -> PackageMetadata:
    text = _read_small(root / "setup.cfg")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text or "")
    except configparser.Error:
        return PackageMetadata()
    if not parser.has_section("metadata"):
        return PackageMetadata()
    meta = parser["metadata"]
    urls = dict(_cfg_pair(line) for line in _cfg_list(meta.get("project_urls", "")) if "=" in line)
    files = _cfg_list(meta.get("license_files", "") or meta.get("license_file", ""))
    return PackageMetadata(
        name=_str(meta.get("name")),
        version=_cfg_version(root, meta.get("version")),
        url=_pick_url(urls) or _str(meta.get("url")) or _str(meta.get("home_page")),
        license_field=_str(meta.get("license")),
        classifiers=tuple(c for c in _cfg_list(meta.get("classifiers", "")) if not c.startswith("file:")),
        license_files=tuple(files),
    )


def _cfg_list(value: str) -> list[str]:
    return [item.strip() for item in re.split(r"[\n,]", value) if item.strip()]


def _cfg_pair(line: str) -> tuple[str, str]:
    key, _, value = line.partition("=")
    return key.strip(), value.strip()


def _cfg_version(root: Path, value: str | None) -> str | None:
    """A literal version, or the first line of ``file: VERSION``; ``attr:`` needs code: None."""
    value = _str(value)
    if not value or value.startswith("attr:"):
        return None
    if value.startswith("file:"):
        rel = value.removeprefix("file:").strip()
        text = _read_small(root / rel, 1000) if ".." not in rel and not rel.startswith("/") else None
        return _str(text.splitlines()[0]) if text and text.strip() else None
    return value


_URL_LABELS = ("homepage", "home", "source", "sourcecode", "repository", "code", "github")


def _pick_url(urls: dict[str, Any]) -> str | None:
    """The home page or source repository among labelled project URLs, else the first."""
    plain = {re.sub(r"[\s_-]+", "", str(k)).lower(): v for k, v in urls.items() if _str(v)}
    for label in _URL_LABELS:
        if label in plain:
            return str(plain[label]).strip()
    return next((str(v).strip() for v in plain.values()), None)


# --- license ----------------------------------------------------------------------------

_LICENSE_FILE = re.compile(r"(licen[cs]e|copying|unlicense)([-._].*)?", re.IGNORECASE)


def license_file_paths(root: Path, named: Iterable[str] = ()) -> list[str]:
    """License files at ``root``: ``LICENSE*``, ``LICENCE*``, ``COPYING*``, ``LICENSES/*``,
    and those the metadata names (when inside ``root``)."""
    found = [
        p.name for p in sorted(root.iterdir()) if p.is_file() and _LICENSE_FILE.fullmatch(p.name) and p.suffix != ".py"
    ]
    reuse = root / "LICENSES"
    if reuse.is_dir() and not reuse.is_symlink():
        found += [f"LICENSES/{p.name}" for p in sorted(reuse.iterdir()) if p.is_file()]
    for rel in named:
        clean = PurePosixPath(rel.replace("\\", "/"))
        if ".." not in clean.parts and not clean.is_absolute() and (root / clean).is_file():
            found.append(clean.as_posix())
    return list(dict.fromkeys(found))


def detect_license(root: Path, metadata: PackageMetadata) -> DetectedLicense:
    """The repository's license from its license files and its metadata."""
    files: dict[str, str | None] = {}
    for rel in license_file_paths(root, metadata.license_files):
        text = _read_small(root / rel, 1_000_000)
        if text is not None:
            files[rel] = identify_license_text(text)
    declared = license_from_metadata(
        expression=metadata.license_expression, license_field=metadata.license_field, classifiers=metadata.classifiers
    )
    return combine_license_evidence(files, declared)
