"""Ingest: directories, archives (hostile ones too), metadata, limits, licenses and PyPI.

PyPI's failure modes are played by a real HTTP server on loopback speaking its JSON API;
the real PyPI is used by the tests marked ``network``.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import os
import socket
import stat
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

import pytest

from gym_repost.construct.archives import link_stays_inside, member_path
from gym_repost.construct.ingest import ingest, split_name_version
from gym_repost.construct.pypi import PYPI_URL_ENV, parse_pypi_spec, split_pin
from gym_repost.construct.source_files import IngestLimits, decode_text, skip_directory, wanted_file
from gym_repost.construct.source_metadata import read_metadata
from gym_repost.construct.stages import SourceRepository
from gym_repost.errors import BuildError, SourceUnreachableError
from gym_repost.sandbox.base import Sandbox

MIT_TEXT = """Copyright (c) 2024 Jane Doe

Permission is hereby granted, free of charge, to any person obtaining a copy of this
software and associated documentation files (the "Software"), to deal in the Software
without restriction, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies
or substantial portions of the Software.
"""
GPL_TEXT = """                    GNU GENERAL PUBLIC LICENSE
                       Version 3, 29 June 2007
"""
PKG_FILES: dict[str, str | bytes] = {
    "LICENSE": MIT_TEXT,
    "pkg/__init__.py": "from .core import add\n",
    "pkg/core.py": "def add(a, b):\n    return a + b\n",
    "pkg/data/table.csv": "a,b\n1,2\n",
    "tests/test_core.py": "from pkg import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
}


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def make_tar(path: Path, files: dict[str, str | bytes], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, content in files.items():
            data = content if isinstance(content, bytes) else content.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def make_zip(path: Path, files: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    return path


def tar_with(path: Path, member: tarfile.TarInfo) -> Path:
    """A tar.gz holding one good file and ``member``."""
    with tarfile.open(path, "w:gz") as tar:
        good = tarfile.TarInfo("pkg-1.0/pkg/mod.py")
        good.size = 2
        tar.addfile(good, io.BytesIO(b"x\n"))
        tar.addfile(member, io.BytesIO(b"") if member.isfile() else None)
    return path


def sdist_files(name: str = "pkg", version: str = "1.0") -> dict[str, str | bytes]:
    top = f"{name}-{version}"
    pkg_info = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nLicense: MIT\n\nLong description.\n"
    return {f"{top}/PKG-INFO": pkg_info, **{f"{top}/{rel}": text for rel, text in PKG_FILES.items()}}


# --- pure helpers -----------------------------------------------------------------------


def test_member_paths() -> None:
    assert member_path("pkg-1.0/./a/b.py", "x") == PurePosixPath("pkg-1.0/a/b.py")
    assert member_path("./", "x") is None
    assert member_path("pkg\\win\\a.py", "x") == PurePosixPath("pkg/win/a.py")
    for bad, why in [
        ("/etc/passwd", "absolute path"),
        ("C:/x.py", "absolute path"),
        ("pkg/../../x.py", "climbs out"),
        ("..", "climbs out"),
    ]:
        with pytest.raises(BuildError, match=why):
            member_path(bad, "x.tar.gz")


def test_link_targets() -> None:
    link = PurePosixPath("pkg/sub/link")
    assert link_stays_inside(link, "../mod.py", hard=False)
    assert link_stays_inside(link, "../../top.txt", hard=False)
    assert not link_stays_inside(link, "../../../outside", hard=False)
    assert not link_stays_inside(link, "/etc/passwd", hard=False)
    assert link_stays_inside(link, "pkg/mod.py", hard=True)
    assert not link_stays_inside(link, "../pkg/mod.py", hard=True)
    assert not link_stays_inside(link, "", hard=False)


def test_which_directories_and_files_are_kept() -> None:
    for skipped in [
        ".git",
        "pkg/__pycache__",
        "build",
        "dist",
        "pkg.egg-info",
        "docs/_build",
        ".tox",
        "venv",
        ".venv",
        "node_modules",
        "a/.hg",
    ]:
        assert skip_directory(PurePosixPath(skipped)), skipped
    for kept in ["pkg", "pkg/build", "src/dist", "docs", "tests/data"]:
        assert not skip_directory(PurePosixPath(kept)), kept
    assert all(wanted_file(PurePosixPath(p)) for p in ["a.py", "b.pyi", "c.JSON", "LICENSE", "d/e.yaml"])
    assert not any(wanted_file(PurePosixPath(p)) for p in ["x.png", "y.so", "z.pyc", ".gitignore"])


def test_decode_text() -> None:
    assert decode_text("héllo".encode()) == "héllo"
    assert decode_text("héllo".encode("latin-1")) is None
    assert decode_text(b"\x89PNG\x00\x01") is None
    latin = "# -*- coding: latin-1 -*-\nNAME = 'café'\n"
    assert decode_text(latin.encode("latin-1"), python=True) == latin
    assert decode_text(latin.encode("latin-1")) is None


def test_names_and_specs() -> None:
    assert split_name_version("boltons-26.2.0") == ("boltons", "26.2.0")
    assert split_name_version("python_slugify-9.2.0rc1") == ("python_slugify", "9.2.0rc1")
    assert split_name_version("myrepo") == ("myrepo", None)
    assert parse_pypi_spec("pypi:inflection==0.5.1") == ("inflection", "0.5.1")
    assert parse_pypi_spec("pypi:more-itertools") == ("more-itertools", None)
    for bad in ["pypi:", "pypi:foo>=1.0", "pypi:foo==", "pypi:../x"]:
        with pytest.raises(BuildError, match="pypi:NAME or pypi:NAME==VERSION"):
            parse_pypi_spec(bad)


# --- directories ------------------------------------------------------------------------


def test_directory_ingest_keeps_sources_and_small_data(tmp_path: Path) -> None:
    repo = write_tree(
        tmp_path / "myrepo",
        {
            **PKG_FILES,
            "README.md": "# myrepo\n",
            "setup.py": "raise SystemExit('never run')\n",
            ".git/config": "[core]\n",
            "pkg/__pycache__/core.cpython-311.pyc": b"\x00\x01",
            "build/lib/pkg/core.py": "stale copy\n",
            "pkg.egg-info/PKG-INFO": "Name: stale\n",
            "docs/_build/html/index.html": "<html/>",
            "logo.png": b"\x89PNG\r\n\x1a\n\x00",
            "pkg/build/__init__.py": "",
            "notes/latin.txt": "caf\xe9".encode("latin-1"),
            "blob": b"\x00\x01\x02",
            ".env": "SECRET=1\n",
        },
    )
    repo_ = ingest(repo, cache_dir=tmp_path / "cache")
    assert sorted(repo_.files) == [
        "LICENSE",
        "README.md",
        "pkg/__init__.py",
        "pkg/build/__init__.py",
        "pkg/core.py",
        "pkg/data/table.csv",
        "setup.py",
        "tests/test_core.py",
    ]
    assert repo_.files["pkg/core.py"] == PKG_FILES["pkg/core.py"]
    assert repo_.python_files == [
        "pkg/__init__.py",
        "pkg/build/__init__.py",
        "pkg/core.py",
        "setup.py",
        "tests/test_core.py",
    ]
    assert (repo_.name, repo_.version, repo_.root, repo_.source) == ("myrepo", None, repo.resolve(), "dir:myrepo")
    assert (repo_.license, repo_.license_kind) == ("MIT", "permissive")
    assert repo_.notes == ["blob: left out, not UTF-8 text", "notes/latin.txt: left out, not UTF-8 text"]
    assert not (tmp_path / "cache").exists()  # a directory is read in place


def test_symlinks_in_a_directory_are_not_followed(tmp_path: Path) -> None:
    secret = write_tree(tmp_path / "outside", {"secret.txt": "do not read\n"}) / "secret.txt"
    repo = write_tree(tmp_path / "repo", {"LICENSE": MIT_TEXT, "a.py": "A = 1\n"})
    (repo / "leak.txt").symlink_to(secret)
    repository = ingest(repo)
    assert sorted(repository.files) == ["LICENSE", "a.py"]
    assert repository.notes == ["leak.txt: left out, a link or special file"]


def test_metadata_from_pyproject(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "pyproject.toml": (
                '[project]\nname = "fancy-lib"\nversion = "2.1.0"\nlicense = "Apache-2.0"\n'
                '[project.urls]\nDocumentation = "https://docs.example"\nSource = "https://git.example/fancy"\n'
            )
        },
    )
    meta = read_metadata(tmp_path)
    assert (meta.name, meta.version, meta.url, meta.license_expression) == (
        "fancy-lib",
        "2.1.0",
        "https://git.example/fancy",
        "Apache-2.0",
    )


def test_metadata_from_pyproject_license_table_and_poetry(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "COPYING.md": GPL_TEXT,
            "pyproject.toml": (
                '[project]\nname = "a"\ndynamic = ["version"]\nlicense = {file = "COPYING.md"}\n'
                '[tool.poetry]\nname = "a-poetry"\nversion = "0.3"\nlicense = "BSD-2-Clause"\n'
                'homepage = "https://a.example"\n'
            ),
        },
    )
    meta = read_metadata(tmp_path)
    assert (meta.name, meta.version, meta.url, meta.license_field) == ("a", "0.3", "https://a.example", "BSD-2-Clause")
    assert meta.license_files == ("COPYING.md",)


def test_metadata_from_setup_cfg_never_runs_setup_py(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    write_tree(
        tmp_path,
        {
            "setup.py": f"open({str(marker)!r}, 'w')\n",
            "VERSION": "4.5.6\n",
            "setup.cfg": (
                "[metadata]\nname = cfgpkg\nversion = file: VERSION\nlicense = BSD 3-Clause\n"
                "project_urls =\n    Tracker = https://t.example\n    Homepage = https://h.example\n"
                "classifiers =\n    License :: OSI Approved :: BSD License\n"
            ),
        },
    )
    meta = read_metadata(tmp_path)
    assert (meta.name, meta.version, meta.url, meta.license_field) == (
        "cfgpkg",
        "4.5.6",
        "https://h.example",
        "BSD 3-Clause",
    )
    assert meta.classifiers == ("License :: OSI Approved :: BSD License",)
    assert not marker.exists()


def test_metadata_from_pkg_info_wins_and_unfolds_fields(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "PKG-INFO": (
                "Metadata-Version: 2.1\nName: real-name\nVersion: 1.2\nHome-page: https://home.example\n"
                "License: Permission is hereby granted, free of charge, to any person obtaining a\n"
                "        |copy of this software; the above copyright notice and this permission\n"
                "        |notice shall be included in all copies.\n"
                "License-File: LICENSE.rst\n\nBody text, Name: not a header\n"
            ),
            "setup.cfg": "[metadata]\nname = other\nversion = 9.9\n",
        },
    )
    meta = read_metadata(tmp_path)
    assert (meta.name, meta.version, meta.url) == ("real-name", "1.2", "https://home.example")
    assert meta.license_field is not None and "\n|" not in meta.license_field
    assert meta.license_files == ("LICENSE.rst",)


def test_attr_versions_stay_unknown(tmp_path: Path) -> None:
    write_tree(tmp_path, {"setup.cfg": "[metadata]\nname = x\nversion = attr: x.__version__\n"})
    assert read_metadata(tmp_path).version is None


# --- archives ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "filename"),
    [
        ("w:gz", "pkg-1.0.tar.gz"),
        ("w:bz2", "pkg-1.0.tar.bz2"),
        ("w:xz", "pkg-1.0.tar.xz"),
        ("w", "pkg-1.0.tar"),
        ("w:gz", "download.bin"),
    ],
)
def test_tar_archives_are_recognised_by_content(tmp_path: Path, mode: str, filename: str) -> None:
    archive = make_tar(tmp_path / filename, sdist_files(), mode)
    repository = ingest(archive, cache_dir=tmp_path / "cache")
    assert (repository.name, repository.version, repository.license) == ("pkg", "1.0", "MIT")
    assert sorted(repository.files) == sorted(["PKG-INFO", *PKG_FILES])
    assert repository.root.name == "pkg-1.0"
    assert repository.root.parent.parent == tmp_path / "cache" / "sources"


def test_zip_archive(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "pkg-1.0.zip", sdist_files())
    repository = ingest(archive, cache_dir=tmp_path / "cache")
    assert (repository.name, repository.version) == ("pkg", "1.0")
    assert repository.files["pkg/core.py"] == PKG_FILES["pkg/core.py"]


def test_an_archive_without_a_top_directory_is_named_after_its_file(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "mylib-2.0.tgz", PKG_FILES)
    repository = ingest(archive, cache_dir=tmp_path / "cache")
    assert (repository.name, repository.version) == ("mylib", "2.0")
    assert repository.root.name.startswith("mylib-2.0-")
    assert "pkg/core.py" in repository.files


def test_an_archive_is_unpacked_once(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", sdist_files())
    first = ingest(archive, cache_dir=tmp_path / "cache")
    stamp = first.root.stat().st_mtime_ns
    second = ingest(archive, cache_dir=tmp_path / "cache")
    assert second.root == first.root and second.root.stat().st_mtime_ns == stamp
    assert second.files == first.files
    assert [p.name for p in (tmp_path / "cache" / "sources").iterdir()] == [first.root.parent.name]
    assert first.root.parent.stat().st_mode & 0o755 == 0o755


def hostile_members() -> list[tuple[str, tarfile.TarInfo, str]]:
    def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, link
        return info

    return [
        ("dotdot", member("pkg-1.0/../../evil.py"), "climbs out of the archive"),
        ("absolute", member("/tmp/gym-repost-evil.py"), "has an absolute path"),
        ("symlink absolute", member("pkg-1.0/passwd", tarfile.SYMTYPE, "/etc/passwd"), "links outside"),
        ("symlink relative", member("pkg-1.0/sub/up", tarfile.SYMTYPE, "../../../evil"), "links outside"),
        ("hardlink", member("pkg-1.0/hard", tarfile.LNKTYPE, "../evil.py"), "climbs out|links outside"),
        ("char device", member("pkg-1.0/dev", tarfile.CHRTYPE), "device or special file"),
        ("fifo", member("pkg-1.0/fifo", tarfile.FIFOTYPE), "device or special file"),
    ]


@pytest.mark.parametrize(("case", "member", "message"), hostile_members(), ids=[c[0] for c in hostile_members()])
def test_hostile_tar_members_are_refused(tmp_path: Path, case: str, member: tarfile.TarInfo, message: str) -> None:
    archive = tar_with(tmp_path / "pkg-1.0.tar.gz", member)
    with pytest.raises(BuildError, match=message):
        ingest(archive, cache_dir=tmp_path / "cache")
    assert not list(tmp_path.rglob("evil*")) and not Path("/tmp/gym-repost-evil.py").exists()
    assert not any((tmp_path / "cache" / "sources").iterdir())  # no half-unpacked directory left


def test_links_inside_the_archive_are_left_out(tmp_path: Path) -> None:
    link = tarfile.TarInfo("pkg-1.0/pkg/alias.py")
    link.type, link.linkname = tarfile.SYMTYPE, "mod.py"
    repository = ingest(tar_with(tmp_path / "pkg-1.0.tar.gz", link), cache_dir=tmp_path / "cache", licenses="any")
    assert sorted(repository.files) == ["pkg/mod.py"]
    assert not (repository.root / "pkg" / "alias.py").exists()


def test_hostile_zip_members_are_refused(tmp_path: Path) -> None:
    dotdot = make_zip(tmp_path / "a.zip", {"pkg/ok.py": "x", "../evil.py": "x"})
    with pytest.raises(BuildError, match="climbs out"):
        ingest(dotdot, cache_dir=tmp_path / "cache")
    absolute = make_zip(tmp_path / "b.zip", {"/abs.py": "x"})
    with pytest.raises(BuildError, match="absolute path"):
        ingest(absolute, cache_dir=tmp_path / "cache")
    link = zipfile.ZipInfo("pkg/passwd")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(tmp_path / "c.zip", "w") as zf:
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(BuildError, match="links outside"):
        ingest(tmp_path / "c.zip", cache_dir=tmp_path / "cache")
    assert not list(tmp_path.rglob("evil*")) and not Path("/abs.py").exists()


@pytest.mark.parametrize("maker", [make_tar, make_zip])
def test_archive_bombs_are_refused(tmp_path: Path, maker: Callable[..., Path]) -> None:
    archive = maker(tmp_path / "bomb-1.0.tar.gz", {"bomb-1.0/zeros.txt": b"0" * 200_000})
    assert archive.stat().st_size < 5_000
    with pytest.raises(BuildError, match="unpacks to more than 100000 bytes"):
        ingest(archive, cache_dir=tmp_path / "cache", limits=IngestLimits(archive_max_bytes=100_000))
    many = maker(tmp_path / "many-1.0.tar.gz", {f"many-1.0/f{i}.py": "" for i in range(20)})
    with pytest.raises(BuildError, match="more than 10 members"):
        ingest(many, cache_dir=tmp_path / "cache", limits=IngestLimits(archive_max_members=10))


def test_what_is_not_an_archive_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.tar.gz"
    text.write_text("just some notes\n")
    with pytest.raises(BuildError, match=r"notes.tar.gz: not a source archive \(text\)"):
        ingest(text, cache_dir=tmp_path / "cache")
    gz = tmp_path / "data.gz"
    gz.write_bytes(gzip.compress(b"plain data, not a tar\n" * 10))
    with pytest.raises(BuildError, match=r"not a source archive \(gzip data that is not a tar archive"):
        ingest(gz, cache_dir=tmp_path / "cache")
    whole = make_tar(tmp_path / "whole.tar.gz", {f"p-1/{i}.py": os.urandom(3000).hex() for i in range(20)})
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(BuildError, match="not a source archive"):
        ingest(cut, cache_dir=tmp_path / "cache")
    empty = tmp_path / "empty.zip"
    empty.write_bytes(b"")
    with pytest.raises(BuildError, match=r"not a source archive \(empty\)"):
        ingest(empty, cache_dir=tmp_path / "cache")


def test_a_source_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as info:
        ingest(tmp_path / "nowhere")
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'nowhere'}: no such directory, archive or PyPI package")
    assert "a local directory, a source archive" in message and "pypi:NAME[==VERSION]" in message


# --- limits -----------------------------------------------------------------------------


def test_a_file_over_the_size_limit_is_left_out_and_noted(tmp_path: Path) -> None:
    repo = write_tree(
        tmp_path / "r",
        {"LICENSE": "MIT License\n", "pkg/core.py": PKG_FILES["pkg/core.py"], "pkg/huge.py": "X = 1\n" * 50},
    )
    repository = ingest(repo, limits=IngestLimits(max_file_bytes=200))
    assert sorted(repository.files) == ["LICENSE", "pkg/core.py"]
    assert repository.notes == ["pkg/huge.py: left out, 300 bytes is over the limit of 200 per file"]


def test_a_repository_over_the_total_or_file_count_limit_is_refused(tmp_path: Path) -> None:
    repo = write_tree(tmp_path / "r", PKG_FILES)
    with pytest.raises(BuildError, match=r"more than 300 bytes of text files \(IngestLimits.max_total_bytes\)"):
        ingest(repo, limits=IngestLimits(max_total_bytes=300))
    with pytest.raises(BuildError, match=r"more than 3 text files \(IngestLimits.max_files\)"):
        ingest(repo, limits=IngestLimits(max_files=3))


# --- licenses ---------------------------------------------------------------------------


def test_copyleft_is_refused_by_default_and_built_on_request(tmp_path: Path) -> None:
    repo = write_tree(tmp_path / "gplrepo", {"COPYING": GPL_TEXT, "a.py": "A = 1\n"})
    with pytest.raises(BuildError) as info:
        ingest(repo)
    assert str(info.value) == (
        "gplrepo is licensed GPL-3.0 (copyleft); gym-repost keeps permissive licenses "
        "by default; pass --licenses any to build it anyway"
    )
    repository = ingest(repo, licenses="any")
    assert (repository.license, repository.license_kind) == ("GPL-3.0", "copyleft")
    assert ingest(repo, licenses="GPL-3.0,MIT").license == "GPL-3.0"


def test_no_license_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    repo = write_tree(tmp_path / "bare", {"a.py": "A = 1\n"})
    with pytest.raises(BuildError, match="bare has no license gym-repost can detect: it has no LICENSE"):
        ingest(repo)
    assert ingest(repo, licenses="any").license is None


def test_a_source_without_python_files_has_nothing_to_build(tmp_path: Path) -> None:
    """Said before its license is looked at (an empty folder has none either)."""
    empty = write_tree(tmp_path / "e", {"README.md": "# nothing\n"})
    with pytest.raises(BuildError, match="has no Python files \\(.py\\): nothing to build from"):
        ingest(empty)


def test_metadata_license_is_used_and_conflicts_are_noted(tmp_path: Path) -> None:
    module = {"m.py": "X = 1\n"}
    only_meta = write_tree(tmp_path / "m", {**module, "pyproject.toml": '[project]\nname = "m"\nlicense = "ISC"\n'})
    assert ingest(only_meta).license == "ISC"
    conflict = write_tree(
        tmp_path / "c", {**module, "LICENSE": MIT_TEXT, "setup.cfg": "[metadata]\nname = c\nlicense = GPLv3\n"}
    )
    repository = ingest(conflict)
    assert repository.license == "MIT"
    assert repository.notes == ["the metadata says GPL-3.0 but the license file says MIT; going by the license file"]


# --- PyPI, played by a loopback server --------------------------------------------------


class FakeIndex:
    """A PyPI JSON API on 127.0.0.1: ``routes`` maps paths to (status, body)."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes]] = {}
        self.requests: list[str] = []
        self.releases: dict[str, dict[str, list[dict[str, object]]]] = {}
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.requests.append(self.path)
                status, body = index.routes.get(self.path, (404, b'{"message": "Not Found"}'))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add_release(
        self,
        name: str,
        version: str,
        archive: bytes,
        *,
        digest: str | None = None,
        packagetype: str = "sdist",
        version_route: bool = True,
        file_url: str | None = None,
    ) -> None:
        """Serve a release: its JSON (per version, and in the project's ``releases``) and its file."""
        filename = f"{name}-{version}.tar.gz" if packagetype == "sdist" else f"{name}-{version}-py3-none-any.whl"
        entry = {
            "packagetype": packagetype,
            "filename": filename,
            "url": file_url or f"{self.url}/files/{filename}",
            "digests": {"sha256": digest or hashlib.sha256(archive).hexdigest()},
        }
        info = {"name": name, "version": version}
        self.releases.setdefault(name, {})[version] = [entry]
        project = {"info": info, "urls": [entry], "releases": self.releases[name]}
        self.routes[f"/pypi/{name}/json"] = (200, json.dumps(project).encode())
        if version_route:
            self.routes[f"/pypi/{name}/{version}/json"] = (200, json.dumps({"info": info, "urls": [entry]}).encode())
        self.routes[f"/files/{filename}"] = (200, archive)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_pypi(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeIndex]:
    index = FakeIndex()
    monkeypatch.setenv(PYPI_URL_ENV, index.url)
    yield index
    index.stop()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def sdist_bytes(tmp_path: Path, name: str = "fakepkg", version: str = "1.0") -> bytes:
    return make_tar(tmp_path / f"{name}-{version}.tar.gz", sdist_files(name, version)).read_bytes()


