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
  "stdin", "env", "timeout", "keep", "limits"}`` or ``{"op": "exit"}``. ``programs``: the
  run-directory names of programs the worker holds (its ready message lists them with
  their SHA-256), written from its own copy: their text need not cross two pipes per run.
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

import binascii
import builtins
import contextlib
import errno
import gc
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import types
from importlib.machinery import SourceFileLoader

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up; annotations are strings here
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any, NoReturn, TypeVar

    Message = dict[str, Any]
    _T = TypeVar("_T")

if __package__:
    from gym_repost.sandbox import isolation
else:  # started by the host, the normal case: keep the gym_repost package out of the worker
    import isolation  # type: ignore[no-redef,import-not-found]

MARKER = "--gym-repost-sandbox-worker"
"""argv marker of worker processes (and of their warm run children), for cleanup."""
HEADER = struct.Struct(">I")
OUTPUT_KILL_FACTOR = 16
"""A stream larger than this many times ``max_output_bytes`` gets the run killed (only
``max_output_bytes`` of it is kept anyway; a flood costs the time it takes to print)."""
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MIB = 1024 * 1024
_PYTHON_NAMES = ("python", "python3")
TRASH = ".trash"
EXIT_HOST_GONE = 3
"""Exit status of PID 1 when its request pipe ended without an ``exit`` request."""
_CHUNK = 1 << 16
DISK_MB = 256
"""A run's disk quota when the request's limits name none."""


# ---------------------------------------------------------------- protocol


def encode_message(obj: object) -> bytes:
    """Frame one JSON message (length prefix + UTF-8 JSON)."""
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return HEADER.pack(len(data)) + data


def write_message(fd: int, obj: object) -> None:
    """Write one framed message to a blocking fd."""
    view = memoryview(encode_message(obj))
    while view:
        view = view[os.write(fd, view) :]


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


# ---------------------------------------------------------------- trusted programs' bytecode


PROGRAM_CODE: dict[bytes, types.CodeType] = {}
"""Code of the host's own programs (``gym_repost/programs``) by their exact source: a warm
run whose script or imported module has one of these texts skips its compilation (~20 ms
for the harness here)."""
PROGRAM_NAMES: dict[str, bytes] = {}
"""The programs' file names in a run directory, and their sources."""
_RELOCATED: dict[bytes, tuple[str, types.CodeType]] = {}
"""In a spare child: programs' code already relocated to a path of its coming run."""


def load_programs(programs: dict[str, str]) -> None:
    """Compile the host's programs (or load their cached bytecode) in PID 1, before isolation.

    ``programs``: each program's path and its file name in a run directory. Only these
    trusted texts are compiled outside a run: a run's own code is compiled in its child,
    under its limits.
    """
    for path, name in programs.items():
        loader = SourceFileLoader("program", path)
        try:
            source, code = loader.get_data(path), loader.get_code("program")
        except (ImportError, OSError, SyntaxError, ValueError):  # a broken install: compile per run
            continue
        if code is None:
            continue
        PROGRAM_CODE[source] = code
        PROGRAM_NAMES[name] = source


def program_digests() -> dict[str, str]:
    """The SHA-256 of each program this worker holds, by run-directory name."""
    import hashlib

    return {name: hashlib.sha256(source).hexdigest() for name, source in PROGRAM_NAMES.items()}


def program_code(source: bytes, path: str) -> types.CodeType | None:
    """The precompiled code of ``source`` as if compiled from ``path``; None for other texts."""
    ready = _RELOCATED.get(source)
    if ready is not None and ready[0] == path:
        return ready[1]
    code = PROGRAM_CODE.get(source)
    return None if code is None else _relocated(code, path)


def relocate_ahead(run_dir: str, names: list[str]) -> None:
    """In a spare child, while idle: the programs ``names`` (those the last run shipped)
    relocated to ``run_dir``, where the next run will most likely ship them again."""
    for name in names:
        source = PROGRAM_NAMES.get(name)
        if source is not None:
            path = f"{run_dir}/{name}"
            _RELOCATED[source] = (path, _relocated(PROGRAM_CODE[source], path))


def _relocated(code: types.CodeType, path: str) -> types.CodeType:
    consts = tuple(_relocated(c, path) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=path, co_consts=consts)


def _use_program_code_on_import() -> None:
    """Let imports of the programs' modules (``_gym_repost_protocol``...) use their code too."""
    from importlib._bootstrap_external import SourceLoader  # SourceFileLoader's base

    compile_source = SourceLoader.source_to_code

    def source_to_code(self: Any, data: Any, path: Any, *, _optimize: int = -1) -> Any:
        code = program_code(data, path) if _optimize == -1 and type(data) is bytes and type(path) is str else None
        return code if code is not None else compile_source(self, data, path, _optimize=_optimize)

    source_to_code.__qualname__ = compile_source.__qualname__
    SourceLoader.source_to_code = source_to_code  # type: ignore[method-assign]


# ---------------------------------------------------------------- the run child


