"""Package metadata read as text from ``PKG-INFO``, ``pyproject.toml`` and ``setup.cfg``
(``setup.py`` is never run)."""

from __future__ import annotations

import configparser
import email.parser
import logging
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from gym_repost.construct.licenses import (
    DetectedLicense,
    combine_license_evidence,
    identify_license_text,
    license_from_metadata,
)

logger = logging.getLogger(__name__)


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