def test_pypi_sdist_is_fetched_verified_and_cached(
    tmp_path: Path, fake_pypi: FakeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_pypi.add_release("fakepkg", "1.0", sdist_bytes(tmp_path))
    repository = ingest("pypi:fakepkg==1.0", cache_dir=tmp_path / "cache")
    assert (repository.name, repository.version, repository.source) == ("fakepkg", "1.0", "pypi:fakepkg==1.0")
    assert repository.url == f"{fake_pypi.url}/project/fakepkg/1.0/"
    assert "pkg/core.py" in repository.files
    assert fake_pypi.requests == ["/pypi/fakepkg/1.0/json", "/files/fakepkg-1.0.tar.gz"]
    assert (tmp_path / "cache" / "sdists" / "fakepkg-1.0.tar.gz").is_file()
    monkeypatch.setenv(PYPI_URL_ENV, closed_port_url())
    again = ingest("pypi:fakepkg==1.0", cache_dir=tmp_path / "cache")
    assert again.files == repository.files and again.root == repository.root
    assert len(fake_pypi.requests) == 2


def test_a_pinned_sdist_is_that_archive_or_an_error(
    tmp_path: Path, fake_pypi: FakeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = sdist_bytes(tmp_path)
    digest = hashlib.sha256(archive).hexdigest()
    fake_pypi.add_release("fakepkg", "1.0", archive)
    pinned = f"pypi:fakepkg==1.0 --hash=sha256:{digest.upper()}"
    assert split_pin(pinned) == ("pypi:fakepkg==1.0", digest)
    repository = ingest(pinned, cache_dir=tmp_path / "cache")
    # the tasks' provenance names the release, not the pin: a pinned build makes the same tasks
    assert (repository.source, repository.version) == ("pypi:fakepkg==1.0", "1.0")
    # cached: offline, the pinned archive is used
    monkeypatch.setenv(PYPI_URL_ENV, closed_port_url())
    assert ingest(pinned, cache_dir=tmp_path / "cache").files == repository.files
    # another digest: the cache is not trusted, and PyPI's archive is not the pinned one
    monkeypatch.setenv(PYPI_URL_ENV, fake_pypi.url)
    other = "0" * 64
    with pytest.raises(BuildError, match=f"has sha256 {digest}, not the pinned {other}"):
        ingest(f"pypi:fakepkg==1.0 --hash=sha256:{other}", cache_dir=tmp_path / "cache")
    for bad in ["pypi:fakepkg --hash=sha256:" + digest, "pypi:fakepkg==1.0 --hash=md5:ab", "pypi:x==1 --hash=sha256:1"]:
        with pytest.raises(BuildError, match="pinned PyPI source is pypi:NAME==VERSION --hash=sha256:HEX"):
            ingest(bad, cache_dir=tmp_path / "cache")


def test_pypi_latest_is_trusted_for_a_day_then_asked_again(
    tmp_path: Path, fake_pypi: FakeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_pypi.add_release("fakepkg", "1.0", sdist_bytes(tmp_path))
    assert ingest("pypi:fakepkg", cache_dir=tmp_path / "cache").version == "1.0"
    assert ingest("pypi:fakepkg", cache_dir=tmp_path / "cache").version == "1.0"
    assert fake_pypi.requests == ["/pypi/fakepkg/json", "/files/fakepkg-1.0.tar.gz"]
    record = tmp_path / "cache" / "sdists" / "fakepkg" / "latest.json"
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(record, (day_ago, day_ago))
    monkeypatch.setenv(PYPI_URL_ENV, closed_port_url())
    offline = ingest("pypi:fakepkg", cache_dir=tmp_path / "cache")
    assert offline.version == "1.0"
    assert offline.notes == ["PyPI was not reachable; used the cached fakepkg-1.0.tar.gz"]
    # The versioned record was written too: the same release pinned works offline.
    assert ingest("pypi:fakepkg==1.0", cache_dir=tmp_path / "cache").notes == []


def test_pypi_unknown_package_or_version(tmp_path: Path, fake_pypi: FakeIndex) -> None:
    fake_pypi.add_release("fakepkg", "1.0", sdist_bytes(tmp_path))
    with pytest.raises(BuildError, match=f"pypi:nosuchpkg: no package named nosuchpkg on {fake_pypi.url}"):
        ingest("pypi:nosuchpkg", cache_dir=tmp_path / "cache")
    with pytest.raises(
        BuildError,
        match=f"pypi:fakepkg==9.9: no version 9.9 of fakepkg on {fake_pypi.url} "
        r"\(latest: 1.0\)",
    ):
        ingest("pypi:fakepkg==9.9", cache_dir=tmp_path / "cache")
    assert fake_pypi.requests[-2:] == ["/pypi/fakepkg/9.9/json", "/pypi/fakepkg/json"]


def test_an_index_without_version_routes_is_read_through_the_project(tmp_path: Path, fake_pypi: FakeIndex) -> None:
    fake_pypi.add_release("fakepkg", "0.9", sdist_bytes(tmp_path, version="0.9"), version_route=False)
    fake_pypi.add_release("fakepkg", "1.0", sdist_bytes(tmp_path), version_route=False)
    repository = ingest("pypi:fakepkg==0.9", cache_dir=tmp_path / "cache")
    assert (repository.name, repository.version) == ("fakepkg", "0.9")
    assert fake_pypi.requests == ["/pypi/fakepkg/0.9/json", "/pypi/fakepkg/json", "/files/fakepkg-0.9.tar.gz"]


def test_file_urls_relative_to_the_index_and_foreign_schemes(tmp_path: Path, fake_pypi: FakeIndex) -> None:
    # Some mirrors answer /pypi/NAME/json only, with file URLs relative to that document.
    fake_pypi.add_release(
        "fakepkg", "1.0", sdist_bytes(tmp_path), version_route=False, file_url="../../files/fakepkg-1.0.tar.gz"
    )
    assert ingest("pypi:fakepkg==1.0", cache_dir=tmp_path / "cache").version == "1.0"
    assert fake_pypi.requests[-1] == "/files/fakepkg-1.0.tar.gz"
    fake_pypi.add_release("localfile", "1.0", b"", file_url=f"file://{tmp_path}/fakepkg-1.0.tar.gz")
    with pytest.raises(BuildError, match="lacks a plain file name, an http.s. url or a sha256 digest"):
        ingest("pypi:localfile==1.0", cache_dir=tmp_path / "cache")


def test_pypi_release_without_an_sdist(tmp_path: Path, fake_pypi: FakeIndex) -> None:
    fake_pypi.add_release("wheelonly", "2.0", b"PK fake wheel", packagetype="bdist_wheel")
    with pytest.raises(
        BuildError,
        match=r"wheelonly 2.0 has no source distribution \(sdist\) on PyPI "
        r"\(only bdist_wheel\)",
    ):
        ingest("pypi:wheelonly==2.0", cache_dir=tmp_path / "cache")


def test_pypi_bad_digest_is_refused_and_nothing_kept(tmp_path: Path, fake_pypi: FakeIndex) -> None:
    fake_pypi.add_release("fakepkg", "1.0", sdist_bytes(tmp_path), digest="0" * 64)
    with pytest.raises(BuildError, match=f"differs from the {'0' * 64} PyPI published"):
        ingest("pypi:fakepkg==1.0", cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache" / "sdists").iterdir()) == []


def test_pypi_errors_and_unreachable_index(
    tmp_path: Path, fake_pypi: FakeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server error or an unreachable index may answer otherwise later
    (``SourceUnreachableError``: a corpus build tries it again on resume); a 403 or an answer
    that is not JSON will not (a plain ``BuildError``, kept as the repository's result)."""
    fake_pypi.routes["/pypi/broken/json"] = (500, b"oops")
    with pytest.raises(SourceUnreachableError, match="pypi:broken: PyPI at .* answered HTTP 500"):
        ingest("pypi:broken", cache_dir=tmp_path / "cache")
    fake_pypi.routes["/pypi/forbidden/json"] = (403, b"no")
    with pytest.raises(BuildError, match="answered HTTP 403") as forbidden:
        ingest("pypi:forbidden", cache_dir=tmp_path / "cache")
    assert not isinstance(forbidden.value, SourceUnreachableError)
    fake_pypi.routes["/pypi/garbled/json"] = (200, b"<html>not json</html>")
    with pytest.raises(BuildError, match="answered something that is not JSON") as garbled:
        ingest("pypi:garbled", cache_dir=tmp_path / "cache")
    assert not isinstance(garbled.value, SourceUnreachableError)
    unreachable = closed_port_url()
    monkeypatch.setenv(PYPI_URL_ENV, unreachable)
    with pytest.raises(
        SourceUnreachableError,
        match=f"cannot reach PyPI at {unreachable}: .*; check the network or give a local archive",
    ):
        ingest("pypi:fakepkg==1.0", cache_dir=tmp_path / "cache")


def test_a_corpus_build_tries_again_a_package_pypi_could_not_serve(
    tmp_path: Path, fake_pypi: FakeIndex, sandbox: Sandbox
) -> None:
    """An outage is the infrastructure's failure, not the package's: the corpus does not keep
    it as the repository's result, so a resumed build fetches the package again."""
    from gym_repost.construct.corpus import RepositoryWork, build_corpus
    from gym_repost.construct.pipeline import BuildSettings
    from gym_repost.executor import LocalExecutor

    settings = BuildSettings(max_candidates=2, trace=False, cache_dir=tmp_path / "cache")
    fake_pypi.routes["/pypi/fakepkg/1.0/json"] = (503, b"busy")
    failed = RepositoryWork(settings)("pypi:fakepkg==1.0", sandbox)
    assert failed.infrastructure and "answered HTTP 503" in (failed.error or "")
    output = tmp_path / "corpus" / "tasks.jsonl"
    output.parent.mkdir()
    first = build_corpus(["pypi:fakepkg==1.0"], output, settings, LocalExecutor(1, sandbox))
    assert [r.infrastructure for r in first.repositories] == [True]
    del fake_pypi.routes["/pypi/fakepkg/1.0/json"]
    fake_pypi.add_release("fakepkg", "1.0", sdist_bytes(tmp_path))
    again = build_corpus(["pypi:fakepkg==1.0"], output, settings, LocalExecutor(1, sandbox))
    assert again.resumed == 0 and [(r.name, r.error) for r in again.repositories] == [("fakepkg", None)]


def test_a_pypi_package_is_held_to_the_license_policy(tmp_path: Path, fake_pypi: FakeIndex) -> None:
    files = sdist_files("gplpkg", "1.0")
    files["gplpkg-1.0/LICENSE"] = GPL_TEXT
    files["gplpkg-1.0/PKG-INFO"] = "Metadata-Version: 2.1\nName: gplpkg\nVersion: 1.0\n"
    fake_pypi.add_release("gplpkg", "1.0", make_tar(tmp_path / "g.tar.gz", files).read_bytes())
    with pytest.raises(BuildError, match=r"gplpkg is licensed GPL-3.0 \(copyleft\)"):
        ingest("pypi:gplpkg==1.0", cache_dir=tmp_path / "cache")


# --- the real PyPI ----------------------------------------------------------------------


@pytest.mark.network
def test_real_pypi_inflection_then_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PYPI_URL_ENV, raising=False)
    repository = ingest("pypi:inflection==0.5.1", cache_dir=tmp_path / "cache")
    assert (repository.name, repository.version, repository.license) == ("inflection", "0.5.1", "MIT")
    assert repository.url == "https://github.com/jpvanhal/inflection"
    assert "inflection/__init__.py" in repository.files and "test_inflection.py" in repository.files
    monkeypatch.setenv(PYPI_URL_ENV, closed_port_url())
    offline = ingest("pypi:inflection==0.5.1", cache_dir=tmp_path / "cache")
    assert offline.files == repository.files and offline.notes == []


@pytest.mark.network
@pytest.mark.parametrize(
    ("name", "version", "license"),
    [
        ("boltons", "26.2.0", "BSD-3-Clause"),
        ("humanize", "4.17.0", "MIT"),
        ("more-itertools", "11.2.1", "MIT"),
        ("python-slugify", "9.2.0", "MIT"),
        ("semver", "3.1.1", "BSD-3-Clause"),
        ("tabulate", "0.10.0", "MIT"),
        ("toolz", "1.2.0", "BSD-3-Clause"),
    ],
)
def test_real_packages_through_the_shared_fixture(
    pypi_sdist: Callable[..., SourceRepository], name: str, version: str, license: str
) -> None:
    repository = pypi_sdist(name, version)
    assert (repository.name, repository.version, repository.license) == (name, version, license)
    assert repository.license_kind == "permissive" and len(repository.python_files) >= 4
    assert repository.url and repository.url.startswith("https://github.com/")