class RunJob:
    """One run request, as PID 1 prepares it before forking the run child."""

    def __init__(self, server: Server, request: Message, run_dir: str) -> None:
        self.run_dir = run_dir
        self.argv: list[str] = list(request["argv"])
        self.files: dict[str, str] = request.get("files") or {}
        self.bfiles: dict[str, str] = request.get("bfiles") or {}
        self.programs: list[str] = request.get("programs") or []
        self.stdin: str | None = request.get("stdin")
        self.timeout = float(request["timeout"])
        self.limits = {**server.limits, **(request.get("limits") or {})}
        self.env = server.run_environment(run_dir, request.get("env") or {})
        self.kind, self.target, self.args = plan_command(self.argv, self.env, server.warm)


def write_files(run_dir: str, files: dict[str, str], bfiles: dict[str, str], programs: Sequence[str] = ()) -> None:
    """Write the run's files (as the run's user, before the file-size limit applies);
    ``programs``: names of programs written from this worker's copy (see :func:`load_programs`)."""
    items = [(p, c.encode("utf-8", "surrogateescape")) for p, c in files.items()]
    items += [(p, binascii.a2b_base64(c)) for p, c in bfiles.items()]
    items += [(name, PROGRAM_NAMES[name]) for name in programs]
    for relative, data in items:
        if relative.startswith("/") or ".." in relative.split("/"):
            raise ValueError(f"file path outside the run directory: {relative!r}")
        path = f"{run_dir}/{relative}"
        parent = os.path.dirname(path)
        if parent != run_dir:
            os.makedirs(parent, exist_ok=True)
        mode = 0o755 if data.startswith(b"#!") else 0o644
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


_CONTROL_FD = 3
_STATUS_FD = 4
CHILD_PHASES = ("job", "files", "start", "end")
"""What a run child stamps (profile mode): job read, files written, command started, program ended."""
_stamps: Any = None
"""Profile mode: shared memory (one page, mapped before the fork) the run child stamps."""


def stamp(index: int) -> None:
    """Profile mode: note the time of the run child's phase ``CHILD_PHASES[index]`` (and its
    page faults so far: each costs microseconds, on a VM tens of them)."""
    if _stamps is not None:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        struct.pack_into("dd", _stamps, 16 * index, time.monotonic(), faults)


_RUN_PID = -1
_STATUS_PIPE = (0, 0)


def spare_main(server: Server, control: int, status: int, stdio: tuple[int, int, int]) -> NoReturn:
    """Body of a pre-forked run child: confine itself, wait for its job, run it.

    What does not depend on the job (the fork itself, the process group, the stdio
    pipes, a rehearsal) happens before the request arrives. The change of user waits for the job, so
    that no process of the sandbox user exists between runs.
    """
    try:
        # A process group, not a session: setsid() creates a scheduler autogroup, which
        # costs ~2 ms; the worker already has no controlling terminal.
        os.setpgid(0, 0)
        # PID 1 always holds fds 0-4 (null, null, stderr, request, reply), so the pipes
        # are above them and cannot be clobbered by these dup2() calls.
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        os.dup2(control, _CONTROL_FD)
        os.dup2(status, _STATUS_FD, inheritable=False)
        if server.run_cgroup is not None:  # the run's memory cap: all its processes at once
            os.write(server.run_cgroup, b"0")
        if not server.namespaced:
            isolation.set_parent_death_signal(signal.SIGKILL)
        os.closerange(_STATUS_FD + 1, 1 << 20)  # protocol pipes, pidfds: nothing leaks
        if server.warm:  # an exec'd command gains nothing from these
            if not server.request_waiting:  # else the job is already there: no time to gain
                rehearse(server)
            if server.next_run_dir is not None:
                relocate_ahead(server.next_run_dir, server.recent_programs)
        message = read_message(_CONTROL_FD)
        if message is None:  # PID 1 is gone, or does not need this child any more
            os._exit(0)
        stamp(0)
        os.close(_CONTROL_FD)
        server.drop_privileges()
        run_job(server, RunJob(server, message["request"], message["run_dir"]))
    except BaseException as exc:
        _write_stderr(f"gym-repost sandbox: cannot start the run: {type(exc).__name__}: {exc}\n")
    os._exit(126)


_REHEARSAL = "def f(a, b):\n    return a + b\n\n\nassert f(1, 2) == 3, 'rehearsal'\n"


def rehearse(server: Server) -> None:
    """Walk a run's code paths once, harmlessly, while waiting for the job.

    After fork() each page the child first writes to (reference counts, allocator
    state) is copied, a few microseconds each on a VM; doing it now, while PID 1 and the
    host are busy elsewhere, takes ~20% off a run that follows some think time.
    """
    request = {
        "op": "run",
        "argv": ["python3", "main.py"],
        "files": {"main.py": _REHEARSAL},
        "bfiles": {},
        "stdin": None,
        "env": {"A": "b"},
        "timeout": 1.0,
    }
    message = json.loads(encode_message({"request": request, "run_dir": "/"})[HEADER.size :])
    job = RunJob(server, message["request"], message["run_dir"])
    dict(os.environ)
    os.path.dirname(os.path.realpath(os.path.abspath(job.target)))
    main = _new_main_module(None)
    code = compile(_REHEARSAL, "<rehearsal>", "exec", dont_inherit=True)
    exec(code, main.__dict__)


