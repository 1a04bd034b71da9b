"""The zygote of :mod:`testfile` (inside the sandbox): a fresh interpreter started before
any test code runs, which never holds the original focal file. It keeps a snapshot of the
run directory without the focal file and forks the replayer and the variant children
(the calibration, mutants, decoys), one at a time, observing their exit statuses.

The monitor starts it with ``execv``, not ``fork``: the monitor's memory holds the focal
source (the sandbox wrote it into the run directory, the configuration carries it), and
a child forked from it would too. A variant child gets the focal file of its slot from
the monitor, written on disk at the zygote's request (``slot``), and nothing else of it.
Before each child, :func:`clean_run` kills every process the test code left and empties
the run directory (and ``/tmp``, ``/dev/shm`` where the run has them to itself), so that
no copy of the original, nor of another variant, waits anywhere for it; a variant child
cannot use System V IPC, POSIX message queues or kernel keyrings (:func:`forbid_ipc`),
where a copy could outlive the processes.
"""

import gc
import json
import os
import select
import shutil
import signal
import sys
import time

try:
    from . import protocol
    from .testfile_replay import MESSAGE_CHARS, replayer_main
    from .testfile_session import INI_NAME, longrepr_text, summary_line
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]
    from _gym_repost_testfile_replay import MESSAGE_CHARS, replayer_main  # type: ignore[no-redef,import-not-found]
    from _gym_repost_testfile_session import INI_NAME, longrepr_text, summary_line  # type: ignore[no-redef,import-not-found]

SLOTS = ".gym_repost_slots"
_CPU_POLL = 0.02
"""Seconds between two readings of a running child's CPU time."""


# --------------------------------------------------------------------------- zygote


def main():
    """The zygote's process, started by the monitor: ``python3 THIS_FILE COMMANDS REPLIES``."""
    commands, replies = int(sys.argv[1]), int(sys.argv[2])
    undumpable()
    reader = _Commands(commands)
    config = reader.next()
    if config is None or config.get("cmd") != "config":
        os._exit(0)
    zygote_main(config, reader, replies)


def zygote_main(config, commands, replies):
    """Serve the monitor's questions; never import the focal module or the test file."""
    try:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        root = os.getcwd()
        import coverage  # noqa: F401 - imported before any test code can plant a module of that name
        import pytest

        _COMPAT_ARGS[:] = protocol.pytest_compat_args(pytest)
        _preimport_pytest_plugins()
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        snapshot = _snapshot(root, config)
        zygote = _ZygoteServer(config, root, snapshot, commands, replies)
        zygote.pytest_config = _prepared_pytest_config(config)
        signal.signal(signal.SIGTERM, zygote.terminate)
        gc.collect()
        gc.freeze()  # children's collections then skip (and do not copy) the zygote's objects
        zygote.reply({"reply": "ready"})
        while True:
            command = commands.next()
            if command is None:
                break
            zygote.serve(command)
    except BaseException:
        pass
    os._exit(0)


class _Commands:
    """The monitor's commands: JSON lines on a pipe."""

    def __init__(self, fd):
        self.fd, self.buffered = fd, b""

    def next(self):
        """The next command; None at the end of the pipe."""
        while b"\n" not in self.buffered:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buffered += chunk
        line, self.buffered = self.buffered.split(b"\n", 1)
        command = decode_event(line)
        return command if command is not None else self.next()


def undumpable():
    """Make this process (and what it forks) non-dumpable: no ptrace, no /proc/PID/fd or mem
    by peers (processes of the same user: the test code's)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError, ImportError):
        pass


def _preimport_pytest_plugins():
    """Import pytest's own plugins once, so that every variant child does not."""
    import importlib

    import _pytest.config

    for name in getattr(_pytest.config, "default_plugins", ()):
        try:
            importlib.import_module("_pytest." + name)
        except ImportError:
            pass


