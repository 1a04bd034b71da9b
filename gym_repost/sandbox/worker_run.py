"""The worker's run: the host's programs held as bytecode; the run child (a run's files, limits,
identity and command: warm python runs in-process, anything else via execve); and PID 1's
supervision of it (deadline, output caps, the kill).

A sibling of :mod:`worker`: imported as ``worker_run`` inside the worker and as
``gym_repost.sandbox.worker_run`` on the host.
"""

from __future__ import annotations

import binascii
import builtins
import errno
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
    from collections.abc import Sequence
    from typing import Any, NoReturn, TypeVar

    from gym_repost.sandbox.worker import Server, Spare

    Message = dict[str, Any]
    _T = TypeVar("_T")

if __package__:
    from gym_repost.sandbox import isolation
    from gym_repost.sandbox.worker_io import (
        _CHUNK,
        _PYTHON_NAMES,
        HEADER,
        OUTPUT_KILL_FACTOR,
        Capture,
        _ignore_errors,
        apply_limits,
        encode_message,
        plan_command,
        read_message,
        write_all,
    )
else:  # inside the worker its siblings are top-level modules (no gym_repost)
    import isolation  # type: ignore[no-redef,import-not-found]
    from worker_io import (  # type: ignore[no-redef,import-not-found]
        _CHUNK,
        _PYTHON_NAMES,
        HEADER,
        OUTPUT_KILL_FACTOR,
        Capture,
        _ignore_errors,
        apply_limits,
        encode_message,
        plan_command,
        read_message,
        write_all,
    )


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


IMPORT_AHEAD = ("_gym_repost_protocol.py", "_gym_repost_values.py")
"""Program modules a spare child imports ahead, in this order, when the last run shipped
them (~0.6 ms of a harness run here). Their top level only defines: it reads no clock,
process or environment, so imported a moment early they are what the run's import makes."""
_AHEAD: tuple[str, list[str]] | None = None
"""In a spare child: the run directory modules were imported ahead for, and their names."""


def import_ahead(run_dir: str, names: Sequence[str]) -> None:
    """In a spare child, while idle: the modules of :data:`IMPORT_AHEAD` among the programs
    ``names`` (those the last run shipped), made as an import of them from ``run_dir`` would
    make them. Whether the run keeps them is decided when it comes: :func:`settle_ahead`."""
    global _AHEAD
    from importlib._bootstrap import module_from_spec
    from importlib._bootstrap_external import spec_from_file_location

    imported: list[str] = []
    try:
        for name in IMPORT_AHEAD:
            source = PROGRAM_NAMES.get(name)
            if name not in names or source is None:
                continue
            path, module_name = f"{run_dir}/{name}", name[: -len(".py")]
            spec, code = spec_from_file_location(module_name, path), program_code(source, path)
            if spec is None or code is None:
                raise ImportError(path)
            module = module_from_spec(spec)
            sys.modules[module_name] = module
            imported.append(module_name)
            exec(code, module.__dict__)
    except Exception:  # a broken install: the run imports them itself
        for module_name in imported:
            sys.modules.pop(module_name, None)
        return
    _AHEAD = (run_dir, imported) if imported else None


def rehearse_recording() -> None:
    """After :func:`import_ahead` in a spare child: walk, harmlessly, the standard library
    paths a harness run records calls through (pickled arguments in base64, JSON digests,
    SHA-1): their first use in a run child costs ~0.15 ms of copy-on-write faults. Only
    modules already imported are used; none is changed."""
    modules: list[Any] = [sys.modules.get(name) for name in ("base64", "hashlib", "pickle", "threading")]
    if any(module is None for module in modules):
        return
    base64, hashlib, pickle, threading = modules
    blob = base64.b64encode(pickle.dumps(((1, "a", [2.5]), {"k": None}), protocol=4)).decode("ascii")
    args, kwargs = pickle.loads(base64.b64decode(blob))
    text = json.dumps([["tuple", [1, "a"]], {"k": None}], separators=(",", ":"))
    hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
    repr((args, kwargs))
    local = threading.local()
    local.depth = getattr(local, "depth", 0) + 1