def run_job(server: Server, job: RunJob) -> NoReturn:
    """In the run child, once the job is known: files, limits, environment, command."""
    write_files(job.run_dir, job.files, job.bfiles, job.programs)
    stamp(1)
    os.chdir(job.run_dir)
    apply_limits(job.limits)
    isolation.set_no_new_privs()
    os.environ.clear()
    os.environ.update(job.env)
    for key, value in server.preload_env.items():  # what preloaded imports set (see preload())
        os.environ.setdefault(key, value)
    stamp(2)
    if job.kind != "exec" and _runnable_in_process(job):
        run_in_process(server, job)
    exec_command(server, job)


def _runnable_in_process(job: RunJob) -> bool:
    if job.kind != "script":
        return True
    try:  # let the real interpreter handle missing files, directories and zip apps
        with open(job.target, "rb") as handle:
            return handle.read(4) != b"PK\x03\x04"
    except OSError:
        return False


def _write_stderr(text: str) -> None:
    try:
        os.write(2, text.encode("utf-8", "replace"))
    except OSError:
        pass


def exec_command(server: Server, job: RunJob) -> NoReturn:
    """Replace the run child with the command (``python`` means the worker's interpreter)."""
    argv = list(job.argv)
    if argv[0] in _PYTHON_NAMES:
        argv[0] = sys.executable
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; children must not
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.execvpe(argv[0], argv, job.env)
    except OSError as exc:
        _write_stderr(f"{argv[0]}: {exc.strerror}\n")
        os._exit(127 if exc.errno == errno.ENOENT else 126)


def run_in_process(server: Server, job: RunJob) -> NoReturn:
    """Run a python command inside this already-started interpreter, like ``python`` would."""
    global _RUN_PID, _STATUS_PIPE
    _RUN_PID = os.getpid()
    info = os.fstat(_STATUS_FD)
    _STATUS_PIPE = (info.st_dev, info.st_ino)
    ours = (sys.modules.get(__name__), isolation)
    for name in [n for n, m in sys.modules.items() if any(m is o for o in ours)]:
        del sys.modules[name]  # a program may have its own worker.py or isolation.py
    if "tempfile" in sys.modules:  # forget a temp dir chosen before TMPDIR pointed here
        sys.modules["tempfile"].tempdir = None  # type: ignore[attr-defined]
    if PROGRAM_CODE:
        _use_program_code_on_import()
    extra = [os.path.abspath(p) for p in job.env.get("PYTHONPATH", "").split(":") if p]
    sys.orig_argv = [sys.executable, *job.argv[1:]]
    os._exit = _exit_telling_pid1
    status = _execute_main(job, extra, server.base_path)
    os._exit(_finalize(status))


_REAL_EXIT = os._exit


def _exit_telling_pid1(status: int) -> NoReturn:
    """``os._exit`` in a warm run: tell PID 1 the status first, as :func:`_finalize` does.

    PID 1 can then answer while the kernel tears the process down (programs such as the
    harness end with ``os._exit``; that teardown was ~1 ms of every run).
    """
    if type(status) is int and os.getpid() == _RUN_PID and _is_status_pipe():
        stamp(3)
        _ignore_errors(os.write, _STATUS_FD, bytes((status & 0xFF,)))
    _REAL_EXIT(status)


_exit_telling_pid1.__name__ = _exit_telling_pid1.__qualname__ = "_exit"
_exit_telling_pid1.__doc__ = os._exit.__doc__


def _execute_main(job: RunJob, extra: list[str], base: list[str]) -> int:
    try:
        if job.kind == "script":
            _run_script(job.target, job.args, extra, base)
        elif job.kind == "code":
            sys.argv = ["-c", *job.args]
            sys.path[:] = ["", *extra, *base]
            _exec_main(compile(job.target, "<string>", "exec", dont_inherit=True), None)
        else:
            import runpy

            sys.argv = ["-m", *job.args]
            sys.path[:] = [os.getcwd(), *extra, *base]
            runpy._run_module_as_main(job.target, alter_argv=True)  # type: ignore[attr-defined]
    except SystemExit as exc:
        return _system_exit_status(exc)
    except BaseException as exc:
        return _report_uncaught(exc)
    return 0


def _run_script(script: str, args: list[str], extra: list[str], base: list[str]) -> None:
    path = os.path.abspath(script)
    sys.argv = [script, *args]
    sys.path[:] = [os.path.dirname(os.path.realpath(path)), *extra, *base]
    with open(path, "rb") as handle:
        source = handle.read()
    code = program_code(source, path) or compile(source, path, "exec", dont_inherit=True)
    _exec_main(code, path)


def _new_main_module(path: str | None) -> types.ModuleType:
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __spec__=None, __package__=None, __builtins__=builtins)
    if path is None:
        del main.__file__
    else:
        main.__loader__ = SourceFileLoader("__main__", path)
    return main


