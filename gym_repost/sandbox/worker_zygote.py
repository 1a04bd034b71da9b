"""The worker's zygote: the clean parent of every run child.

PID 1 of a warm worker reads each request and each run's output, so its memory holds what
earlier runs sent and printed: a reference run's ground truth, another session's code,
values the tests expect. A run child forked from PID 1 would find them on its stack or in
the freed chunks of its heap. The zygote is forked from PID 1 once, before PID 1 reads any
request, and it never reads one: it gets only *fork orders* (the next run's directory
name, which of the host's programs the last run shipped, whether a job is already
waiting), none of which a run chooses. It forks the spare run child, hands PID 1 its ends
of the child's pipes (``SCM_RIGHTS`` over a socket pair) and reports the child's exit
status when it ends. Every run child therefore starts from the state PID 1 had before its
first request, whatever ran before it.

The zygote is root in the sandbox (a run's user cannot signal or trace it) where the
worker runs as root; in a user namespace (not root) a run can kill it. PID 1 then forks
run children itself, each of which replaces its memory with a fresh interpreter
(``execve``) before it runs anything of the job's, and tells the host to replace the
worker (:class:`ZygoteLink` is None and replies carry ``"tainted": true``).

A sibling of :mod:`worker`: imported as ``worker_zygote`` inside the worker and as
``gym_repost.sandbox.worker_zygote`` on the host.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up; annotations are strings here
    from typing import Any, NoReturn

    from gym_repost.sandbox.worker import Server

    Message = dict[str, Any]

if __package__:
    from gym_repost.sandbox import isolation
    from gym_repost.sandbox.worker_io import _ignore_errors, read_message, write_message
    from gym_repost.sandbox.worker_run import PROGRAM_NAMES, spare_main
    from gym_repost.sandbox.worker_startup import RUN_PARENTS
else:  # inside the worker its siblings are top-level modules (no gym_repost)
    import isolation  # type: ignore[no-redef,import-not-found]
    from worker_io import _ignore_errors, read_message, write_message  # type: ignore[no-redef,import-not-found]
    from worker_run import PROGRAM_NAMES, spare_main  # type: ignore[no-redef,import-not-found]
    from worker_startup import RUN_PARENTS  # type: ignore[no-redef,import-not-found]

_NOTICE = struct.Struct("=cii")
"""A zygote's notice to PID 1: ``S`` (a spare child: its pid; its pipes' ends attached) or
``X`` (a child ended: its pid and wait status)."""
SPARE_FDS = 5
"""PID 1's ends of a spare child's pipes: control, status, stdin, stdout, stderr."""
TAKE_WAIT = 5.0
"""Seconds PID 1 waits for an ordered spare child; a zygote that does not answer is given
up (a run in a user namespace can stop it): the worker then forks children that exec."""
_KEPT_EXITS = 64
"""Exit notices PID 1 keeps for children it has not asked about (discarded spares)."""


# ---------------------------------------------------------------- PID 1's side


class ZygoteLink:
    """PID 1's handle on its zygote: fork orders out, spare children and exit statuses in."""

    def __init__(self, pid: int, orders: int, notices: socket.socket) -> None:
        self.pid = pid
        self.orders = orders
        self.notices = notices
        self.gone = False
        """The zygote ended (its socket closed, or its process exited)."""
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # kernel < 5.3
            self.pidfd = None
        self.exits: dict[int, int] = {}
        """Exit statuses the zygote reported, by pid, not yet asked for."""
        self.spares: list[tuple[int, list[int]]] = []
        """Spare children the zygote forked that PID 1 has not taken yet."""

    @classmethod
    def start(cls, server: Server) -> ZygoteLink:
        """Fork the zygote from PID 1 (before PID 1 has read any request)."""
        orders_r, orders_w = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            os.close(orders_w)
            ours.close()
            zygote_main(server, orders_r, theirs)
        os.close(orders_r)
        theirs.close()
        return cls(pid, orders_w, ours)

    def alive(self) -> bool:
        """Whether the zygote still runs (its pid is then still its own: PID 1 may spare it
        when it kills a run's processes)."""
        if not self.gone and self.pidfd is not None:
            self.gone = bool(select.select([self.pidfd], [], [], 0)[0])
        elif not self.gone:
            self.gone = not os.path.exists(f"/proc/{self.pid}")
        return not self.gone

    def order(self, run_dir: str | None, programs: list[str], waiting: bool) -> bool:
        """Ask for a spare child; False when the zygote is gone."""
        try:
            write_message(self.orders, {"run_dir": run_dir, "programs": programs, "waiting": waiting})
            return True
        except OSError:
            return False

    def take_spare(self) -> tuple[int, list[int]] | None:
        """The spare child ordered last: (pid, PID 1's ends of its pipes); None when the
        zygote is gone, or does not answer within :data:`TAKE_WAIT` (stopped)."""
        deadline = time.monotonic() + TAKE_WAIT
        while not self.spares:
            if self.gone or not self._receive(max(0.0, deadline - time.monotonic())):
                return None
        return self.spares.pop(0)

    def exit_status(self, pid: int, wait: float | None) -> int | None:
        """The wait status of the zygote's child ``pid``: None if it has not ended within
        ``wait`` seconds (0: do not wait; None: as long as it takes), or the zygote is gone."""
        deadline = None if wait is None else time.monotonic() + wait
        while pid not in self.exits:
            remaining = None if deadline is None else deadline - time.monotonic()
            if self.gone or (remaining is not None and remaining < 0):
                return None
            if not self._receive(remaining):
                return None
        return self.exits.pop(pid)

    def drain(self) -> None:
        """Take in the notices already waiting (the socket is readable)."""
        while self._receive(0.0):
            pass

    def _receive(self, wait: float | None) -> bool:
        """Take in one notice, waiting up to ``wait`` seconds; False on timeout or when the
        zygote is gone."""
        if wait is not None and not select.select([self.notices], [], [], wait)[0]:
            return False
        try:
            data, fds, _, _ = socket.recv_fds(self.notices, _NOTICE.size, SPARE_FDS)
        except OSError:
            data, fds = b"", []
        if not data:  # end of file: the zygote is gone
            self.gone = True
            return False
        if len(data) != _NOTICE.size:
            for fd in fds:
                _ignore_errors(os.close, fd)
            return False
        kind, pid, status = _NOTICE.unpack(data)
        if kind == b"S" and len(fds) == SPARE_FDS:
            self.spares.append((pid, list(fds)))
        elif kind == b"X":
            for fd in fds:
                _ignore_errors(os.close, fd)
            self.exits[pid] = status
            while len(self.exits) > _KEPT_EXITS:
                del self.exits[next(iter(self.exits))]
        return True

    def close(self) -> None:
        _ignore_errors(os.close, self.orders)
        if self.pidfd is not None:
            _ignore_errors(os.close, self.pidfd)
        self.notices.close()