def _snapshot(root, config):
    """Every file of the run directory before any test code ran, by relative path (bytes),
    but the focal file (never read here)."""
    files = {}
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", SLOTS)]
        for name in names:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, root)
            ours = relative.startswith("_gym_repost_") or name.startswith(".gym_repost")
            if ours or relative == config["focal_file"]:
                continue
            try:
                with open(path, "rb") as fh:
                    files[relative] = fh.read()
            except OSError:
                continue
    return files


class _ZygoteServer:
    def __init__(self, config, root, snapshot, commands, replies):
        self.config, self.root, self.snapshot = config, root, snapshot
        self.commands, self.replies = commands, replies
        self.children = {}
        self.pytest_config = None

    def reply(self, message):
        protocol.write_all(self.replies, (json.dumps(message) + "\n").encode("utf-8", "surrogatepass"))

    def terminate(self, signum, frame):
        for pid in list(self.children):
            kill_group(pid)
        os._exit(0)

    def serve(self, command):
        kind = command.get("cmd")
        if kind == "replay":
            self.reply(self._replay(command))
        elif kind == "calibrate":
            self.reply(self._calibrate(command))
        elif kind == "variants":
            self._variants(command)

    # ---- replay

    def _replay(self, command):
        pid, fd = _fork(lambda write_fd: replayer_main(self, command, write_fd))
        limit = self.config["timeout"]
        data, status, _, _ = self._collect(pid, fd, {"cpu": limit, "wall": self.config["wall_factor"] * limit})
        try:
            reply = json.loads(data.decode("utf-8"))
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            return {"error": "the replay %s" % _ended(status)}
        return reply

    # ---- variant children

    def _slot(self, variant_id):
        """A clean run and the slot's directory, rebuilt from the snapshot, with its focal file
        (the variant's source, or the original for None) written there by the monitor."""
        clean_run(self.root, self.config["private"], keep=[os.getpid()])
        directory = _build_slot(self, 0)
        self.reply({"reply": "slot", "directory": directory, "id": variant_id})
        answer = self.commands.next()
        if not isinstance(answer, dict) or answer.get("cmd") != "slot_ready":
            raise EOFError("the monitor did not write the slot's focal file")
        return directory

    def _calibrate(self, command):
        directory = self._slot(None)
        started = time.monotonic()
        pid, fd = _fork(lambda write_fd: _variant_main(self, directory, command["nodeids"], False, write_fd))
        data, status, cpu, _ = self._collect(pid, fd, command)
        seconds = time.monotonic() - started
        try:
            reply = json.loads(data.decode("utf-8"))
        except ValueError:
            reply = None
        passed = reply.get("passed") if isinstance(reply, dict) else None
        if not isinstance(passed, list):
            detail = "the calibration run %s" % _ended(status)
            return {"passed": [], "seconds": seconds, "cpu": cpu, "detail": detail}
        return {"passed": [n for n in passed if isinstance(n, str)], "seconds": seconds, "cpu": cpu}

    def _variants(self, command):
        """Run the plan's variants one at a time; each is stopped at its CPU limit (``cpu``)
        or its wall-clock guard (``wall``), whichever comes first: a timeout.

        One at a time: two variant children alive together could tell each other their
        sources, and two mutants' sources give the original's away."""
        for item in command["plan"]:
            directory = self._slot(item["id"])
            nodeids = item["nodeids"]
            pid, fd = _fork(lambda write_fd, d=directory, ids=nodeids: _variant_main(self, d, ids, True, write_fd))
            data, status, cpu, over = self._collect(pid, fd, item)
            if over is not None:
                verdict = {"id": item["id"], "status": "timeout", "killed_by": None, "tests": len(item["nodeids"])}
                verdict["detail"] = over
            else:
                verdict = _verdict({"item": item, "data": data}, status)
            self.reply({"reply": "variant", "verdict": verdict, "cpu": cpu})

    def _collect(self, pid, fd, limits):
        """Read a child's pipe to its end, then reap it; stopped at its limits (``cpu``
        seconds of CPU time, a :class:`~protocol.WallGuard` of ``wall`` seconds), checked at
        every wake-up, however much it writes. (data, exit status or None when stopped, CPU
        seconds, why it was stopped or None)."""
        self.children[pid] = True
        guard = protocol.WallGuard(limits["wall"], pid)
        data, over = b"", None
        while True:
            ready, _, _ = select.select([fd], [], [], _poll_wait(guard))
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                data += chunk
            over = _over_limit(pid, limits, guard)
            if over is not None:
                break
        kill_group(pid)
        os.close(fd)
        _, status, usage = os.wait4(pid, 0)
        self.children.pop(pid, None)
        return data, (None if over else status), usage.ru_utime + usage.ru_stime, over