def settle_ahead(job: RunJob) -> bool:
    """In the run child: keep the modules imported ahead only for a run of one of the host's
    programs, in the directory they were made for, that ships them all (its own import would
    load these very files); any other run forgets them and imports what it finds. True when
    the protocol module is kept."""
    if _AHEAD is None:
        return False
    run_dir, modules = _AHEAD
    keep = (
        run_dir == job.run_dir
        and job.kind == "script"
        and os.path.basename(job.target) in job.programs
        and os.path.dirname(os.path.realpath(job.target)) == os.path.realpath(run_dir)
        and all(f"{name}.py" in job.programs for name in modules)
    )
    if not keep:
        for name in modules:
            module = sys.modules.pop(name, None)
            if module is not None:  # nor are they found through their functions (gc.get_objects())
                module.__dict__.clear()
    return keep and "_gym_repost_protocol" in modules


_OWN_NAMES: list[str] | None = None
"""In a spare child: the names of :func:`own_module_names`, found while idle."""


def own_module_names() -> list[str]:
    """The names under which ``sys.modules`` holds the worker's own modules (a run forgets
    them). Looking touches every module, a copy-on-write fault each after the fork (~0.7 ms
    here): a spare child looks while idle, when it can. Nothing it does after adds any."""
    ours = [m for n in WORKER_MODULES for m in (sys.modules.get(n), sys.modules.get(f"gym_repost.sandbox.{n}")) if m]
    return [n for n, m in sys.modules.items() if any(m is o for o in ours)]


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
        self.env = server.run_environment(run_dir, request.get("env") or {}, request.get("packages"))
        self.kind, self.target, self.args = plan_command(self.argv, self.env, server.warm)
        self.clock_ahead_ns = int(request.get(CLOCK_REQUEST_KEY) or 0)
        self.stretch = "cpu_seconds" in (request.get("limits") or {})
        """The timeout is a guard that stretches while the run computes: a run whose caller
        gave it a CPU-time limit of its own (see :meth:`Supervisor.watch`)."""


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
WORKER_MODULES = ("worker", "worker_io", "worker_run", "worker_startup", "worker_zygote", "isolation")
"""The worker's own modules: forgotten in a run child, so a program's own modules of those names load."""
_stamps: Any = None


def set_stamps(buffer: Any) -> None:
    """Profile mode: the shared buffer run children stamp their phases into (PID 1 reads it)."""
    global _stamps
    _stamps = buffer


def stamps() -> Any:
    """The shared buffer of :func:`set_stamps`, or None outside profile mode."""
    return _stamps


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
        if server.namespaced:  # System V IPC objects and message queues of its own: none outlives the run
            isolation.unshare(isolation.CLONE_NEWIPC)
        if server.warm and not server.must_exec:  # an exec'd command gains nothing from these
            # Each step is done ahead only while no job waits (one was already there, or came
            # meanwhile: back-to-back runs): the rehearsals are then skipped, and the run does
            # the rest itself, at the same cost.
            if not _job_waiting(server):
                rehearse(server)
            if server.next_run_dir is not None:
                relocate_ahead(server.next_run_dir, server.recent_programs)
                if not _job_waiting(server):
                    import_ahead(server.next_run_dir, server.recent_programs)
                    if _AHEAD is not None and not _job_waiting(server):
                        rehearse_recording()
            if not server.request_waiting:
                global _OWN_NAMES
                _OWN_NAMES = own_module_names()
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


def _job_waiting(server: Server) -> bool:
    """In a spare child: a request was waiting when it was forked, or PID 1 has handed over
    the job since (it waits on the control pipe)."""
    if server.request_waiting:
        return True
    try:
        return bool(select.select([_CONTROL_FD], [], [], 0)[0])
    except (OSError, ValueError):
        return False


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
    if server.namespaced:
        isolation.forbid_keyrings()
    os.environ.clear()
    os.environ.update(job.env)
    for key, value in server.preload_env.items():  # what preloaded imports set (see preload())
        os.environ.setdefault(key, value)
    if job.clock_ahead_ns:
        set_clock_ahead(job.clock_ahead_ns)
    stamp(2)
    if job.kind != "exec" and not server.must_exec and _runnable_in_process(job):
        run_in_process(server, job)
    exec_command(server, job)


CLOCK_SYMBOL = "gym_repost_clock_ahead_ns"
"""The clock library's offset (``gym_repost.sandbox.clock.SYMBOL``)..."""
CLOCK_REQUEST_KEY = "clock_ahead_ns"
"""... and the request field that sets it (``gym_repost.sandbox.clock.REQUEST_KEY``)."""


