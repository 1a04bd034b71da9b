"""The program side of the protocol between gym-repost and its programs (standard library only).

Copied into every run directory as ``_gym_repost_protocol.py``, beside the program, which
imports it. The host side is :mod:`gym_repost.sandbox.programs`; the protocol itself is
described in :mod:`gym_repost.programs`.
"""

import json
import os
import random
import re
import sys
import time

MARK = "@@gym-repost@@"
"""Prefix of every line of the protocol on standard output."""
RESULT = MARK + "result "
"""A result line: ``RESULT`` and a JSON object."""
RESULT_COMPRESSED = MARK + "result-z "
"""A compressed result line: ``RESULT_COMPRESSED`` and the base64 of the zlib of the JSON."""
END = MARK + "end "
"""The completion line: ``END`` and the one-time token, right after the result line."""
_MAX_HEADER = 20
COMPRESS_ABOVE = 16384
"""A result asked to be compressed is, when its JSON is longer than this (characters)."""

_token_fd = None
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
exit_pipe = None
"""Set by the local sandbox's worker in a run whose modules it imported ahead: (process id,
descriptor, device, inode) of the pipe on which its PID 1 waits for the run's exit status
(see :func:`exit`); None elsewhere."""


def exit(status):
    """``os._exit(status)``, telling the local sandbox's PID 1 first where it listens
    (:data:`exit_pipe`): it then answers while the kernel tears this process down, as it
    does for a program that returns. Only the run's own process, on the very pipe, tells."""
    pipe = exit_pipe
    if pipe is not None and os.getpid() == pipe[0]:
        try:
            info = os.fstat(pipe[1])
            if (info.st_dev, info.st_ino) == pipe[2:]:
                os.write(pipe[1], bytes((status & 0xFF,)))
        except OSError:
            pass
    os._exit(status)


def _read_exact(fd, size):
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("standard input ended inside the configuration")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_config(token=False):
    """The program's configuration, read from standard input, which is /dev/null afterwards.

    Standard input holds the configuration's length in bytes on a line, the configuration
    (one line of JSON), and, for programs that use one, the completion token's line. The
    configuration is read to its last byte and not one byte further, so the token stays in
    the pipe: with ``token=True`` on a private descriptor for :func:`read_token` (a child
    forked before that closes its copy with :func:`drop_token`).
    """
    global _token_fd
    header = b""
    while not header.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte or len(header) > _MAX_HEADER:
            raise EOFError("standard input holds no configuration")
        header += byte
    data = _read_exact(0, int(header) + 1)
    if token:
        _token_fd = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return json.loads(data.decode("utf-8"))


def read_token():
    """The one-time completion token (the line after the configuration); read once."""
    global _token_fd
    fd, _token_fd = _token_fd, None
    data = b""
    while fd is not None and not data.endswith(b"\n"):
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    if fd is not None:
        os.close(fd)
    return data.decode("utf-8", "replace").strip()


def drop_token():
    """Close this process's copy of the token's descriptor, unread (in a forked child)."""
    global _token_fd
    if _token_fd is not None:
        try:
            os.close(_token_fd)
        except OSError:
            pass
        _token_fd = None


def keep_stdout():
    """A copy of standard output on a high descriptor, for the result: the code a program runs
    may close the low ones (``open(1)`` wraps, and then closes, standard output), which a
    search that tries small integers as arguments does."""
    import fcntl

    return fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, _high_descriptor())


def raise_descriptor(fd):
    """``fd`` moved to a high descriptor (the old one closed), for a channel the code a
    program runs must not close by its number: argcomplete's own tests open descriptors 8
    and 9 (its shell protocol's) and close them, and a result pipe that happened to be
    there was gone."""
    import fcntl

    high = fcntl.fcntl(fd, fcntl.F_DUPFD, _high_descriptor())
    os.close(fd)
    return high


LOW_DESCRIPTORS = 32
"""Descriptors below this are held by :func:`hold_low_descriptors` while a suite runs."""