def _poll_wait(guard):
    """Seconds to wait for a child's output: to its guard, at most :data:`_CPU_POLL`; once
    past it (a stretched guard), :data:`_CPU_POLL`, not a busy loop."""
    left = guard.left()
    return min(left, _CPU_POLL) if left > 0 else _CPU_POLL


def _over_limit(pid, limits, guard):
    """Why a running child is to be stopped, None while it is within its limits (see
    :func:`protocol.over_limit`: a child that computes on a loaded machine is not stopped by
    the wall clock, one that waits is)."""
    over = protocol.over_limit(pid, limits["cpu"], guard)
    if over == "cpu":
        return "stopped at its CPU limit (%.2f s)" % limits["cpu"]
    if over == "wall":
        return "stopped by its wall-clock guard (%.1f s) while waiting" % limits["wall"]
    return None


def _ended(status):
    if status is None:
        return "overran its time"
    if os.WIFSIGNALED(status):
        return "was killed by signal %d" % os.WTERMSIG(status)
    return "ended without a report (exit status %d)" % os.WEXITSTATUS(status)


def _verdict(entry, status):
    """The zygote's verdict: the child's exit status; its own words only name the test."""
    item = entry["item"]
    result = {"id": item["id"], "status": "killed", "killed_by": None, "tests": len(item["nodeids"])}
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        result["status"] = "survived"
        return result
    try:
        said = json.loads(entry["data"].decode("utf-8"))
    except ValueError:
        said = None
    if isinstance(said, dict) and isinstance(said.get("failed"), str):
        result["killed_by"] = said["failed"][:MESSAGE_CHARS]
        if isinstance(said.get("detail"), str):
            result["detail"] = said["detail"][:MESSAGE_CHARS]
    elif os.WIFSIGNALED(status):
        result["detail"] = "the run was killed by signal %d" % os.WTERMSIG(status)
    else:
        result["detail"] = "the run ended with exit status %d" % os.WEXITSTATUS(status)
    return result


