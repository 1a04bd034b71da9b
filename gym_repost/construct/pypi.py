"""PyPI: a ``pypi:NAME[==VERSION]`` spec, the release its JSON API describes, the sdist
downloaded with its sha256 checked, and the cache of both.

A spec may pin the sdist's digest as pip's hash-checking mode does,
``pypi:NAME==VERSION --hash=sha256:HEX``: the build then uses that archive and no other
(a corpus list of pinned specs is a lock file: it rebuilds byte for byte)."""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from gym_repost.construct.source_files import CHUNK_BYTES, IngestLimits
from gym_repost.errors import BuildError, SourceUnreachableError

logger = logging.getLogger(__name__)


PYPI_URL_ENV = "GYM_REPOST_PYPI_URL"
DEFAULT_PYPI_URL = "https://pypi.org"

LATEST_TTL_SECONDS = 24 * 3600
"""How long ``pypi:NAME`` (no version) trusts the release it resolved last time."""

# --- PyPI -------------------------------------------------------------------------------

_PYPI_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_PYPI_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")


_PIN = re.compile(r"\s+--hash=sha256:(?P<digest>[0-9a-fA-F]{64})\s*$")


def split_pin(source: str) -> tuple[str, str | None]:
    """``pypi:NAME==VERSION --hash=sha256:HEX`` -> (``pypi:NAME==VERSION``, the digest in
    lower case); a spec without a pin -> (itself, None).

    Raises:
        BuildError: a ``--hash`` that is not ``sha256:`` and 64 hex digits, or a pin
            without ``==VERSION``.
    """
    if "--hash" not in source:
        return source, None
    match = _PIN.search(source)
    spec = source[: match.start()] if match else ""
    if match is None or "==" not in spec or "--hash" in spec:
        raise BuildError(
            f"{source}: a pinned PyPI source is pypi:NAME==VERSION --hash=sha256:HEX (64 hex digits, one pin)"
        )
    return spec.strip(), match.group("digest").lower()


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
    name: str,
    version: str | None,
    *,
    cache_dir: Path,
    limits: IngestLimits = IngestLimits(),
    sha256: str | None = None,
) -> tuple[Path, SdistRelease, list[str]]:
    """The sdist of ``name`` (``version``, or the latest release), from the cache or PyPI.

    ``sha256``: the digest the archive must have (a pinned spec, see :func:`split_pin`).

    Returns:
        the archive's path, the release, and notes (a stale cache used while offline).

    Raises:
        BuildError: PyPI cannot be reached (and nothing is cached), the package or
            version does not exist, the release has no sdist, the download's sha256
            differs from the one PyPI published, or PyPI's sdist is not the pinned one.
    """
    sdists = cache_dir / "sdists"
    record = sdists / _normalize_name(name) / f"{version or 'latest'}.json"
    cached = _load_release(record)
    if cached is not None and sha256 is not None and cached.sha256 != sha256:
        cached = None  # another archive than the pinned one: ask PyPI again
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
    if sha256 is not None and release.sha256 != sha256:
        raise BuildError(
            f"pypi:{name}=={version}: PyPI's sdist {release.filename} has sha256 {release.sha256}, "
            f"not the pinned {sha256}; the release changed, or the pin is wrong"
        )
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
        error = SourceUnreachableError if _transient(exc.code) else BuildError
        raise error(f"{wanted}: PyPI at {index} answered HTTP {exc.code} ({exc.reason})") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise SourceUnreachableError(_unreachable(index, exc)) from None
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


def _transient(code: int) -> bool:
    """An HTTP status that may answer otherwise later: too many requests, a server error."""
    return code == 429 or code >= 500


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


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _archive_matches(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_file(path) == sha256


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
        error = SourceUnreachableError if _transient(exc.code) else BuildError
        raise error(f"{url}: HTTP {exc.code} ({exc.reason}) while downloading the sdist") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        tmp.unlink(missing_ok=True)
        raise SourceUnreachableError(_unreachable(urllib.parse.urlsplit(url).netloc or url, exc)) from None
    if got != sha256:
        tmp.unlink(missing_ok=True)
        raise BuildError(
            f"{dest.name}: the download's sha256 {got} differs from the {sha256} PyPI published; "
            "the file is damaged or was tampered with, so it is not used"
        )
    os.replace(tmp, dest)


def _copy_hashing(src: IO[bytes], out: IO[bytes], max_bytes: int, label: str) -> str:
    digest, size = hashlib.sha256(), 0
    while chunk := src.read(CHUNK_BYTES):
        size += len(chunk)
        if size > max_bytes:
            raise BuildError(f"{label}: larger than {max_bytes} bytes (IngestLimits.archive_max_bytes)")
        digest.update(chunk)
        out.write(chunk)
    return digest.hexdigest()