def hold_low_descriptors():
    """Point every free descriptor from 3 to :data:`LOW_DESCRIPTORS` at ``/dev/null``, so that
    the ones pytest and this program open next are higher: a suite that closes a descriptor
    by its number then closes a placeholder. argcomplete's tests open and close 8 and 9
    (its shell protocol's), which were pytest's copy of standard error (its faulthandler
    plugin's), and pytest raised at its end, the run's report lost."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in range(3, LOW_DESCRIPTORS):
        if fd == null:
            continue
        try:
            os.fstat(fd)
        except OSError:
            os.dup2(null, fd, inheritable=False)
    if null >= LOW_DESCRIPTORS:
        os.close(null)


def _high_descriptor():
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    ceiling = soft if 0 < soft < 4096 else 4096
    return max(10, ceiling - 32)


_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def keep_only(config, items, wanted):
    """Keep in pytest's collected ``items`` (in place, in collection order) those whose node
    id is in the set ``wanted``, the others reported deselected, as ``-k`` does; the ids of
    ``wanted`` that were not collected, sorted. Run from ``pytest_collection_modifyitems``:
    the files of the tests are given to pytest, not each test's id (twenty thousand ids of
    one parametrized test, packaging's, would make pytest match each against all of them)."""
    chosen = [item for item in items if item.nodeid in wanted]
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = chosen
    return sorted(wanted - {item.nodeid for item in chosen})


def missing_modules(text):
    """The top-level modules ``text`` (pytest's output, an error) says could not be imported."""
    return sorted({m.split(".")[0] for m in _MISSING_MODULE.findall(text)})


_UNDEFINED = re.compile(r"^ERROR ([^\s:]+\.py)(?:::\S*)? - NameError: name '(\w+)' is not defined", re.M)


def undefined_names(text):
    """``[path, name]`` for each test file whose collection pytest's output says failed on
    ``NameError: name 'name' is not defined``, sorted: a name an import guarded by ``try:
    ... except ImportError`` would have bound (mccabe's ``settings``, from hypothesis), whose
    module the build then installs."""
    return sorted({(path, name) for path, name in _UNDEFINED.findall(text)})


def pytest_problems(text, limit):
    """Up to ``limit`` lines of pytest's output that say why tests could not run: a
    ``conftest.py`` that failed to load and its exception's ``E`` lines, collection errors,
    pytest's internal errors."""
    lines = (line.strip()[:300] for line in text.split("\n"))
    found = [ln for ln in lines if "while loading conftest" in ln or ln.startswith(("E ", "ERROR", "INTERNALERROR"))]
    return found[:limit]


def script_idioms_off():
    """Make ``unittest.main()`` at a test module's top level, unguarded by ``if __name__ ==
    "__main__"`` (toposort's and ply's test files end with it), do nothing: run while pytest
    imports the module, it ran this program's tests, none, and raised ``SystemExit``, which
    stopped the whole suite. pytest then collects the module's test cases as it does any."""
    import unittest

    def main(*args, **kwargs):
        return None

    unittest.main = main


_PLUGIN_WARNINGS = ("PytestUnknownMarkWarning", "PytestConfigWarning", "PytestCollectionWarning")


def pytest_compat_args(pytest):
    """pytest arguments that run a repository's suite as the pytest it was written for did,
    with the plugins its authors had: each ``PytestRemovedIn<N>Warning`` of this pytest (an
    error from version N on, such as a ``conftest.py`` hook taking the old ``path`` argument
    under pytest 9, which stopped docopt-ng's whole suite from loading), and what plugins
    not loaded here would have defined (pytest-cov's ``no_cover`` mark, an error under
    python-dateutil's ``filterwarnings = error``; pytest-asyncio's ``asyncio_mode`` option,
    blinker's), and a class pytest declines to collect (Markdown's), shown as warnings.
    Command-line filters come after the repository's ``filterwarnings``, so they hold under
    ``error`` too."""
    names = sorted(n for n in dir(pytest) if n.startswith("PytestRemovedIn") and n.endswith("Warning"))
    names += [n for n in _PLUGIN_WARNINGS if hasattr(pytest, n)]
    args = []
    for name in names:
        args += ["-W", "default::pytest.%s" % name]
    return args


