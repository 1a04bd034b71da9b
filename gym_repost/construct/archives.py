"""Source archives unpacked member by member with every path checked: no absolute paths,
no ``..``, no links out of the archive, no device files, a bound on the unpacked size."""

from __future__ import annotations

import logging
import lzma
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO

from gym_repost.construct.pypi import sha256_file
from gym_repost.construct.source_files import CHUNK_BYTES, SOURCE_FORMS, IngestLimits
from gym_repost.errors import BuildError

logger = logging.getLogger(__name__)


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


def archive_stem(filename: str) -> str:
    """The file name without its archive suffix, reduced to safe characters."""
    lower = filename.lower()
    stem = next((filename[: -len(s)] for s in _ARCHIVE_SUFFIXES if lower.endswith(s)), filename)
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", stem).strip("._") or "archive"


def _unpack_dir_name(archive: Path) -> str:
    return f"{archive_stem(archive.name)}-{sha256_file(archive)[:16]}"


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
        while chunk := src.read(CHUNK_BYTES):
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
