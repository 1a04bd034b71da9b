"""The sandbox worker: isolation first, then PID 1 of its namespace, serving run requests.

The host (:mod:`gym_repost.sandbox.local`) starts it as a top-level module::

    PYTHON -S -c BOOTSTRAP .../gym_repost/sandbox --gym-repost-sandbox-worker --host=PID:START CONFIG

(``BOOTSTRAP`` puts this directory first on ``sys.path``, imports ``worker`` and calls
:func:`main`; running ``worker.py`` by path works too). Requests arrive on stdin and
replies leave on stdout (both moved off fds 0 and 1 at once). It imports only the
standard library, the sibling ``isolation`` module and the configured preload modules:
it starts fast (from cached bytecode), under any interpreter >= 3.10, and runs never see
``gym_repost`` on ``sys.path``. ``-S``: ``site`` runs in PID 1 only once the sandbox's
file system is in place (:func:`filesystem_plan`), so the site-packages, ``.pth`` files,
import finders and path hooks that warm runs inherit are those the sandbox shows, never
the host's (an editable install's finder pointing into the project, say).

Protocol: each message is a 4-byte big-endian length and a UTF-8 JSON object.

* worker -> host, once: ``{"ready": true, "pid1": ..., "python": ..., "warnings": [...],
  "views": ...}`` (the site-packages views it found, passed to the sandbox's later workers)
  or ``{"ready": false, "unavailable": true, "error": ...}``.
* host -> worker: ``{"op": "run", "argv", "files", "bfiles" (base64), "programs",
  "stdin", "env", "timeout", "keep", "limits", "packages"}`` or ``{"op": "exit"}``.
  ``programs``: the run-directory names of programs the worker holds (its ready message
  lists them with their SHA-256), written from its own copy: their text need not cross two
  pipes per run. ``packages``: a package set's name, whose directory below the package
  cache the run sees in place of the cache (``Sandbox.package_set``).
* worker -> host, per run: ``{"ok": true, "returncode", "stdout", "stderr", "timed_out",
  "duration", "output_truncated", "killed_for", "inprocess", "run_dir"}`` (and, with
  ``"profile"`` in the configuration, ``"phases"``: ``time.monotonic()`` stamps of PID 1
  and of the run child, and the child's page faults) or ``{"ok": false, "error"}``.

Process tree in ``namespaces`` mode::

    host
     └─ worker (outer): joins its cgroup, unshares, forks, deletes thrown-away runs
         └─ server: PID 1 of the new PID namespace: builds the root file system from an
            allowlist and pivots into it, runs ``site``, then serves one run at a time
             └─ run child: the run's memory cgroup, own process group, stdio, unprivileged
                uid, files (on the run's tmpfs: disk quota), rlimits, then the command
                (warm python runs in-process, anything else via execve)

The outer process also deletes finished run directories (renamed by PID 1 into a
root-only ``.trash``), so that slow deletions stay off the run's critical path; and if
the host dies (its death signal, or EOF on the request pipe) it removes the worker's
whole directory, which the host can no longer do.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import os
import select
import signal
import struct
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up; annotations are strings here
    from collections.abc import Sequence
    from typing import Any, NoReturn, TypeVar

    Message = dict[str, Any]
    _T = TypeVar("_T")

if __package__:
    from gym_repost.sandbox import isolation
    from gym_repost.sandbox import worker_run as run_module
    from gym_repost.sandbox.worker_io import (
        _ignore_errors,
        read_message,
        remove_tree,
        write_message,
    )
    from gym_repost.sandbox.worker_run import (
        CHILD_PHASES,
        PROGRAM_NAMES,
        RunJob,
        Supervisor,
        load_programs,
        program_digests,
        spare_main,
    )
    from gym_repost.sandbox.worker_startup import (
        PRELOAD_DIR,
        _take_protocol_fds,
        filesystem_plan,
        preload,
        visible_distributions,
    )
    from gym_repost.sandbox.worker_zygote import ZygoteLink
else:  # inside the worker its siblings are top-level modules (no gym_repost)
    import isolation  # type: ignore[no-redef,import-not-found]
    import worker_run as run_module  # type: ignore[no-redef,import-not-found]
    from worker_io import (  # type: ignore[no-redef,import-not-found]
        _ignore_errors,
        read_message,
        remove_tree,
        write_message,
    )
    from worker_run import CHILD_PHASES, PROGRAM_NAMES, RunJob, Supervisor, load_programs, program_digests, spare_main  # type: ignore[no-redef]
    from worker_startup import PRELOAD_DIR, _take_protocol_fds, filesystem_plan, preload, visible_distributions  # type: ignore[no-redef,import-not-found]
    from worker_zygote import ZygoteLink  # type: ignore[no-redef,import-not-found]

MARKER = "--gym-repost-sandbox-worker"
"""argv marker of worker processes (and of their warm run children), for cleanup."""
PACKAGE_SETS = ".sets"
"""``base.PACKAGE_SETS``, the package cache's directory of package sets (this module runs
without the package)."""
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TRASH = ".trash"
EXIT_HOST_GONE = 3
"""Exit status of PID 1 when its request pipe ended without an ``exit`` request."""
DISK_MB = 256
"""A run's disk quota when the request's limits name none."""


# ---------------------------------------------------------------- the server (PID 1)


class Spare:
    """A pre-forked run child waiting for its job, and the server's ends of its pipes.

    ``own``: forked by PID 1 itself (which then reaps it), because the zygote is gone;
    otherwise the zygote's child (the zygote reaps it and reports its exit status).
    """

    __slots__ = ("control", "err_r", "in_w", "own", "out_r", "pid", "status_r")

    def __init__(self, pid: int, fds: Sequence[int], own: bool = False) -> None:
        self.pid = pid
        self.own = own
        self.control, self.status_r, self.in_w, self.out_r, self.err_r = fds

    def discard(self) -> None:
        _ignore_errors(os.kill, self.pid, signal.SIGKILL)
        if self.own:
            _ignore_errors(os.waitpid, self.pid, 0)
        for fd in (self.status_r, self.in_w, self.out_r, self.err_r):
            _ignore_errors(os.close, fd)


class Server:
    """PID 1 of the sandbox: reads requests, hands each to a fresh (pre-forked) child."""

    def __init__(
        self,
        config: Message,
        fds: tuple[int, int, int],
        mode: str,
        run_cgroup: int | None = None,
        scratch_shown: list[str] | None = None,
    ) -> None:
        self.config = config
        self.run_cgroup = run_cgroup
        self.req_fd, self.resp_fd, self.janitor_fd = fds
        self.limits: Message = config["limits"]
        self.warm: bool = config["warm"]
        self.namespaced = config["isolation"] == "namespaces"
        self.run_root = isolation.INNER_ROOT if self.namespaced else config["host_dir"]
        self.uid: int | None = config.get("uid") if mode == "root" else None
        self.userns = mode == "userns"
        self.packages_dir: str | None = config.get("packages_dir")
        self.offline_env: dict[str, str] = dict(config.get("offline_env") or {})
        """Set in every run when the worker has no network (the host's ``OFFLINE_ENV``)."""
        self.base_path = base_sys_path()
        self.path = f"{os.path.dirname(sys.executable)}:{DEFAULT_PATH}"
        self.count = 0
        self.keep_in_tmp = set(os.listdir("/tmp")) if self.namespaced else set()
        self.spare: Spare | None = None
        self.zygote: ZygoteLink | None = None
        """The clean parent of run children (see :mod:`worker_zygote`); None in a worker that
        serves one run, or once it is gone."""
        self.spare_ordered = False
        """A spare child was ordered from the zygote and not taken yet."""
        self.must_exec = False
        """Run children are forked by PID 1 itself (the zygote is gone): each must replace
        its memory (``execve``) before it runs anything of its job's."""
        self.next_run_dir: str | None = None
        self.recent_programs: list[str] = []
        """Programs (run-directory file names) the last request that shipped any shipped."""
        self.request_waiting = False
        """A request was already waiting when the spare child was forked."""
        self.scratch: tuple[str, int] | None = None
        """The run directory whose tmpfs is mounted, and its size in MiB."""
        self.scratch_shown: list[str] = scratch_shown or []
        self.aliases = [a for a in config.get("aliases") or [] if os.path.isdir(a)] if self.namespaced else []
        """Working-directory aliases (empty mount points made at set-up), where the run's
        directory is bound too: see :meth:`bind_aliases`."""
        self.bound: tuple[str, tuple[str, int] | None] | None = None
        """The run directory bound at the aliases, and its scratch mount then."""
        self.preload_env: dict[str, str] = {}
        """Environment variables that preloaded modules set at import, set in every run."""
        self.preload_output: tuple[bytes, bytes] = (b"", b"")
        """What modules preloaded apart printed at import (standard output, standard error):
        each run that executes in process prints it again first, as a fresh import would."""
        self.phases: dict[str, float] | None = {} if config.get("profile") else None
        """Profile mode: this run's timestamps (``time.monotonic()``), sent with the reply."""
        if self.phases is not None:
            import mmap

            run_module.set_stamps(mmap.mmap(-1, 16 * len(CHILD_PHASES)))

    def run_environment(self, run_dir: str, caller_env: Message, packages: str | None = None) -> Message:
        """The scrubbed environment of a run, plus what the caller passed; the package cache
        last on ``PYTHONPATH``, or the directory of the package set ``packages`` in its place
        (a name the host checked: no ``/``, no leading dot)."""
        env = {
            "PATH": self.path,
            "HOME": run_dir,
            "LANG": "C.UTF-8",
            "TMPDIR": run_dir,
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            **self.offline_env,
        }
        env.update(caller_env)
        shown = self.packages_dir
        if shown and packages is not None:
            if not isinstance(packages, str) or "/" in packages or packages.startswith(".") or not packages:
                raise ValueError(f"not a package set's name: {packages!r}")
            shown = os.path.join(shown, PACKAGE_SETS, packages)
        if shown and os.path.isdir(shown):
            given = caller_env.get("PYTHONPATH")
            env["PYTHONPATH"] = f"{given}:{shown}" if given else shown
        return env

    def drop_privileges(self) -> None:
        """In the run child: become the worker's unprivileged user, or shed capabilities."""
        if self.uid is not None:
            os.setgroups([])
            os.setresgid(self.uid, self.uid, self.uid)
            os.setresuid(self.uid, self.uid, self.uid)
        elif self.userns:
            isolation.drop_capabilities()

    def serve(self) -> int:
        while True:
            request = read_message(self.req_fd)
            if request is None:
                return EXIT_HOST_GONE
            self.note("received")
            if request.get("op") != "run":
                return 0
            reply, run_dir = self.handle(request)
            if self.must_exec:  # the host replaces such a worker: its runs start slowly
                reply["tainted"] = True
            if self.phases is not None:
                self.note("replied")
                reply["phases"] = self.phases
            try:
                write_message(self.resp_fd, reply)
            except BrokenPipeError:
                return EXIT_HOST_GONE
            self.unbind_aliases()
            if run_dir and not request.get("keep"):
                self.throw_away(run_dir)
            _has_children()  # reap what has died; the rest is awaited before the next run
            self.clean_scratch()
            if self.config["once"]:
                return 0
            self.get_ready()
            if self.phases is not None:  # the time spent after replying, for the next reply
                self.phases = {"previous_ready": time.monotonic()}

    def note(self, phase: str) -> None:
        """Profile mode: note the time of ``phase`` of this run."""
        if self.phases is not None:
            self.phases[phase] = time.monotonic()

    def get_ready(self) -> None:
        """Prepare the next run while idle: its directory, scratch space and aliases, then its
        child (which knows where the run will be: see :func:`relocate_ahead`)."""
        with contextlib.suppress(OSError):  # handle() will try again, and report
            self.next_run_dir = self.make_run_dir()
            self.provide_scratch(self.next_run_dir, self.limits)
            self.bind_aliases(self.next_run_dir)
        self.prefork()

    def provide_scratch(self, run_dir: str, limits: Message, keep: bool = False) -> None:
        """Put ``run_dir``, ``/tmp`` and ``/dev/shm`` on a tmpfs of the run's disk quota.

        Not for a kept run (a package install): the host reads its directory afterwards,
        and mounts made in the sandbox's namespace are invisible there.
        """
        wanted = None if keep or not self.namespaced else (run_dir, int(limits.get("disk_mb") or DISK_MB))
        if self.scratch == wanted:
            return
        self.drop_scratch()
        if wanted is not None:
            isolation.mount_run_scratch(run_dir, wanted[1], self.uid, self.scratch_shown)
            self.scratch = wanted

    def drop_scratch(self) -> None:
        if self.scratch is not None:
            isolation.unmount_run_scratch(self.scratch[0])
            self.scratch = None

    def make_run_dir(self) -> str:
        run_dir = f"{self.run_root}/run-{self.count}"
        self.count += 1
        os.mkdir(run_dir, 0o700)
        if self.uid is not None:
            os.chown(run_dir, self.uid, self.uid)
        return run_dir

    def handle(self, request: Message) -> tuple[Message, str | None]:
        shipped = [*(request.get("files") or ()), *(request.get("programs") or ())]
        # a run of a plain command in between keeps them: the next program run still finds them ready
        self.recent_programs = [name for name in shipped if name in PROGRAM_NAMES] or self.recent_programs
        run_dir, self.next_run_dir = self.next_run_dir, None
        try:
            run_dir = run_dir or self.make_run_dir()
            self.provide_scratch(
                run_dir, {**self.limits, **(request.get("limits") or {})}, keep=bool(request.get("keep"))
            )
            reply = self.run(request, run_dir)
        except Exception as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, run_dir
        reply["run_dir"] = os.path.basename(run_dir)
        return reply, run_dir

    def prefork(self) -> None:
        """Have the child of the next run forked now, while idle: off the critical path.

        The zygote forks it (PID 1 takes it at dispatch); where the zygote is gone, PID 1
        forks it itself, and that child execs its command (see :attr:`must_exec`).
        """
        self.request_waiting = bool(select.select([self.req_fd], [], [], 0)[0])
        if self.zygote is not None:
            if self.zygote.order(self.next_run_dir, self.recent_programs, self.request_waiting):
                self.spare_ordered = True
                return
            self.lose_zygote()
        control_r, control_w = os.pipe()
        status_r, status_w = os.pipe()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            spare_main(self, control_r, status_w, (in_r, out_w, err_w))
        for fd in (control_r, status_w, in_r, out_w, err_w):
            os.close(fd)
        self.spare = Spare(pid, (control_w, status_r, in_w, out_r, err_r), own=True)

    def take_spare(self) -> None:
        """Take the spare child ordered from the zygote, if one was."""
        if not self.spare_ordered:
            return
        self.spare_ordered = False
        taken = self.zygote.take_spare() if self.zygote is not None else None
        if taken is None:
            self.lose_zygote()
        else:
            self.spare = Spare(*taken)

    def lose_zygote(self) -> None:
        """The zygote is gone (a run in a user namespace can kill it): from now on PID 1 forks
        run children that exec, and replies ask the host to replace this worker."""
        if self.zygote is not None:
            _ignore_errors(os.kill, self.zygote.pid, signal.SIGKILL)
            self.zygote.close()
            self.zygote = None
        self.spare_ordered = False
        self.must_exec = True

    def dispatch(self, request: Message, run_dir: str) -> Spare:
        """Give the job to the spare child (having one forked if it died meanwhile)."""
        self.take_spare()
        self.await_previous_run()
        for _ in range(2):
            spare, self.spare = self.spare, None
            if spare is None:
                self.prefork()
                self.take_spare()
                spare, self.spare = self.spare, None
            assert spare is not None
            try:
                write_message(spare.control, {"request": request, "run_dir": run_dir})
                return spare
            except OSError:
                spare.discard()
            finally:
                _ignore_errors(os.close, spare.control)
        raise OSError(errno.ECHILD, "the run child died before it got its job")

    def run(self, request: Message, run_dir: str) -> Message:
        self.bind_aliases(run_dir)
        return self._run(request, run_dir)

    def bind_aliases(self, run_dir: str) -> None:
        """Show ``run_dir`` (as it is mounted now) at every working-directory alias.

        Done ahead for the next run (:meth:`get_ready`), and undone after the reply
        (:meth:`unbind_aliases`): neither is on a run's critical path unless its directory
        or scratch space changed meanwhile. No run's process exists between the two.
        """
        if self.bound == (run_dir, self.scratch):
            return
        self.unbind_aliases()
        self.bound = (run_dir, self.scratch)
        for alias in self.aliases:
            isolation.bind_alias(run_dir, alias)

    def unbind_aliases(self) -> None:
        if self.bound is not None:
            self.bound = None
            for alias in self.aliases:
                _ignore_errors(isolation.unbind_alias, alias)

    def _run(self, request: Message, run_dir: str) -> Message:
        job = RunJob(self, request, run_dir)
        started = time.monotonic()
        stamps = run_module.stamps()
        if stamps is not None:
            stamps[:] = bytes(len(stamps))
        self.note("dispatching")
        spare = self.dispatch(request, run_dir)
        self.note("dispatched")
        supervisor = Supervisor(self, spare)
        if job.stdin is not None:
            supervisor.feed_stdin(spare.in_w, job.stdin.encode("utf-8", "surrogateescape"))
        else:
            os.close(spare.in_w)  # end of file at once, like /dev/null
        killed_for = supervisor.watch(started, job.timeout, job.stretch)
        self.note("exited")
        supervisor.finish()
        duration = time.monotonic() - started
        supervisor.drain()
        if self.phases is not None and stamps is not None:
            for index, phase in enumerate(CHILD_PHASES):
                at, faults = struct.unpack_from("dd", stamps, 16 * index)
                if at:
                    self.phases[f"child_{phase}"] = at
                    self.phases[f"child_{phase}_faults"] = faults
        if killed_for == "host":
            os._exit(EXIT_HOST_GONE)
        return _reply(supervisor, killed_for, duration, job.kind != "exec" and not spare.own)

    def kill_run_tree(self, pid: int, child_done: bool) -> None:
        """Kill every process of the run (as PID 1: every process but itself and the zygote)."""
        if self.is_init():
            _kill_all_but(self.kept_processes())
            return
        _ignore_errors(os.killpg, pid, signal.SIGKILL)
        if not child_done:
            _ignore_errors(os.kill, pid, signal.SIGKILL)

    def reap_all(self) -> None:
        """Without namespaces: reap the run, killing the orphans it left, until none is left.

        (In a namespace, :meth:`kill_run_tree` has already doomed everything: see
        :meth:`await_previous_run`.)
        """
        zygote = self.zygote.pid if self.zygote is not None and self.zygote.alive() else None
        while _kill_adopted_children(zygote):  # orphans were re-parented to this subreaper
            _has_children()
            time.sleep(0.001)

    def await_previous_run(self) -> None:
        """Wait until the processes of the last run, all killed already, are gone.

        PID 1 answers as soon as everything is killed and reaps afterwards, off the
        critical path; a new run must not start while they still count against the
        sandbox user's process limit.
        """
        if not self.is_init():
            return
        keep = {*self.kept_processes(), self.spare.pid if self.spare else 1}
        while True:
            _has_children()  # reaps what has exited
            left = [pid for pid in _pids() if pid not in keep]
            if not left:
                return
            for pid in left:
                _ignore_errors(os.kill, pid, signal.SIGKILL)
            time.sleep(0.0002)

    def run_busy(self, pid: int) -> bool:
        """Whether some process of the run (``pid``, the run child, in ``none`` mode) has a
        thread that is running or waiting for a CPU."""
        pids = [p for p in _pids() if p not in self.kept_processes()] if self.is_init() else [pid]
        for process in pids:
            try:
                threads = os.listdir(f"/proc/{process}/task")
            except OSError:
                continue
            for tid in threads:
                try:
                    with open(f"/proc/{process}/task/{tid}/stat", "rb") as handle:
                        if handle.read().rsplit(b")", 1)[1].split()[0] == b"R":
                            return True
                except (OSError, IndexError):
                    continue
        return False

    def kept_processes(self) -> set[int]:
        """The processes of the namespace that no run owns: PID 1 and the zygote (checked
        alive first, so that no run's process can have its pid)."""
        if self.zygote is not None and not self.zygote.alive():
            self.lose_zygote()
        return {1, self.zygote.pid} if self.zygote is not None else {1}

    def is_init(self) -> bool:
        """True in PID 1 of a sandbox namespace, where every other process but the zygote is the run's."""
        return self.namespaced and os.getpid() == 1

    def throw_away(self, run_dir: str) -> None:
        """Hand a finished run directory to the janitor (out of the next run's reach)."""
        if self.scratch is not None and self.scratch[0] == run_dir:
            self.drop_scratch()  # its files are on the run's own tmpfs: gone with it
        try:
            os.rename(run_dir, f"{self.run_root}/{TRASH}/{os.path.basename(run_dir)}")
            os.write(self.janitor_fd, b".")
        except BlockingIOError:  # the janitor has wake-ups enough
            pass
        except OSError:
            remove_tree(run_dir)

    def clean_scratch(self) -> None:
        """Empty the throwaway ``/tmp`` and ``/dev/shm`` between runs."""
        if not self.namespaced:
            return
        for directory, keep in (("/tmp", self.keep_in_tmp), ("/dev/shm", set())):
            for name in _ignore_errors(os.listdir, directory) or ():
                if name not in keep:
                    remove_tree(f"{directory}/{name}")


def _reply(supervisor: Supervisor, killed_for: str | None, duration: float, inprocess: bool) -> Message:
    out, err = supervisor.captures.values()
    return {
        "ok": True,
        "returncode": supervisor.returncode,
        "stdout": out.text(),
        "stderr": err.text(),
        "timed_out": killed_for == "timeout",
        "duration": duration,
        "output_truncated": out.truncated or err.truncated,
        "killed_for": killed_for,
        "inprocess": inprocess,
    }


def _kill_all_but(keep: set[int]) -> None:
    """Kill every process of the namespace but ``keep`` (kill(-1) would hit the zygote).

    Pass after pass, until one finds no process it has not killed already: a process killed
    cannot fork any more, so only those forked during a pass are left for the next.
    """
    killed: set[int] = set()
    while True:
        fresh = [pid for pid in _pids() if pid not in keep and pid not in killed]
        if not fresh:
            return
        for pid in fresh:
            _ignore_errors(os.kill, pid, signal.SIGKILL)
        killed.update(fresh)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _has_children() -> bool:
    """Reap exited children; True while some are still alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _kill_adopted_children(spare: int | None) -> bool:
    """Kill processes whose parent is this subreaper (none mode) but ``spare`` (the
    zygote); True if any were found."""
    me, found = os.getpid(), False
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == spare:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found = True
            _ignore_errors(os.killpg, int(fields[2]), signal.SIGKILL)
            _ignore_errors(os.kill, int(name), signal.SIGKILL)
    return found


def base_sys_path() -> list[str]:
    """``sys.path`` of a fresh ``python script.py``, minus the script's own directory."""
    import site

    user_site = getattr(site, "USER_SITE", None)
    return [p for p in sys.path[1:] if p != user_site]


def server_main(config: Message, fds: tuple[int, int, int], mode: str, run_cgroup: int | None) -> NoReturn:
    """PID 1: build the namespace's file system, preload, announce readiness, serve."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the outer's handler is not ours
        isolation.set_parent_death_signal(signal.SIGKILL)
        pid1 = os.getpid()
        warnings: list[str] = []
        scratch_shown: list[str] = []
        load_programs(config.get("programs") or {})
        if mode != "none":
            pid1 = int(os.readlink("/proc/self"))  # still the host's /proc: host-visible pid
            try:
                warnings, scratch_shown = _isolate_filesystem(config, mode)
            except OSError as exc:
                message = exc.strerror if isinstance(exc, isolation.IsolationError) else str(exc)
                write_message(fds[1], {"ready": False, "unavailable": True, "error": message})
                os._exit(3)
            if not config["network"]:
                isolation.bring_up_loopback()
        else:
            isolation.set_child_subreaper()
        import site

        site.main()  # site-packages and .pth files as the sandbox sees them, not the host
        server = Server(config, fds, mode, run_cgroup, scratch_shown)
        os.environ.update(server.offline_env)  # preloaded modules read them at import, as a run's would
        replay = bool(config.get("preload_replay"))
        preloaded, server.preload_output = preload(
            config.get("preload") or [], f"{server.run_root}/{PRELOAD_DIR}", replay=replay
        )
        server.preload_env = preloaded["environment"]
        sys.path_importer_cache.clear()  # the worker's own directory, out of sight now (after preloading)
        if server.namespaced:
            isolation.keyring_filter()  # built once: each run child installs it
        gc.freeze()  # children's collections then skip (and do not copy) the server's objects
        if not config["once"]:  # before any request: the clean parent of every run child
            server.zygote = ZygoteLink.start(server)
        server.get_ready()
        write_message(
            server.resp_fd,
            {
                "ready": True,
                "pid1": pid1,
                "python": sys.executable,
                "mode": mode,
                "version": sys.version.split()[0],
                "warnings": warnings,
                "preload": preloaded,
                "memory_cgroup": run_cgroup is not None,
                "views": config.get("views"),
                "site_packages": visible_distributions(config) if mode != "none" else None,
                "programs": program_digests(),
            },
        )
        code = server.serve()
    except BaseException:
        import traceback

        traceback.print_exc()
    os._exit(code)


def _isolate_filesystem(config: Message, mode: str) -> tuple[list[str], list[str]]:
    try:
        plan = filesystem_plan(config)
        config["views"] = plan.views  # told to the host, which passes them to later workers
        return isolation.setup_filesystem(plan), plan.scratch_shown
    except OSError as exc:
        raise isolation.IsolationError(
            exc.errno or errno.EPERM,
            f"cannot set up the sandbox file system ({mode} mode): {exc}. {isolation.ADVICE}",
        ) from None


def join_cgroup(config: Message) -> int | None:
    """Move this process into the worker's cgroup; returns an fd that moves a run into the
    run's (memory-capped) cgroup, or None where the host made none."""
    cgroup = config.get("cgroup")
    if not cgroup:
        return None
    try:
        with open(f"{cgroup}/server/cgroup.procs", "w", encoding="ascii") as handle:
            handle.write("0")
        return os.open(f"{cgroup}/run/cgroup.procs", os.O_WRONLY)
    except OSError:
        return None


def janitor(trash_fd: int, wake_fd: int) -> None:
    """Delete the run directories PID 1 throws away, until it exits (EOF on ``wake_fd``).

    Through a descriptor of the trash directory: PID 1 moves this process into the
    sandbox's root, where the host's path of the worker's directory does not exist.
    """
    while True:
        awake = os.read(wake_fd, 4096)
        for name in _ignore_errors(os.listdir, trash_fd) or ():
            remove_at(trash_fd, name)
        if not awake:
            return


def remove_at(parent_fd: int, name: str) -> None:
    """Remove ``name`` in the directory ``parent_fd``, through fds only (best effort).

    The outer worker must reach its directory under a ``/tmp`` that a tmpfs covers in its
    mount namespace, where ``/proc/self`` is not even its own: only ``*at()`` calls do.
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError:  # a file or a symlink (or gone)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=parent_fd)
        return
    try:
        with os.scandir(fd) as entries:
            names = [entry.name for entry in entries]
        for child in names:
            remove_at(fd, child)
    except RecursionError:  # absurdly deep: cleanup_leftovers() will finish the job
        pass
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent_fd)


class _HostGone(Exception):
    """The host died (or someone sent SIGTERM): clean up behind it."""


_host_gone: list[bool] = []
"""Set once :func:`_raise_host_gone` has raised: the worker is cleaning up behind its host."""


def _raise_host_gone(signum: int, frame: object) -> None:
    """Raise :class:`_HostGone` at the first SIGTERM only. The host's death can bring more
    than one (its death signal, a clean-up's), and Python runs a handler between any two
    instructions: a second raise inside the first one's ``except`` would leave the worker's
    directory behind."""
    if not _host_gone:
        _host_gone.append(True)
        raise _HostGone


def main(argv: list[str]) -> int:
    """Entry point of the worker process (the outer one, in the host's namespaces)."""
    config = json.loads(argv[-1])
    host_pid = int(next(a for a in argv if a.startswith("--host=")).split("=")[1].split(":")[0])
    req_fd, resp_fd = _take_protocol_fds()
    signal.signal(signal.SIGTERM, _raise_host_gone)
    isolation.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != host_pid:
        return 1  # the host died before we could arm the death signal
    os.umask(0o022)
    # Reaches the worker's directory even once /tmp is covered, to remove it if need be.
    parent_fd = os.open(os.path.dirname(config["host_dir"]), os.O_PATH | os.O_DIRECTORY)
    os.mkdir(f"{config['host_dir']}/{TRASH}", 0o700)
    trash_fd = os.open(f"{config['host_dir']}/{TRASH}", os.O_RDONLY | os.O_DIRECTORY)
    run_cgroup = join_cgroup(config)
    mode = "none"
    if config["isolation"] == "namespaces":
        try:
            mode = isolation.enter_namespaces(network=bool(config["network"]))
        except OSError as exc:
            message = exc.strerror if isinstance(exc, isolation.IsolationError) else str(exc)
            write_message(resp_fd, {"ready": False, "unavailable": True, "error": message})
            return 3
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    pid = os.fork()
    if pid == 0:
        for fd in (wake_r, trash_fd, parent_fd):
            os.close(fd)
        server_main(config, (req_fd, resp_fd, wake_w), mode, run_cgroup)
    for fd in (req_fd, resp_fd, wake_w, *([run_cgroup] if run_cgroup is not None else [])):
        os.close(fd)
    code = _outlive_server(pid, trash_fd, wake_r)
    if code == EXIT_HOST_GONE:  # nobody else will remove the worker's directory
        if mode != "none":  # a run directory still mounted on here could not be removed
            _ignore_errors(isolation.detach, isolation.INNER_ROOT)
        remove_at(parent_fd, os.path.basename(config["host_dir"]))
    return code if code >= 0 else 128 - code


def _outlive_server(pid: int, trash_fd: int, wake_fd: int) -> int:
    """Be the janitor until PID 1 exits; returns its exit code."""
    try:
        janitor(trash_fd, wake_fd)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except _HostGone:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _ignore_errors(os.kill, pid, signal.SIGKILL)  # PID 1: its whole namespace dies
        _ignore_errors(os.waitpid, pid, 0)
        return EXIT_HOST_GONE
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