def write_all(fd, data):
    """Write every byte of ``data`` to ``fd`` (a pipe takes large writes in parts)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def result_line(payload, compress=False):
    """The result line of ``payload`` (a JSON object), newline-terminated, as bytes.

    ``compress``: compress a result longer than :data:`COMPRESS_ABOVE` (large records would
    not fit in a run's output otherwise; small ones are cheaper to send as they are).
    """
    text = json.dumps(payload, separators=(",", ":"))
    if compress and len(text) > COMPRESS_ABOVE:
        import base64  # only the programs whose results are large need them
        import zlib

        blob = base64.b64encode(zlib.compress(text.encode("utf-8", "surrogatepass"))).decode("ascii")
        return (RESULT_COMPRESSED + blob + "\n").encode("ascii")
    return (RESULT + text + "\n").encode("utf-8", "surrogatepass")


def write_result(payload, token=None, compress=False, fd=1):
    """Write the result line on its own line of standard output, then the token's line if given.

    A program that writes the token only when it completed passes ``token=None`` otherwise.
    ``fd``: a duplicate of standard output kept by a program whose fd 1 may point elsewhere
    when it writes (pytest's capture).
    """
    data = b"\n" + result_line(payload, compress)
    if token is not None:
        data += (END + token + "\n").encode("utf-8", "surrogatepass")
    write_all(fd, data)


def seed_generators(seed=0):
    """Seed the global generators code may draw from: ``random``'s, and numpy's when it is
    imported. A run forked from a warm worker starts with ``random`` seeded from the OS
    (``random`` reseeds itself at fork; the worker reseeds numpy), so code that draws from
    them, a target or a repository's test, did other things in each run: two builds then
    kept other inputs, traced other calls, judged other mutants. Seeded, the draws follow
    the program's own runs."""
    random.seed(seed)
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None and hasattr(numpy_random, "seed"):
        try:
            numpy_random.seed(seed % 2**32)
        except Exception:
            pass


class SeededTests:
    """A pytest plugin: the global generators seeded before each test (as pytest-randomly
    does with a fixed seed), so a test's draws do not depend on the tests before it or on
    the run it is in."""

    def pytest_runtest_setup(self, item):
        seed_generators(0)


def cpu_seconds(pid):
    """CPU seconds (user and system) process ``pid`` has used so far, from ``/proc``; 0 when
    it is gone. Read by the parent, so the process cannot hide or fake it."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


WALL_STRETCH = 10.0
"""A wall-clock guard that passes while the process is busy (computing, or waiting for a CPU
on a loaded machine) is extended, up to this many times as long: a guard stops code that
waits, and a CPU limit stops code that computes (see :class:`WallGuard`)."""
BUSY_SHARE = 0.5
"""A process busy (running or runnable) for at least this share of the time since its
guard was armed is computing, not waiting: its guard stretches."""


def runnable(pid):
    """Whether some thread of process ``pid`` is running or waiting for a CPU (state ``R`` in
    ``/proc``), rather than sleeping or blocked; False when it is gone."""
    try:
        threads = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    for tid in threads:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid), "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"R":
                    return True
        except (OSError, IndexError):
            continue
    return False


def busy_seconds(pid=None):
    """Seconds process ``pid`` has spent running or waiting for a CPU, its threads together
    (``/proc/PID/task/*/schedstat``), or this process's main thread (``pid`` None: one read,
    for guards armed per call); its CPU time where the kernel keeps no scheduler
    statistics; 0 when it is gone."""
    paths = ["/proc/self/schedstat"]
    if pid is not None:
        try:
            paths = ["/proc/%d/task/%s/schedstat" % (pid, tid) for tid in os.listdir("/proc/%d/task" % pid)]
        except OSError:
            return 0.0
    total = 0
    for path in paths:
        try:
            with open(path, "rb") as fh:
                running, waiting = fh.read().split()[:2]
            total += int(running) + int(waiting)
        except (OSError, ValueError):
            return cpu_seconds(os.getpid() if pid is None else pid)
    return total / 1e9


class WallGuard:
    """A wall-clock guard of ``seconds`` over process ``pid`` (this one by default) that
    stops code that waits, never code that computes on a loaded machine: past ``seconds``,
    while the process has been busy (running, or runnable and waiting for a CPU) for at
    least :data:`BUSY_SHARE` of the time since the guard was armed, it stretches, up to
    :data:`WALL_STRETCH` times ``seconds``. The CPU limit that goes with it stops code that
    computes forever. So how busy the machine is changes no verdict."""

    def __init__(self, seconds, pid=None):
        self.seconds, self.pid = seconds, pid
        self.started = time.monotonic()
        self.busy_at_start = busy_seconds(pid)

    def expired(self):
        """Whether the guard has passed (and does not stretch)."""
        elapsed = time.monotonic() - self.started
        if elapsed < self.seconds:
            return False
        if elapsed >= WALL_STRETCH * self.seconds:
            return True
        return busy_seconds(self.pid) - self.busy_at_start < BUSY_SHARE * elapsed

    def left(self):
        """Seconds until the guard passes as armed (0 once past it: check :meth:`expired`)."""
        return max(0.0, self.seconds - (time.monotonic() - self.started))

    def waited(self):
        """Seconds the process has waited since the guard was armed: the time since, less the
        time it was running or runnable (so a loaded machine does not add to it)."""
        elapsed = time.monotonic() - self.started
        return elapsed - (busy_seconds(self.pid) - self.busy_at_start)


def over_limit(pid, cpu_limit, guard):
    """Why a running child is to be stopped, None while it is within its limits: past
    ``cpu_limit`` seconds of its CPU time (``"cpu"``), or past its :class:`WallGuard`
    (``"wall"``)."""
    if cpu_seconds(pid) > cpu_limit:
        return "cpu"
    return "wall" if guard.expired() else None


_alarm = {"handler": None, "guard": None}
"""The handler :func:`set_alarms` installed, and the wall-clock guard of the alarm armed."""


def set_alarms(cpu, wall, handler=None):
    """Interrupt this process after ``cpu`` seconds of its CPU time (``SIGPROF``) or
    ``wall`` seconds of the wall clock (``SIGALRM``), whichever comes first: ``handler``
    for both (when given). ``set_alarms(0, 0)`` cancels them. A time limit counts CPU
    time, which a loaded machine does not change; the wall clock only stops code that
    waits (sleeps, blocks): it is a :class:`WallGuard`, which stretches while the process
    computes (on a loaded machine, it waits for a CPU)."""
    import signal

    if handler is not None:
        _alarm["handler"] = handler
        signal.signal(signal.SIGPROF, handler)
        signal.signal(signal.SIGALRM, _on_wall_alarm)
    _alarm["guard"] = WallGuard(wall) if wall else None
    signal.setitimer(signal.ITIMER_PROF, cpu)
    signal.setitimer(signal.ITIMER_REAL, wall)


def _on_wall_alarm(signum, frame):
    """SIGALRM: the handler's, unless the guard stretches (then the alarm is armed again)."""
    import signal

    guard, handler = _alarm["guard"], _alarm["handler"]
    if guard is not None and not guard.expired():
        signal.setitimer(signal.ITIMER_REAL, max(0.01, 0.1 * guard.seconds))
        return
    if handler is not None:
        handler(signum, frame)


def kill_group(pid):
    """SIGKILL the process group ``pid`` leads, and ``pid`` itself (gone already: nothing to do)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, 9)
        except OSError:
            pass
