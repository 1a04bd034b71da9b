"""Who owns a sandbox's processes and directories, and which uids its runs use.

Shared by the local and docker backends: a host process is identified by its pid and
start time (a recycled pid is another process), so ``gym-repost sandbox cleanup`` removes
only what a dead host left; run uids are drawn at random from a range, one per worker or
container, so that per-uid limits (RLIMIT_NPROC) are per worker.
"""

from __future__ import annotations

import os
import random
import threading


def start_time(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks (tells a live host from a recycled pid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def host_identity() -> str:
    """This process's identity: ``pid:start time``."""
    pid = os.getpid()
    return f"{pid}:{start_time(pid)}"


def identity_alive(identity: str) -> bool:
    """The process of ``identity`` (``pid:start time``) is still running."""
    pid, _, start = identity.partition(":")
    return pid.isdigit() and start_time(int(pid)) == start


class UidPool:
    """Unprivileged uids in use, drawn at random from ``uid_range``: one per worker (local
    backend, so RLIMIT_NPROC is per worker) or per container (docker backend)."""

    def __init__(self, uid_range: tuple[int, int]) -> None:
        self._range = uid_range
        self._lock = threading.Lock()
        self._used: set[int] = set()

    def allocate(self) -> int:
        """A uid no other worker of this process holds."""
        with self._lock:
            while True:
                uid = random.randint(*self._range)
                if uid not in self._used:
                    self._used.add(uid)
                    return uid

    def release(self, uid: int | None) -> None:
        """Give ``uid`` back (None is ignored)."""
        if uid is not None:
            with self._lock:
                self._used.discard(uid)