def _exec_main(code: types.CodeType, path: str | None) -> None:
    main = _new_main_module(path)
    sys.modules["__main__"] = main
    # Give the program the stack depth it would have as a fresh interpreter's only frame.
    depth, frame = 1, sys._getframe()
    while frame.f_back is not None:
        depth, frame = depth + 1, frame.f_back
    sys.setrecursionlimit(sys.getrecursionlimit() + depth + 1)  # +1: exec() itself
    exec(code, main.__dict__)


def _system_exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    _write_stderr(f"{code}\n")
    return 1


def _report_uncaught(exc: BaseException) -> int:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next  # the real interpreter shows no frames of its own
    exc.__traceback__ = tb  # the default hook prints the exception's own traceback
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException:
        sys.__excepthook__(type(exc), exc, tb)
    return -signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1


def _finalize(status: int) -> int:
    """What ``Py_Finalize`` does that a program can observe: threads, atexit, flush."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            status = 120 if status == 0 else status
    isolation.flush_c_stdio()  # exit() would, os._exit() does not
    if status < 0:  # KeyboardInterrupt: die of SIGINT like the interpreter does
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    if os.getpid() == _RUN_PID and _is_status_pipe():  # not a child the program forked
        stamp(3)
        # Tell PID 1 now: it can answer while the kernel tears this process down.
        _ignore_errors(os.write, _STATUS_FD, bytes((status & 0xFF,)))
    return status


def _is_status_pipe() -> bool:
    """The program may have closed fd 4 and opened something else there."""
    info = _ignore_errors(os.fstat, _STATUS_FD)
    return info is not None and (info.st_dev, info.st_ino) == _STATUS_PIPE


# ---------------------------------------------------------------- supervision (PID 1)


class Supervisor:
    """Watches one run child: feeds stdin, captures output, enforces the deadline."""

    def __init__(self, server: Server, spare: Spare) -> None:
        self.server = server
        self.pid = spare.pid
        cap = int(server.limits["max_output_bytes"])
        self.kill_at = cap * OUTPUT_KILL_FACTOR
        self.captures = {spare.out_r: Capture(cap), spare.err_r: Capture(cap)}
        self.poller = select.poll()
        self.stdin_fd: int | None = None
        self.stdin_data = memoryview(b"")
        self.status: int | None = None
        self.reported: int | None = None
        self.status_fd = spare.status_r
        self.pidfd: int | None = None
        for fd in self.captures:
            os.set_blocking(fd, False)
            self.poller.register(fd, select.POLLIN)
        self.poller.register(server.req_fd, select.POLLIN)
        self.poller.register(self.status_fd, select.POLLIN)
        try:
            self.pidfd = os.pidfd_open(self.pid)
            self.poller.register(self.pidfd, select.POLLIN)
        except (AttributeError, OSError):  # kernel < 5.3: poll waitpid instead
            self.pidfd = None

    def feed_stdin(self, fd: int, data: bytes) -> None:
        self.stdin_fd, self.stdin_data = fd, memoryview(data)
        os.set_blocking(fd, False)
        if self._write_stdin():
            self.poller.register(fd, select.POLLOUT)

    def _write_stdin(self) -> bool:
        """Write what the pipe takes; close it when done. True while data remains."""
        assert self.stdin_fd is not None
        try:
            while self.stdin_data:
                self.stdin_data = self.stdin_data[os.write(self.stdin_fd, self.stdin_data) :]
        except BlockingIOError:
            return True
        except OSError:  # the child closed stdin or exited
            pass
        self._close_stdin()
        return False

    def _close_stdin(self) -> None:
        if self.stdin_fd is not None:
            try:
                self.poller.unregister(self.stdin_fd)
            except KeyError:  # never registered: it was written in one go
                pass
            os.close(self.stdin_fd)
            self.stdin_fd = None

    def watch(self, deadline: float) -> str | None:
        """Wait until the child exits (or says it does); returns why it was killed, or None."""
        while self.status is None and self.reported is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            wait_ms = remaining * 1000 if self.pidfd is not None else min(remaining * 1000, 10)
            for fd, _ in self.poller.poll(wait_ms + 1):
                reason = self._on_event(fd)
                if reason:
                    return reason
            if self.pidfd is None:
                self._reap_child(os.WNOHANG)
        return None

    def _on_event(self, fd: int) -> str | None:
        if fd == self.pidfd:
            self._reap_child(os.WNOHANG)
        elif fd == self.status_fd:
            self._read_status()
        elif fd == self.stdin_fd:
            self._write_stdin()
        elif fd == self.server.req_fd:
            return "host"  # the host closed the pipe (or broke the protocol): give up
        elif self._read_output(fd):
            return "output"
        return None

    def _read_output(self, fd: int) -> bool:
        """Read what is there; True when the stream passed the kill threshold."""
        capture = self.captures[fd]
        try:
            while True:
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    self.poller.unregister(fd)
                    return False
                capture.feed(chunk)
                if capture.total > self.kill_at:
                    return True
        except BlockingIOError:
            return False

    def _read_status(self) -> None:
        data = _ignore_errors(os.read, self.status_fd, 64)
        if data:
            self.reported = data[-1]
        else:  # exec closed it: the exit status will come from waitpid
            self.poller.unregister(self.status_fd)

    @property
    def returncode(self) -> int:
        if self.status is not None:
            return os.waitstatus_to_exitcode(self.status)
        return self.reported if self.reported is not None else -signal.SIGKILL

    def _reap_child(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:
            return
        if pid == self.pid:
            self.status = status

    def finish(self) -> None:
        """Kill what is left of the run; collect the child's status unless it reported it.

        A child that reported its status is killed but not waited for: PID 1 answers
        first, and waits for the last of the run before it starts the next one.
        """
        self.server.kill_run_tree(self.pid, child_done=self.status is not None)
        if self.status is None and self.reported is None:
            self._reap_child(0)
        if not self.server.is_init():  # none mode: orphans must be found before answering
            self.server.reap_all()
        self._close_stdin()
        os.close(self.status_fd)
        if self.pidfd is not None:
            os.close(self.pidfd)

    def drain(self) -> None:
        """Read what is left in the pipes (every writer is dead by now)."""
        for fd in self.captures:
            try:
                while True:
                    chunk = os.read(fd, _CHUNK)
                    if not chunk:
                        break
                    self.captures[fd].feed(chunk)
            except BlockingIOError:
                pass
            os.close(fd)


# ---------------------------------------------------------------- the server (PID 1)


class Spare:
    """A pre-forked run child waiting for its job, and the server's ends of its pipes."""

    __slots__ = ("control", "err_r", "in_w", "out_r", "pid", "status_r")

    def __init__(self, pid: int, fds: tuple[int, int, int, int, int]) -> None:
        self.pid = pid
        self.control, self.status_r, self.in_w, self.out_r, self.err_r = fds

    def discard(self) -> None:
        _ignore_errors(os.kill, self.pid, signal.SIGKILL)
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
        self.base_path = base_sys_path()
        self.path = f"{os.path.dirname(sys.executable)}:{DEFAULT_PATH}"
        self.count = 0
        self.keep_in_tmp = set(os.listdir("/tmp")) if self.namespaced else set()
        self.spare: Spare | None = None
        self.next_run_dir: str | None = None
        self.recent_programs: list[str] = []
        """Programs (run-directory file names) the last request shipped."""
        self.request_waiting = False
        """A request was already waiting when the spare child was forked."""
        self.scratch: tuple[str, int] | None = None
        """The run directory whose tmpfs is mounted, and its size in MiB."""
        self.scratch_shown: list[str] = scratch_shown or []
        self.preload_env: dict[str, str] = {}
        """Environment variables that preloaded modules set at import, set in every run."""
        self.phases: dict[str, float] | None = {} if config.get("profile") else None
        """Profile mode: this run's timestamps (``time.monotonic()``), sent with the reply."""
        if self.phases is not None:
            import mmap

            global _stamps
            _stamps = mmap.mmap(-1, 16 * len(CHILD_PHASES))

    def run_environment(self, run_dir: str, caller_env: Message) -> Message:
        """The scrubbed environment of a run, plus what the caller passed."""
        env = {
            "PATH": self.path,
            "HOME": run_dir,
            "LANG": "C.UTF-8",
            "TMPDIR": run_dir,
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.update(caller_env)
        if self.packages_dir and os.path.isdir(self.packages_dir):
            given = caller_env.get("PYTHONPATH")
            env["PYTHONPATH"] = f"{given}:{self.packages_dir}" if given else self.packages_dir
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
            if self.phases is not None:
                self.note("replied")
                reply["phases"] = self.phases
            try:
                write_message(self.resp_fd, reply)
            except BrokenPipeError:
                return EXIT_HOST_GONE
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
        """Prepare the next run while idle: its directory and scratch space, then its child
        (which knows where the run will be: see :func:`relocate_ahead`)."""
        with contextlib.suppress(OSError):  # handle() will try again, and report
            self.next_run_dir = self.make_run_dir()
            self.provide_scratch(self.next_run_dir, self.limits)
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
        self.recent_programs = [name for name in shipped if name in PROGRAM_NAMES]
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
        """Fork the child of the next run now, while idle: off the critical path."""
        control_r, control_w = os.pipe()
        status_r, status_w = os.pipe()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self.request_waiting = bool(select.select([self.req_fd], [], [], 0)[0])
        pid = os.fork()
        if pid == 0:
            spare_main(self, control_r, status_w, (in_r, out_w, err_w))
        for fd in (control_r, status_w, in_r, out_w, err_w):
            os.close(fd)
        self.spare = Spare(pid, (control_w, status_r, in_w, out_r, err_r))

    def dispatch(self, request: Message, run_dir: str) -> Spare:
        """Give the job to the spare child (forking a new one if it died meanwhile)."""
        self.await_previous_run()
        for _ in range(2):
            spare, self.spare = self.spare, None
            if spare is None:
                self.prefork()
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
        with self.aliases_bound(run_dir):
            return self._run(request, run_dir)

    @contextlib.contextmanager
    def aliases_bound(self, run_dir: str) -> Iterator[None]:
        """The run's directory at every working-directory alias while it runs."""
        aliases = [a for a in self.config.get("aliases") or [] if os.path.isdir(a)] if self.namespaced else []
        for alias in aliases:
            isolation.bind_alias(run_dir, alias)
        try:
            yield
        finally:
            for alias in aliases:
                _ignore_errors(isolation.unbind_alias, alias)

    def _run(self, request: Message, run_dir: str) -> Message:
        job = RunJob(self, request, run_dir)
        started = time.monotonic()
        if _stamps is not None:
            _stamps[:] = bytes(len(_stamps))
        self.note("dispatching")
        spare = self.dispatch(request, run_dir)
        self.note("dispatched")
        supervisor = Supervisor(self, spare)
        if job.stdin is not None:
            supervisor.feed_stdin(spare.in_w, job.stdin.encode("utf-8", "surrogateescape"))
        else:
            os.close(spare.in_w)  # end of file at once, like /dev/null
        killed_for = supervisor.watch(started + job.timeout)
        self.note("exited")
        supervisor.finish()
        duration = time.monotonic() - started
        supervisor.drain()
        if self.phases is not None and _stamps is not None:
            for index, phase in enumerate(CHILD_PHASES):
                at, faults = struct.unpack_from("dd", _stamps, 16 * index)
                if at:
                    self.phases[f"child_{phase}"] = at
                    self.phases[f"child_{phase}_faults"] = faults
        if killed_for == "host":
            os._exit(EXIT_HOST_GONE)
        return _reply(supervisor, killed_for, duration, job.kind != "exec")

    def kill_run_tree(self, pid: int, child_done: bool) -> None:
        """Kill every process of the run (as PID 1: every process but itself)."""
        if self.is_init():
            _kill_all_others()
            return
        _ignore_errors(os.killpg, pid, signal.SIGKILL)
        if not child_done:
            _ignore_errors(os.kill, pid, signal.SIGKILL)

    def reap_all(self) -> None:
        """Without namespaces: reap the run, killing the orphans it left, until none is left.

        (In a namespace, kill(-1) has already doomed everything: see
        :meth:`await_previous_run`.)
        """
        while _has_children():  # orphans were re-parented to this subreaper
            _kill_adopted_children()
            time.sleep(0.001)

    def await_previous_run(self) -> None:
        """Wait until the processes of the last run, all killed already, are gone.

        PID 1 answers as soon as everything is killed and reaps afterwards, off the
        critical path; a new run must not start while they still count against the
        sandbox user's process limit.
        """
        if not self.is_init():
            return
        keep = {1, self.spare.pid if self.spare else 1}
        while True:
            _has_children()  # reaps what has exited
            left = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in keep]
            if not left:
                return
            for pid in left:
                _ignore_errors(os.kill, pid, signal.SIGKILL)
            time.sleep(0.0002)

    def is_init(self) -> bool:
        """True in PID 1 of a sandbox namespace, where kill(-1) means "the whole run"."""
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


