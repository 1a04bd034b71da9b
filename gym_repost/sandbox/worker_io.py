"""The worker's wire protocol (length-prefixed JSON), output capture and small helpers.

A sibling of :mod:`worker`: imported as ``worker_io`` inside the worker and as
``gym_repost.sandbox.worker_io`` on the host.
"""

from __future__ import annotations

import json
import os
import resource
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up; annotations are strings here
    from collections.abc import Callable
    from typing import Any, TypeVar

    Message = dict[str, Any]
    _T = TypeVar("_T")

HEADER = struct.Struct(">I")
OUTPUT_KILL_FACTOR = 16
"""A stream larger than this many times ``max_output_bytes`` gets the run killed (only
``max_output_bytes`` of it is kept anyway; a flood costs the time it takes to print)."""
_MIB = 1024 * 1024
_PYTHON_NAMES = ("python", "python3")
_CHUNK = 1 << 16


# ---------------------------------------------------------------- protocol


def encode_message(obj: object) -> bytes:
    """Frame one JSON message (length prefix + UTF-8 JSON)."""
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return HEADER.pack(len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to a blocking fd."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_message(fd: int, obj: object) -> None:
    """Write one framed message to a blocking fd."""
    write_all(fd, encode_message(obj))


def _read_exact(fd: int, size: int) -> bytearray | None:
    buffer = bytearray(size)
    view, done = memoryview(buffer), 0
    while done < size:
        count = os.readv(fd, [view[done:]])
        if count == 0:
            return None
        done += count
    return buffer


def read_message(fd: int) -> Message | None:
    """Read one framed message from a blocking fd; None at end of file."""
    header = _read_exact(fd, HEADER.size)
    if header is None:
        return None
    body = _read_exact(fd, HEADER.unpack(header)[0])
    return None if body is None else json.loads(body)


# ---------------------------------------------------------------- output capture


class Capture:
    """Keeps the head and the tail of a stream, up to ``cap`` bytes in all."""

    __slots__ = ("head", "head_max", "tail", "tail_max", "total")

    def __init__(self, cap: int) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.head_max = cap - cap // 2
        self.tail_max = cap // 2

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_max:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_max + _CHUNK:  # trim rarely: amortised O(1)
                del self.tail[: -self.tail_max]

    @property
    def truncated(self) -> bool:
        return self.total > self.head_max + self.tail_max

    def text(self) -> str:
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", "replace")
        tail = self.tail[-self.tail_max :] if self.tail_max else b""
        dropped = self.total - len(self.head) - len(tail)
        marker = f"\n[... {dropped} bytes of output truncated ...]\n"
        return self.head.decode("utf-8", "replace") + marker + bytes(tail).decode("utf-8", "replace")


# ---------------------------------------------------------------- small helpers


def remove_tree(root: str) -> None:
    """Delete a directory tree without following symlinks (iterative, best effort)."""
    stack = [(root, False)]
    while stack:
        path, emptied = stack.pop()
        if emptied:
            _ignore_errors(os.rmdir, path)
            continue
        try:
            entries = list(os.scandir(path))
        except PermissionError:  # a run may chmod 000 its directories (none mode)
            _ignore_errors(os.chmod, path, 0o700)
            entries = list(_ignore_errors(os.scandir, path) or ())
        except NotADirectoryError:
            _ignore_errors(os.unlink, path)
            continue
        except FileNotFoundError:
            continue
        stack.append((path, True))
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append((entry.path, False))
            else:
                _ignore_errors(os.unlink, entry.path)


def _ignore_errors(function: Callable[..., _T], *args: object) -> _T | None:
    try:
        return function(*args)
    except OSError:
        return None


def _set_limit(which: int, value: int, hard_extra: int = 0) -> None:
    soft, hard = value, value + hard_extra
    _, current = resource.getrlimit(which)
    if current != resource.RLIM_INFINITY:  # an unprivileged worker cannot raise it
        soft, hard = min(soft, current), min(hard, current)
    resource.setrlimit(which, (soft, hard))


def apply_limits(limits: Message) -> None:
    """Set the rlimits of a run child (from ``SandboxLimits`` fields)."""
    cpu = max(1, -(-int(limits["cpu_seconds"] * 1000) // 1000))
    _set_limit(resource.RLIMIT_CPU, cpu, hard_extra=1)  # SIGXCPU first, SIGKILL 1 s later
    _set_limit(resource.RLIMIT_AS, int(limits["memory_mb"]) * _MIB)
    _set_limit(resource.RLIMIT_NPROC, int(limits["max_processes"]))
    _set_limit(resource.RLIMIT_FSIZE, int(limits["max_file_size_mb"]) * _MIB)
    _set_limit(resource.RLIMIT_CORE, 0)


def _startup_env_matches(env: dict[str, str]) -> bool:
    """True when ``env`` would start an interpreter configured like this one."""
    for key, value in env.items():
        startup = (key.startswith("PYTHON") and key != "PYTHONPATH") or key.startswith("LC_")
        if (startup or key == "LANG") and os.environ.get(key) != value:
            return False
    return True


def plan_command(argv: list[str], env: dict[str, str], warm: bool) -> tuple[str, str, list[str]]:
    """How to run ``argv``: ``(kind, target, args)``, kind one of script, code, module, exec.

    Only ``python[3] SCRIPT|-c CODE|-m MODULE [ARGS]`` with an unchanged interpreter
    configuration can run inside a warm worker's child; anything else is exec'd.
    """
    if warm and len(argv) >= 2 and argv[0] in _PYTHON_NAMES and _startup_env_matches(env):
        first = argv[1]
        if first in ("-c", "-m") and len(argv) >= 3:
            return ("code" if first == "-c" else "module"), argv[2], argv[3:]
        if not first.startswith("-"):
            return "script", first, argv[2:]
    return "exec", "", []