# ---------------------------------------------------------------- the zygote


def zygote_main(server: Server, orders: int, notices: socket.socket) -> NoReturn:
    """Fork a spare child per order; report each child's end. Never reads a request."""
    code = 0
    try:
        isolation.set_parent_death_signal(9)  # SIGKILL: dies with PID 1
        RUN_PARENTS.add(os.getpid())  # its children reseed what preloaded modules seeded
        _put_aside_pid1_pipes(server)
        zygote = _Zygote(server, orders, notices)
        zygote.serve()
    except BaseException:
        code = 1
    os._exit(code)


def _put_aside_pid1_pipes(server: Server) -> None:
    """Point PID 1's request, reply and janitor descriptors at /dev/null in the zygote:
    their numbers stay taken (a spare child moves its pipes onto fds 0-4 and must not
    clobber one in use), but nothing here can read a request or hold the janitor's pipe
    open."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (server.req_fd, server.resp_fd, server.janitor_fd):
        os.dup2(null, fd)
    os.close(null)


class _Zygote:
    def __init__(self, server: Server, orders: int, notices: socket.socket) -> None:
        self.server = server
        self.orders = orders
        self.notices = notices
        self.children: dict[int, int | None] = {}
        """Live children by pid, and their pidfds (None where the kernel has none)."""
        self.run_dirs = f"{server.run_root}/run-"

    def serve(self) -> None:
        while True:
            ready = self._wait()
            if self.orders in ready:
                order = read_message(self.orders)
                if order is None:  # PID 1 is gone
                    return
                self.spawn(order)
            self.reap()

    def _wait(self) -> list[int]:
        watched = [self.orders, *(fd for fd in self.children.values() if fd is not None)]
        # without pidfds (kernel < 5.3) children are looked for every 20 ms
        timeout = 0.02 if any(fd is None for fd in self.children.values()) else None
        return select.select(watched, [], [], timeout)[0]

    def spawn(self, order: Message) -> None:
        """Fork the spare child of the order; hand PID 1 its pipes."""
        server = self.server
        run_dir = order.get("run_dir")
        prefix = self.run_dirs
        valid = isinstance(run_dir, str) and run_dir.startswith(prefix) and run_dir[len(prefix) :].isdigit()
        server.next_run_dir = run_dir if valid else None
        programs = order.get("programs")
        names = programs if isinstance(programs, list) else []
        server.recent_programs = [name for name in names if isinstance(name, str) and name in PROGRAM_NAMES]
        server.request_waiting = order.get("waiting") is True
        control_r, control_w = os.pipe()
        status_r, status_w = os.pipe()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            spare_main(server, control_r, status_w, (in_r, out_w, err_w))
        for fd in (control_r, status_w, in_r, out_w, err_w):
            os.close(fd)
        pid1_ends = [control_w, status_r, in_w, out_r, err_r]
        try:
            socket.send_fds(self.notices, [_NOTICE.pack(b"S", pid, 0)], pid1_ends)
        finally:
            for fd in pid1_ends:
                os.close(fd)
        try:
            self.children[pid] = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.children[pid] = None

    def reap(self) -> None:
        """Report the children that have ended."""
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            pidfd = self.children.pop(pid)
            if pidfd is not None:
                os.close(pidfd)
            self.notices.send(_NOTICE.pack(b"X", pid, status))