def _fork(body):
    """Fork a child that runs ``body(write_fd)`` in its own process group; (pid, read_fd)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            os.setpgid(0, 0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            body(write_fd)
        finally:
            os._exit(70)
    os.close(write_fd)
    return pid, read_fd


# --------------------------------------------------------------------------- variant child


def _variant_main(server, directory, nodeids, stop_first, write_fd):
    """Run the selected tests in the slot ``directory`` (its focal file on disk is the
    variant's source); exit 0 when all pass."""
    gc.disable()  # a short life: collecting would only copy pages shared with the zygote
    config = server.config
    forbid_ipc()
    os.chdir(directory)
    _set_path(server.root, directory, config["python_path"])
    sys.dont_write_bytecode = True
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    with open(INI_NAME, "w", encoding="utf-8") as fh:
        fh.write("[pytest]\n")
    plugin = _Selection(nodeids)
    args = [
        os.path.join(directory, config["test_path"]),
        "-q",
        "-c",
        os.path.join(directory, INI_NAME),
        "--rootdir",
        directory,
        "--tb=short",
        *_pytest_plugin_args(config),
        *_COMPAT_ARGS,
    ] + (["-x"] if stop_first else [])
    code = 1
    try:
        code = _run_pytest(server.pytest_config, args, plugin)
    finally:
        said = {
            "passed": [n for n in nodeids if plugin.outcomes.get(n) == "passed"],
            "failed": plugin.failed,
            "detail": plugin.detail,
        }
        try:
            protocol.write_all(write_fd, json.dumps(said).encode("utf-8", "surrogatepass"))
        except (OSError, ValueError, TypeError):
            pass
        os._exit(0 if code == 0 and plugin.ran and plugin.failed is None else 1)


def _build_slot(server, slot):
    """The slot's directory, rebuilt from the snapshot: every file but the focal file, which
    the monitor writes (see :meth:`_ZygoteServer._slot`)."""
    base = os.path.join(server.root, SLOTS)
    directory = os.path.join(base, str(slot))
    if os.path.lexists(directory):
        shutil.rmtree(directory, onerror=_force_remove)
    if os.path.lexists(directory):  # a test made it unremovable: another name, same form
        directory = os.path.join(base, "%d-%d" % (slot, time.monotonic_ns()))
    focal = server.config["focal_file"]
    for relative, data in server.snapshot.items():
        if relative != focal:
            _write(os.path.join(directory, relative), data)
    os.makedirs(os.path.dirname(os.path.join(directory, focal)), exist_ok=True)
    return directory


# --------------------------------------------------------------------------- a clean run


def clean_run(root, private, keep=()):
    """Kill every process the test code may have left, and remove what it may have left on
    disk: the run directory's files (the snapshot holds them), and, where the run has them
    to itself (``private``: a sandbox with its own PID namespace and scratch space), ``/tmp``
    and ``/dev/shm``. Kept: this process, its ancestors (the monitor, the sandbox's) and
    ``keep`` (the zygote)."""
    if private:
        _kill_others({os.getpid(), *keep, *_ancestors()})
    for directory in [root, *(("/tmp", "/dev/shm") if private else ())]:
        _empty(directory)


def _ancestors():
    found, pid = [], os.getpid()
    while pid > 1:
        pid = _parent(pid)
        found.append(pid)
    return found


def _parent(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _kill_others(keep):
    """SIGKILL every process this one may signal but ``keep``, pass after pass, until a pass
    finds none it has not killed already (one killed cannot fork any more)."""
    done = set(keep)
    while True:
        fresh = [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) not in done]
        if not fresh:
            return
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # gone, or not ours to signal (the sandbox's own processes)
                pass
        done.update(fresh)


def _empty(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=_force_remove)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


_IPC_CALLS = {
    # x86-64: shmget shmat shmctl semget semop semctl shmdt msgget msgsnd msgrcv msgctl semtimedop
    # mq_open..mq_getsetattr add_key request_key keyctl
    0xC000003E: (29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220, 240, 241, 242, 243, 244, 245, 248, 249, 250),
    # i386: ipc, mq_open..mq_getsetattr, add_key request_key keyctl, semget..msgctl
    0x40000003: (117, 277, 278, 279, 280, 281, 282, 286, 287, 288, *range(393, 403)),
    # aarch64: mq_open..mq_getsetattr, msgget..shmdt, add_key request_key keyctl
    0xC00000B7: (*range(180, 198), 217, 218, 219),
}


def forbid_ipc():
    """Fail System V IPC, POSIX message queues and kernel keyrings with EPERM in this process
    and what it starts (a seccomp filter): objects there outlive the processes that made
    them, and one variant child could leave its source there for the next. Best effort: a
    kernel without seccomp (or a sandbox without no_new_privs) leaves them open."""
    try:
        import ctypes

        class Filter(ctypes.Structure):
            _fields_ = [
                ("code", ctypes.c_ushort),
                ("jt", ctypes.c_ubyte),
                ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint32),
            ]

        class Program(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

        load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
        allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
        code = [(load, 0, 0, 4)]
        for arch, calls in _IPC_CALLS.items():
            checks = [(jeq, -1, 0, nr) for nr in calls]
            if arch == 0xC000003E:
                checks.append((jge, -1, 0, 0x40000000))  # the x32 ABI
            code += [(jeq, 0, len(checks) + 2, arch), (load, 0, 0, 0), *checks, (ret, 0, 0, allow)]
        code += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
        deny_at = len(code) - 1
        program = (Filter * len(code))(
            *(Filter(op, deny_at - i - 1 if jt == -1 else jt, jf, k) for i, (op, jt, jf, k) in enumerate(code))
        )
        prog = Program(len(code), program)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        libc.prctl(22, 2, ctypes.c_void_p(ctypes.addressof(prog)), 0, 0)  # PR_SET_SECCOMP, filter
    except (OSError, AttributeError, ImportError, ValueError):
        pass


def _force_remove(function, path, excinfo):
    try:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        function(path)
    except OSError:
        pass


def _write(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def _set_path(root, directory, python_path):
    """``sys.path`` without the run directory, with the slot's entries in front."""

    def inside(entry):
        full = os.path.realpath(entry or ".")
        return full == root or full.startswith(root + os.sep)

    sys.path[:] = [p for p in sys.path if not inside(p)]
    for entry in reversed(python_path):
        sys.path.insert(0, os.path.normpath(os.path.join(directory, entry)))


_QUIET_PLUGINS = (
    "-p",
    "no:cacheprovider",
    "-p",
    "no:faulthandler",
    "-p",
    "no:unraisableexception",
    "-p",
    "no:threadexception",
    "-p",
    "no:junitxml",
    "-p",
    "no:pastebin",
    "-p",
    "no:stepwise",
)
"""Plugins a variant child does without: they report, they do not change outcomes (the
unraisable-exception one runs five full collections of the heap per session)."""


_COMPAT_ARGS: list[str] = []
""":func:`protocol.pytest_compat_args`, filled in once pytest is imported."""


def _pytest_plugin_args(config):
    args = list(_QUIET_PLUGINS)
    for name in config.get("plugins", []):
        args += ["-p", name]
    return args


def _prepared_pytest_config(config):
    """pytest's configuration object with its plugins registered, made once in the zygote.

    Registering pytest's thirty plugins is half of what a variant child would spend
    before its first test; made here, before any repository or test code is imported
    (nothing in it depends on them: the arguments are parsed, the ini file and the
    conftest files read, in each child). None when pytest's internals differ.
    """
    try:
        from _pytest.config import get_config

        prepared = get_config(_pytest_plugin_args(config))
        hook = prepared.pluginmanager.hook
        return prepared if hasattr(hook, "pytest_cmdline_parse") and hasattr(hook, "pytest_cmdline_main") else None
    except Exception:
        return None


def _run_pytest(prepared, args, plugin):
    """Run pytest with ``args`` and ``plugin`` in this child: its exit code."""
    if prepared is None:
        import pytest

        return pytest.main(args, plugins=[plugin])
    manager = prepared.pluginmanager
    manager.register(plugin, "gym_repost_selection")
    config = manager.hook.pytest_cmdline_parse(pluginmanager=manager, args=args)
    try:
        return config.hook.pytest_cmdline_main(config=config)
    finally:
        config._ensure_unconfigure()


class _Selection:
    """Runs only the selected tests, in their order; notes outcomes and the first failure."""

    def __init__(self, nodeids):
        self.nodeids = list(nodeids)
        self.wanted = set(nodeids)
        self.outcomes = {}
        self.failed = None
        self.detail = None
        self.ran = False

    def pytest_collection_modifyitems(self, session, config, items):
        missing = protocol.keep_only(config, items, self.wanted)
        self.ran = not missing
        if missing and self.failed is None:
            self.failed = missing[0]
            self.detail = "the test was not collected"

    def pytest_collectreport(self, report):
        if report.failed and self.failed is None:
            self.failed = report.nodeid or "the test file"
            self.detail = "collecting the tests failed: " + summary_line(longrepr_text(report.longrepr))

    def pytest_runtest_logreport(self, report):
        previous = self.outcomes.get(report.nodeid, "passed")
        if report.failed:
            self.outcomes[report.nodeid] = "failed"
            if self.failed is None:
                self.failed = report.nodeid
        elif report.skipped and previous == "passed":
            self.outcomes[report.nodeid] = "skipped"
        else:
            self.outcomes.setdefault(report.nodeid, "passed")


def decode_event(line):
    try:
        event = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


if __name__ == "__main__":
    main()
