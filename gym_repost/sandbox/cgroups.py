"""Memory cgroups for the local sandbox: one cap on all the processes of a run together.

Each worker gets a cgroup ``<parent>/gym-repost-sbx-<host pid>-<start>-<token>`` with two
children: ``server`` (the worker and its PID 1, unlimited) and ``run`` (every process of
the run, forked children included, and the tmpfs pages it writes), whose memory limit is
``total_memory_mb`` with no swap. Past it the kernel's OOM killer kills a process of the
run, which then fails as the candidate's fault.

Both hierarchies are supported: cgroup v2 (``memory.max``; the parent must let us enable
the memory controller for its children: the root, or a delegated cgroup without
processes of its own) and the v1 memory controller (``memory.limit_in_bytes``). The
parent is the host process's own cgroup unless ``LocalSandboxConfig.cgroup_parent`` names
another. Where none can be created (no permission, no memory controller, not Linux) the
fallback is the per-process address-space limit (RLIMIT_AS, ``memory_mb``) alone: a run
of several processes may then use up to ``max_processes * memory_mb`` in all.
:meth:`LocalSandbox.describe` says which applies, and why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass

logger = logging.getLogger(__name__)

_MIB = 1024 * 1024


@dataclass(frozen=True)
class CgroupParent:
    """Where worker cgroups are created.

    Attributes:
        path: the parent cgroup's directory.
        version: 1 (the v1 memory controller) or 2 (the unified hierarchy).
    """

    path: str
    version: int


def _mounts() -> list[tuple[str, str, str]]:
    """``(mount point, fstype, super options)`` of each line of ``/proc/self/mountinfo``."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            head, _, tail = line.partition(" - ")
            fields, rest = head.split(" "), tail.split(" ")
            if len(fields) >= 5 and len(rest) >= 3:
                found.append((fields[4], rest[0], rest[2].strip()))
    return found


def _own_cgroups() -> dict[str, str]:
    """``{"2": path}`` and ``{"memory": path}`` from ``/proc/self/cgroup``."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "":
                own["2"] = path
            elif "memory" in controllers.split(","):
                own["memory"] = path
    return own


def default_parent() -> CgroupParent | None:
    """The host process's own memory cgroup (v2 preferred when it has the controller)."""
    try:
        mounts, own = _mounts(), _own_cgroups()
    except OSError:
        return None
    for point, fstype, _options in mounts:
        if fstype == "cgroup2" and "2" in own:
            with contextlib.suppress(OSError):
                with open(f"{point}/cgroup.controllers", encoding="ascii") as handle:
                    if "memory" in handle.read().split():
                        return CgroupParent(point + own["2"].rstrip("/"), 2)
    for point, fstype, options in mounts:
        if fstype == "cgroup" and "memory" in options.split(",") and "memory" in own:
            return CgroupParent(point + own["memory"].rstrip("/"), 1)
    return None


def parent_at(path: str) -> CgroupParent:
    """A configured parent directory (its version told by the files it has)."""
    version = 2 if os.path.exists(os.path.join(path, "cgroup.controllers")) else 1
    return CgroupParent(os.path.abspath(path), version)


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def create(parent: CgroupParent, name: str, limit_mb: int) -> str:
    """Create the cgroup of one worker; returns its directory.

    Raises:
        OSError: it cannot be created or limited here (it is removed again).
    """
    path = os.path.join(parent.path, name)
    os.mkdir(path)
    try:
        limit = str(limit_mb * _MIB)
        if parent.version == 2:
            _enable_memory_v2(parent.path, path)
        for child in ("server", "run"):
            os.mkdir(os.path.join(path, child))
        run = os.path.join(path, "run")
        if parent.version == 2:
            _write(f"{run}/memory.max", limit)
            if os.path.exists(f"{run}/memory.swap.max"):
                _write(f"{run}/memory.swap.max", "0")
        else:
            _write(f"{run}/memory.limit_in_bytes", limit)
            if os.path.exists(f"{run}/memory.memsw.limit_in_bytes"):
                _write(f"{run}/memory.memsw.limit_in_bytes", limit)
    except OSError:
        remove(path, wait=0.0)
        raise
    return path


def _enable_memory_v2(parent: str, path: str) -> None:
    with open(f"{path}/cgroup.controllers", encoding="ascii") as handle:
        available = handle.read().split()
    if "memory" not in available:
        _write(f"{parent}/cgroup.subtree_control", "+memory")
    _write(f"{path}/cgroup.subtree_control", "+memory")


def remove(path: str, wait: float = 2.0) -> None:
    """Remove a worker's cgroup once its processes are gone (best effort)."""
    deadline = time.monotonic() + wait
    for directory in (os.path.join(path, "run"), os.path.join(path, "server"), path):
        while True:
            try:
                os.rmdir(directory)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    logger.debug("cannot remove cgroup %s: %s", directory, exc)
                    return
                time.sleep(0.01)


def probe(parent: CgroupParent | None, name: str) -> str | None:
    """Why worker cgroups cannot be made under ``parent``; None when they can."""
    if parent is None:
        return "no memory cgroup controller is mounted for this process"
    try:
        remove(create(parent, name, 64), wait=1.0)
    except OSError as exc:
        return f"cannot create a memory cgroup under {parent.path}: {exc.strerror or exc}"
    return None
