"""Leftovers of crashed runs of the local backend: worker processes, directories,
cgroups and package sets whose host died (``gym-repost sandbox cleanup``)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from gym_repost.sandbox import cgroups
from gym_repost.sandbox import worker as protocol
from gym_repost.sandbox.base import PACKAGE_SETS
from gym_repost.sandbox.config import DEFAULT_PACKAGES_DIR
from gym_repost.sandbox.identity import identity_alive
from gym_repost.sandbox.local_worker import DIR_PREFIX, signal_group

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------- cleanup


@dataclass(frozen=True)
class LeftoverReport:
    """What :func:`cleanup_leftovers` found and removed."""

    killed_pids: list[int] = field(default_factory=list)
    removed_dirs: list[str] = field(default_factory=list)
    removed_cgroups: list[str] = field(default_factory=list)
    removed_package_sets: list[str] = field(default_factory=list)


def _marked_processes() -> Iterator[tuple[int, str]]:
    marker = protocol.MARKER.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                args = handle.read().split(b"\0")
        except OSError:
            continue
        if marker in args:
            host = next((a[7:].decode() for a in args if a.startswith(b"--host=")), "")
            yield int(name), host


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True


def _remove_dead_cgroups() -> list[str]:
    """Worker cgroups (named like worker directories) whose host died."""
    parent = cgroups.default_parent()
    if parent is None or not os.path.isdir(parent.path):
        return []
    removed = []
    for name in sorted(os.listdir(parent.path)):
        parts = name[len(DIR_PREFIX) :].split("-")
        if name.startswith(DIR_PREFIX) and len(parts) == 3 and not identity_alive(f"{parts[0]}:{parts[1]}"):
            cgroups.remove(os.path.join(parent.path, name), wait=0.0)
            removed.append(os.path.join(parent.path, name))
    return removed


def _remove_dead_package_sets(packages_dir: str) -> list[str]:
    """Package sets (see :meth:`LocalSandbox.package_set`) whose ``NAME.owner`` names a host
    that died: a build killed before it removed its set."""
    sets = os.path.join(packages_dir, PACKAGE_SETS)
    removed = []
    for name in sorted(os.listdir(sets)) if os.path.isdir(sets) else []:
        if not name.endswith(".owner"):
            continue
        try:
            with open(os.path.join(sets, name), encoding="utf-8") as handle:
                owner = handle.read().strip()
        except OSError:
            continue
        if identity_alive(owner):
            continue
        directory = os.path.join(sets, name.removesuffix(".owner"))
        shutil.rmtree(directory, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(sets, name))
        removed.append(directory)
    return removed


def cleanup_leftovers(work_root: str | None = None, packages_dir: str | None = None) -> LeftoverReport:
    """Kill workers and remove directories left behind by hosts that died.

    Worker processes are recognised by their argv marker and the identity (pid and start
    time) of their host; directories by the :data:`DIR_PREFIX` name, which embeds the same
    identity; package sets by the identity their ``.owner`` file holds. Anything belonging to
    a live host is left alone.

    Args:
        work_root: where to look for directories; default: the system temp dir.
        packages_dir: the package cache whose sets to look at; default: the local
            sandbox's (``~/.cache/gym-repost/packages``).
    """
    pids = sorted(pid for pid, host in _marked_processes() if not identity_alive(host))
    for pid in pids:
        signal_group(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not all(_gone(pid) for pid in pids):
        time.sleep(0.01)
    root = work_root or tempfile.gettempdir()
    removed = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        parts = name[len(DIR_PREFIX) :].split("-")
        if name.startswith(DIR_PREFIX) and len(parts) == 3 and not identity_alive(f"{parts[0]}:{parts[1]}"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed.append(os.path.join(root, name))
    cgroups_removed = _remove_dead_cgroups()
    sets = _remove_dead_package_sets(os.path.expanduser(packages_dir or DEFAULT_PACKAGES_DIR))
    if pids or removed or cgroups_removed or sets:
        logger.info(
            "removed %d leftover sandbox processes, %d directories and %d package sets",
            len(pids),
            len(removed),
            len(sets),
        )
    return LeftoverReport(
        killed_pids=pids, removed_dirs=removed, removed_cgroups=cgroups_removed, removed_package_sets=sets
    )