def _kill_all_others() -> bool:
    """kill(-1) from PID 1 hits every process of the namespace but itself."""
    try:
        os.kill(-1, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def _has_children() -> bool:
    """Reap exited children; True while some are still alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _kill_adopted_children() -> bool:
    """Kill processes whose parent is this subreaper (none mode); True if any were found."""
    me, found = os.getpid(), False
    for name in os.listdir("/proc"):
        if not name.isdigit():
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


# ---------------------------------------------------------------- start-up


def filesystem_plan(config: Message) -> isolation.FilesystemPlan:
    """What runs can read: the interpreter, its evaluation packages and the package cache.

    Called before ``site`` has run (the worker starts with ``-S``), so that nothing of
    the host's site-packages is imported into the worker that warm runs fork from.
    """
    prefixes = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    venv = venv_prefix()
    shown = [os.path.dirname(os.path.realpath(sys.executable)), *prefixes, *([venv] if venv else [])]
    shown += [p for p in sys.path[1:] if p and os.path.exists(p)]  # [0]: the worker's own dir
    if config.get("packages_dir"):
        shown.append(config["packages_dir"])
    size = max(64, 4 * int(config["limits"]["max_file_size_mb"]))
    views = config.get("views")  # found by the sandbox's first worker (~0.2 s of metadata)
    return isolation.FilesystemPlan(
        host_dir=config["host_dir"],
        read_only=[os.path.realpath(p) for p in shown],
        views=views_in_child(visible_distributions(config)) if views is None else views,
        tmpfs_size_mb=size,
        aliases=config.get("aliases") or [],
    )


def views_in_child(allowed: list[str] | None) -> dict[str, list[str]]:
    """:func:`site_views`, found in a child process that exits afterwards: the metadata
    machinery (``importlib.metadata``, ``email``, ``zipfile``, ``csv``...) stays out of
    PID 1, so every worker's runs start from the same, smaller, set of modules."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            write_message(write_fd, site_views(allowed))
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        views = read_message(read_fd)
    finally:
        os.close(read_fd)
        status = os.waitpid(pid, 0)[1]
    if views is None or status != 0:
        raise OSError(errno.EIO, "cannot list the distributions of the site-packages")
    return views


def visible_distributions(config: Message) -> list[str] | None:
    """The distributions runs see (None: all): as configured, except that an interpreter
    given explicitly that turns out to be the host's own (``python3`` through a shim, say)
    is no dedicated environment and shows only the host's evaluation packages."""
    allowed = config.get("site_packages")
    host_prefix = config.get("host_prefix")
    if (
        allowed is None
        and host_prefix
        and os.path.realpath(venv_prefix() or sys.prefix) == os.path.realpath(host_prefix)
    ):
        return list(config.get("host_packages") or [])
    return allowed


def site_views(allowed: list[str] | None) -> dict[str, list[str]]:
    """Each site-packages directory a run could reach, mapped to the entries it may see.

    ``allowed`` None: the interpreter is a dedicated evaluation environment, its own
    site-packages stay whole. Otherwise only the distributions named (and what they
    require) are shown. Any other site-packages (the base interpreter's under a virtual
    environment, the system's) is emptied.
    """
    import site

    venv = venv_prefix()
    own = [os.path.realpath(p) for p in site.getsitepackages([venv] if venv else None)]
    if allowed is None and venv and _includes_system_site(venv):
        own += [os.path.realpath(p) for p in site.getsitepackages([sys.base_prefix, sys.base_exec_prefix])]
    others = site.getsitepackages([sys.base_prefix, sys.base_exec_prefix])
    for base in ("/usr/lib", "/usr/local/lib"):
        for name in _listdir(base):
            if name.startswith("python"):
                others += [f"{base}/{name}/site-packages", f"{base}/{name}/dist-packages"]
    views: dict[str, list[str]] = {os.path.realpath(p): [] for p in others}
    for directory in own:
        if allowed is None:
            views.pop(directory, None)
        else:
            views[directory] = distribution_entries(directory, allowed)
    return {d: names for d, names in views.items() if os.path.isdir(d)}


def _listdir(path: str) -> list[str]:
    return _ignore_errors(os.listdir, path) or []


def venv_prefix() -> str | None:
    """The virtual environment of this interpreter, found as ``site`` would (the worker
    starts with ``-S``, so ``sys.prefix`` is still the base interpreter's)."""
    if sys.prefix != sys.base_prefix:
        return sys.prefix
    bin_dir = os.path.dirname(os.path.abspath(sys.executable))
    for directory in (bin_dir, os.path.dirname(bin_dir)):
        if os.path.isfile(os.path.join(directory, "pyvenv.cfg")):
            return os.path.dirname(bin_dir)
    return None


def _includes_system_site(venv: str) -> bool:
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as handle:
            lines = [line.partition("=") for line in handle]
    except OSError:
        return False
    return any(k.strip() == "include-system-site-packages" and v.strip().lower() == "true" for k, _, v in lines)


def distribution_entries(directory: str, names: list[str]) -> list[str]:
    """Top-level entries of ``directory`` that belong to distributions ``names`` and to
    what they require (extras aside), found in their installed metadata."""
    from importlib import metadata

    found = {_normalise(d.metadata["Name"] or ""): d for d in metadata.distributions(path=[directory])}
    entries: set[str] = set()
    todo, seen = [_normalise(n) for n in names], set()
    while todo:
        name = todo.pop()
        dist = found.get(name)
        if name in seen or dist is None:
            continue
        seen.add(name)
        entries.update(_top_level(dist))
        for requirement in dist.requires or []:
            if "extra" not in requirement.partition(";")[2]:
                todo.append(_normalise(_requirement_name(requirement)))
    return sorted(e for e in entries if os.path.lexists(os.path.join(directory, e)))


def _normalise(name: str) -> str:
    return "-".join(name.replace("_", "-").replace(".", "-").lower().split("-"))


def _requirement_name(requirement: str) -> str:
    end = 0
    while end < len(requirement) and (requirement[end].isalnum() or requirement[end] in "-_."):
        end += 1
    return requirement[:end]


def _top_level(dist: Any) -> set[str]:
    entries = set()
    path = getattr(dist, "_path", None)
    if path is not None:
        entries.add(os.path.basename(str(path)))  # the .dist-info directory
    for file in dist.files or []:
        first = str(file).split("/")[0]
        if first and first != ".." and first != "__pycache__":
            entries.add(first)
    return entries


def _take_protocol_fds() -> tuple[int, int]:
    """Move the pipes off stdin/stdout so that nothing printed can corrupt the protocol."""
    req_fd, resp_fd = os.dup(0), os.dup(1)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    return req_fd, resp_fd


# ---------------------------------------------------------------- preloading

PRELOAD_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
)
"""Set to 1 while preloading (unless set already): BLAS and OpenMP libraries then start
no thread pool that forked run children would inherit without its threads."""
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd"})
"""Native threads that may run in the worker: jemalloc's background thread (pyarrow,
imported by pandas) quiesces itself around fork() and is restarted in the child."""
EXIT_TEARDOWN = frozenset({("torch.library", "_del_library")})
"""``weakref.finalize`` callbacks (module, name) that only undo in-memory state when the
interpreter exits (torch deregisters thousands of operators: 0.1 s). Those registered by
preloaded imports are not run at the exit of runs: nothing outside the process could tell,
and a run that never imported torch would otherwise pay for it."""
PRELOAD_DIR = "preload"
"""Directory (under the run root) that is ``HOME``, ``TMPDIR`` and the working directory
while preloading, as a run's directory is for the run."""