def set_clock_ahead(nanoseconds: int) -> None:
    """Put this run child's wall clock ``nanoseconds`` ahead: the offset of the clock library
    the worker preloads (see :mod:`gym_repost.sandbox.clock`; the programs the run starts
    read it from their environment). ctypes is imported for it and forgotten again, as a
    fresh interpreter has not imported it. Without the library the run fails (exit 70),
    rather than run on the real clock."""
    before = set(sys.modules)
    try:
        import ctypes

        ctypes.c_longlong.in_dll(ctypes.CDLL(None), CLOCK_SYMBOL).value = nanoseconds
    except (ImportError, OSError, ValueError) as exc:
        _write_stderr(f"gym-repost sandbox: cannot put the run's clock ahead ({exc})\n")
        os._exit(70)
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]


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
    for name in _OWN_NAMES if _OWN_NAMES is not None else own_module_names():
        sys.modules.pop(name, None)  # a program may have its own worker.py, isolation.py...
    if settle_ahead(job):
        # the host's program tells PID 1 its exit status before it exits (protocol.exit)
        sys.modules["_gym_repost_protocol"].exit_pipe = (_RUN_PID, _STATUS_FD, *_STATUS_PIPE)  # type: ignore[attr-defined]
    if "tempfile" in sys.modules:  # forget a temp dir chosen before TMPDIR pointed here
        sys.modules["tempfile"].tempdir = None  # type: ignore[attr-defined]
    if PROGRAM_CODE:
        _use_program_code_on_import()
    extra = [os.path.abspath(p) for p in job.env.get("PYTHONPATH", "").split(":") if p]
    sys.orig_argv = [sys.executable, *job.argv[1:]]
    for fd, printed in zip((1, 2), server.preload_output):  # see worker_startup.preload(replay=True)
        _ignore_errors(write_all, fd, printed)
    status = _execute_main(job, extra, server.base_path)
    os._exit(_finalize(status))


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

WALL_STRETCH = 10.0
"""A run's wall-clock guard stretches up to this many times while it computes (the programs'
``protocol.WALL_STRETCH``, which the host's wait allows for)."""
REAP_WAIT = 10.0
"""Seconds PID 1 waits for the zygote to report that a run child ended."""


def _wait_orphan(pid: int) -> int | None:
    """The wait status of a run child whose parent, the zygote, died: it is handed to PID 1
    (a moment after the zygote's end is seen). None if it still runs."""
    for _ in range(1000):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not handed over yet
            time.sleep(0.001)
            continue
        return status if done else None
    return None


class Supervisor:
    """Watches one run child: feeds stdin, captures output, enforces the deadline."""

    def __init__(self, server: Server, spare: Spare) -> None:
        self.server = server
        self.pid = spare.pid
        self.zygote = None if spare.own else server.zygote
        """The child's parent, which reports its exit status (None: PID 1 is the parent)."""
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

    def watch(self, started: float, timeout: float, stretch: bool = False) -> str | None:
        """Wait until the child exits (or says it does); returns why it was killed, or None.

        ``stretch``: the timeout is a wall-clock guard beside a CPU-time limit that decides
        (the run's own ``cpu_seconds``): past it, a run some process of which is runnable
        (computing, or waiting for a CPU on a loaded machine) goes on, checked every tenth
        of the timeout, up to :data:`WALL_STRETCH` times it; the CPU limit stops one that
        computes forever. So how busy the machine is changes no such run's outcome."""
        deadline = started + timeout
        stretch_until = started + (WALL_STRETCH * timeout if stretch else timeout)
        while self.status is None and self.reported is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if time.monotonic() < stretch_until and self.server.run_busy(self.pid):
                    deadline = time.monotonic() + max(0.02, 0.1 * timeout)
                    continue
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
        if fd == self.pidfd:  # the child ended
            self._reap_child(0 if self.zygote is not None else os.WNOHANG)
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
        if self.zygote is not None:  # its parent reports its end
            status = self.zygote.exit_status(self.pid, 0.0 if flags == os.WNOHANG else REAP_WAIT)
            if status is not None:
                self.status = status
            elif self.zygote.gone:  # killed (a run in a user namespace can): the child is PID 1's now
                self.zygote = None
                self.status = _wait_orphan(self.pid)
            return
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
