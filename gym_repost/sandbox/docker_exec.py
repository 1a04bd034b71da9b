"""The docker backend's exec, host side: files packed into the request, the stream of one
exec pumped both ways, its trailer parsed into an outcome."""

from __future__ import annotations

import io
import logging
import re
import select
import socket
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_repost.sandbox.base import RunResult, check_relative_path
from gym_repost.sandbox.worker import OUTPUT_KILL_FACTOR, Capture

logger = logging.getLogger(__name__)
WORKDIR = "/home/user/tmp"
"""Every run's working directory inside the container (RepoST's image used it)."""
_HOLD = 512
_INLINE_FILE = 96 * 1024
"""Largest file passed as an exec argument (a Linux argument holds at most 128 KiB)."""
_INLINE_TOTAL = 1024 * 1024
"""Most bytes of files passed as exec arguments (all arguments share ~2 MiB)."""
_TRAILER = re.compile(rb"\x00GRS ([0-9a-f]+) (-?\d+) ([01])\n\Z")


# ---------------------------------------------------------------- one exec, host side


def _inline_size(name: str, content: str | bytes) -> int | None:
    """Bytes of a file that can travel as an argument of the exec (``printf`` writes it, no
    process is started): a top-level text file, not executable, not too large; else None."""
    if not isinstance(content, str) or "/" in name or "\0" in content or content.startswith("#!"):
        return None
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: only the tar keeps them byte-exact
        return None
    return size if size <= _INLINE_FILE else None


def pack_files(files: Mapping[str, str | bytes]) -> tuple[list[str], bytes]:
    """The run's files: ``[name, content, ...]`` for the exec's arguments, and a tar rooted
    at ``/`` (members under ``home/user/tmp``) of the others (empty when there are none)."""
    inline: list[str] = []
    packed: list[tuple[str, bytes]] = []
    budget = _INLINE_TOTAL
    for path, content in files.items():
        name = check_relative_path(path)
        if not isinstance(content, (str, bytes)):
            raise TypeError(f"file {path!r}: content must be str or bytes")
        size = _inline_size(name, content)
        if size is not None and size <= budget:
            budget -= size
            inline += [name, str(content)]
        else:
            data = content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content
            packed.append((name, data))
    return inline, _tar(packed) if packed else b""


def _tar(files: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in files:
            info = tarfile.TarInfo(f"{WORKDIR.lstrip('/')}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o755 if data.startswith(b"#!") else 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class ExecStream:
    """The hijacked socket of one exec: stdin out, multiplexed stdout/stderr in.

    The last ``_HOLD`` bytes of stderr are held back: the script's status line is there.
    """

    def __init__(self, response: Any, outgoing: bytes, cap: int) -> None:
        self._response = response  # closing it would close the socket
        self.sock: socket.socket = getattr(response, "_sock", response)
        self.sock.setblocking(False)
        self.outgoing = memoryview(outgoing)
        self.write_closed = False
        self.frames = bytearray()
        self.out, self.err = Capture(cap), Capture(cap)
        self.held = bytearray()
        self.kill_at = cap * OUTPUT_KILL_FACTOR

    def pump(self, deadline: float) -> str | None:
        """Exchange data until EOF (None), the deadline ("timeout") or a flood ("output")."""
        poller = select.poll()  # not select(): descriptors above 1024 in a big pool
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            wanted = select.POLLIN | (0 if self.write_closed else select.POLLOUT)
            poller.register(self.sock, wanted)
            events = poller.poll(min(remaining, 1.0) * 1000)
            happened = events[0][1] if events else 0
            if happened & select.POLLOUT:
                self._send()
            if happened & (select.POLLIN | select.POLLHUP | select.POLLERR):
                data = self._receive()
                if data == b"":
                    return None
                if data and self._feed(data):
                    return "output"

    def _send(self) -> None:
        try:
            if self.outgoing:
                sent = self.sock.send(self.outgoing[: 1 << 16])
                self.outgoing = self.outgoing[sent:]
            if not self.outgoing:
                self.sock.shutdown(socket.SHUT_WR)
                self.write_closed = True
        except BlockingIOError:
            pass
        except OSError:  # the exec ended without reading all of its stdin
            self.write_closed = True

    def _receive(self) -> bytes | None:
        try:
            return self.sock.recv(1 << 16)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def _feed(self, data: bytes) -> bool:
        self.frames += data
        while len(self.frames) >= 8:
            size = int.from_bytes(self.frames[4:8], "big")
            if len(self.frames) < 8 + size:
                break
            kind, chunk = self.frames[0], bytes(self.frames[8 : 8 + size])
            del self.frames[: 8 + size]
            if kind == 2:
                self.held += chunk
                if len(self.held) > _HOLD:
                    self.err.feed(bytes(self.held[:-_HOLD]))
                    del self.held[:-_HOLD]
            else:
                self.out.feed(chunk)
        return max(self.out.total, self.err.total) > self.kill_at

    def status(self, nonce: str) -> tuple[int, bool] | None:
        """The script's ``(exit status, clean)``, taken out of stderr; None if absent."""
        match = _TRAILER.search(self.held)
        if match is None or match.group(1).decode() != nonce:
            self.err.feed(bytes(self.held))
            return None
        self.err.feed(bytes(self.held[: match.start()]))
        return int(match.group(2)), match.group(3) == b"1"

    def close(self) -> None:
        for thing in (self.sock, self._response):
            try:
                thing.close()
            except (OSError, AttributeError):
                pass


@dataclass
class ExecOutcome:
    result: RunResult
    clean: bool


def returncode_of(status: int) -> int:
    """``sh``'s exit status as a returncode: ``128 + N`` means killed by signal ``N``."""
    return -(status - 128) if 128 < status <= 128 + 64 else status


@dataclass(frozen=True)
class RunSpec:
    """A validated run: what goes into the exec."""

    inline: list[str]
    payload: bytes
    stdin: bytes
    argv: list[str]
    env: dict[str, str]
    timeout: float
    limits: dict[str, float] = field(default_factory=dict)
    keep: bool = False