def _threads() -> dict[str, str]:
    """This process's threads but the main one (native ones included): tid -> name."""
    threads = {}
    for tid in _listdir("/proc/self/task"):
        if int(tid) != os.getpid():
            try:
                with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as handle:
                    threads[tid] = handle.read().strip()
            except OSError:  # the thread ended meanwhile
                pass
    return threads


def _import_watched(name: str, capture: int) -> str | None:
    """Import ``name`` with fds 1 and 2 on ``capture``; what makes it unfit to fork from,
    if anything. Variables it adds to (or sets in) the environment stay set."""
    threads, environ, cwd = _threads(), dict(os.environ), os.getcwd()
    offset = os.lseek(capture, 0, os.SEEK_END)
    saved = [os.dup(1), os.dup(2)]
    os.dup2(capture, 1)
    os.dup2(capture, 2)
    try:
        __import__(name)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                _ignore_errors(stream.flush)
    finally:
        for fd, copy in ((1, saved[0]), (2, saved[1])):
            os.dup2(copy, fd)
            os.close(copy)
    if os.lseek(capture, 0, os.SEEK_END) > offset:
        printed = os.pread(capture, 160, offset).decode("utf-8", "replace").strip()
        return f"printed at import (a run would print it): {printed!r}"
    started = sorted(name for tid, name in _threads().items() if tid not in threads and name not in FORK_SAFE_THREADS)
    if started:
        return f"started threads {started} (a forked run would have none of them)"
    removed = sorted(k for k in environ if k not in os.environ)
    if removed:
        return f"removed environment variables {removed}"
    if os.getcwd() != cwd:
        return "changed the working directory"
    return None


def _limit_library_threads() -> None:
    """Libraries that size their pools at first use: one thread, like the BLAS above."""
    torch = sys.modules.get("torch")
    if torch is not None:
        _ignore_errors(torch.set_num_threads, 1)


def _skip_exit_teardown() -> None:
    import weakref

    for info in list(weakref.finalize._registry.values()):  # type: ignore[attr-defined]
        function = info.func
        if (getattr(function, "__module__", None), getattr(function, "__qualname__", None)) in EXIT_TEARDOWN:
            info.atexit = False


def _reseed_in_run_child(server_pid: int) -> None:
    """numpy seeds its global generator from the OS at import; every run must too, not
    inherit one seed from the worker (the ``random`` module reseeds itself at fork)."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is None:
        return

    def reseed() -> None:
        if os.getppid() == server_pid:  # a run child, not a process a run forked
            numpy_random.seed()

    os.register_at_fork(after_in_child=reseed)


def preload(names: list[str], directory: str) -> Message:
    """Import ``names`` before runs are forked; a report of what happened (never raises).

    A module is kept only if its import leaves the worker fit to fork runs from: it
    printed nothing, started no thread (but :data:`FORK_SAFE_THREADS`), removed no
    environment variable and did not change the working directory. One that did is
    reported under ``unfit`` (the host then starts workers without it); one that fails
    to import, under ``failed``. Variables the imports set (scikit-learn sets
    ``KMP_DUPLICATE_LIB_OK`` and ``KMP_INIT_AT_FORK``) are reported under
    ``environment`` and set in every run, unless the run's own environment sets them.
    ``directory`` is ``HOME``, ``TMPDIR`` and the working directory meanwhile.
    """
    report: Message = {"loaded": [], "failed": {}, "unfit": {}, "seconds": {}, "environment": {}}
    if not names:
        return report
    environ, cwd = dict(os.environ), os.getcwd()
    preload_env = {"HOME": directory, "TMPDIR": directory, **{k: "1" for k in PRELOAD_THREAD_ENV if k not in environ}}
    os.makedirs(directory, 0o755, exist_ok=True)
    capture = os.memfd_create("gym-repost-preload")
    try:
        for name in names:
            os.environ.clear()  # as it was, for each import (and its check) alike
            os.environ.update(environ, **preload_env)
            os.chdir(directory)
            started = time.monotonic()
            try:
                unfit = _import_watched(name, capture)
            except BaseException as exc:
                report["failed"][name] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            report["seconds"][name] = round(time.monotonic() - started, 3)
            if unfit:
                report["unfit"][name] = unfit
                continue
            report["loaded"].append(name)
            report["environment"].update(
                {k: v for k, v in os.environ.items() if k not in preload_env and environ.get(k) != v}
            )
    finally:
        os.close(capture)
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
    _limit_library_threads()
    _skip_exit_teardown()
    _reseed_in_run_child(os.getpid())
    return report


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
        preloaded = preload(config.get("preload") or [], f"{server.run_root}/{PRELOAD_DIR}")
        server.preload_env = preloaded["environment"]
        sys.path_importer_cache.clear()  # the worker's own directory, out of sight now (after preloading)
        gc.freeze()  # children's collections then skip (and do not copy) the server's objects
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


def _raise_host_gone(signum: int, frame: object) -> None:
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
