"""Search inputs for one target and choose the test's inputs (runs inside the sandbox).

Shipped with its modules (``runtime``, ``hints``, ``pools``, ``mutate``, ``strategies``,
``selection``) and the sandboxed module; its configuration and a one-time token (read at
once) come through the protocol of :mod:`gym_repost.programs`, and its result is a JSON
report followed by the token's line. The search: seeds (inputs traced from the repository's
tests), then inputs from strategies (per parameter value pools built from annotations,
defaults, usage and constants: a base input, one parameter varied at a time, random
combinations), interleaved with mutants of kept inputs. Every input runs through the
same ``_gr_outcome`` the final test uses, under coverage.py restricted to the target's
lines and a per-call timer; an input is kept when it reaches arcs of the target not
reached before or a new outcome class. Then a greedy choice: arcs first, then outcome
classes, then distinct results; each chosen input is run twice more and kept only when
its outcome does not change (seeding ``random`` when that makes it stable).

Budgets count work, never seconds, so that the same seed keeps the same inputs on a quiet
machine and a loaded one, a fast one and a slow one: the search stops after ``executions``
runs of the target or once those runs have made ``calls`` Python calls (counted by the
profiler hook, :class:`CallCounter`), or when it is complete, or, once the strategies'
pools are spent, after :data:`STALL_SHARE` of its runs in a row reach nothing new; the
choice of inputs that kill mutants spends at most ``mutant_executions`` runs and ``calls``
calls more; and the per-call timer counts the process's CPU time (``ITIMER_PROF``). The
process's CPU-time limit (the host's) is a safety net far above what the counted budgets
spend: a target whose runs are costly stops on its count of calls, the same on every
machine, not on that limit, where it would stop on a slower machine and not on a faster one.
The wall clock is only a safety limit too (``wall_limit`` seconds for the whole search, a
wall timer per call at :data:`WALL_FACTOR` times the CPU limit); when it fires the report
says so (``stats["wall_clock_limit"]``, ``stats["wall_timeouts"]``) and the host warns. A call
that waits (neither running nor waiting for a CPU) for :data:`WAIT_SECONDS` or more is
counted (``stats["waits"]``), and :data:`WAITING_CALLS` of them stop a phase
(``stats["waiting_stop"]``): a target whose calls sleep or block ends on counted work too.

A run that computes in C code without returning to the interpreter (an endless iterator a
mutant made: ``chain.from_iterable(map(repeat, count(), repeat(0)))``) is beyond the reach
of its timer, whose handler runs between bytecodes. So the search runs in a child process
(:func:`supervise`) and every run gets the process's CPU-time limit lowered to
:data:`HANG_SECONDS` above what it has used (:class:`HangGuard`); a run that hangs is killed
there, and the search starts again in a new child that counts that run (its input, on the
same mutant) as one its timer stopped, without running it: the outcome a faster machine
that finished it would have recorded, as every run past its timer does. The search is
deterministic, so the new child reaches the same point; the hangs cost their CPU seconds
and the runs before them again, all within the process's CPU-time limit.

What a run writes in the working directory is undone after it (:class:`WorkingDirectory`):
every run finds the directory as the module's import left it, whatever ran before.

In replay mode (``"replay": true``) it only runs the given inputs once each and reports
their outcome fingerprints (the host compares them across hash seeds).
"""

import ast
import contextlib
import hashlib
import importlib.util
import io
import json
import linecache
import math
import mmap
import os
import random
import resource
import shutil
import signal
import stat
import sys
import time
import zlib

try:
    import _lsprof
except ImportError:  # an interpreter without the profiler: runs count no calls
    _lsprof = None  # type: ignore[assignment]

try:
    from . import hints, mutate, pools, protocol, runtime, selection, strategies
except ImportError:  # in the sandbox, shipped as top-level modules
    import _gym_repost_hints as hints  # type: ignore[no-redef,import-not-found]
    import _gym_repost_mutate as mutate  # type: ignore[no-redef,import-not-found]
    import _gym_repost_pools as pools  # type: ignore[no-redef,import-not-found]
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]
    import _gym_repost_runtime as runtime  # type: ignore[no-redef,import-not-found]
    import _gym_repost_selection as selection  # type: ignore[no-redef,import-not-found]
    import _gym_repost_strategies as strategies  # type: ignore[no-redef,import-not-found]

MODULE_NAME = "_gr_target_module"
EXECUTIONS = 2000
"""Default budget of the search: runs of the target (and, again, of the mutant selection)."""
CALLS = 20_000_000
"""Default budget of the search in Python calls its runs of the target make (and, again, of
the mutant selection): some 20 CPU seconds at this machine's million calls a second; it
binds for a target whose runs are costly, which ``executions`` alone would let spend
minutes of CPU time, and stops it at the same run on every machine."""
TIMEOUT_CALLS = 500_000
"""The Python calls a run its per-call timer stopped counts in the budget, whatever it made:
about what a run makes in the timer's half-second of CPU time on the machine it was
measured on; how many it made depends on the machine's speed and load, which must not move
where the search stops."""
STALL_SHARE = 0.25
"""Once the strategies' pools are spent, the search stops after this share of its budget
of runs in a row that reach nothing new."""
TRIES_PER_EXECUTION = 10
"""Inputs generated (duplicates and unbuildable ones included) per run of the budget: the
search ends even when its generators only repeat themselves."""
WALL_FACTOR = 20
"""The wall-clock safety timer of one call, in multiples of its CPU-time limit (a call
that sleeps or blocks uses no CPU time): far above what a loaded machine stretches a
computation by, so that it fires for a call that waits, not for one that computes."""
WALL_FLOOR = 2.0
"""The least wall-clock safety timer of one call, in seconds."""
WAIT_SECONDS = 1.0
"""A call that spends this long waiting (its time neither running nor waiting for a CPU,
so the same on a quiet machine and a busy one) is a waiting call."""
WAITING_CALLS = 4
"""Waiting calls of one phase (the search, the mutant selection) before the phase stops: a
count, so that a target whose calls sleep or block (on a queue, a lock, a thread) stops
after the same work on a quiet machine and a busy one, long before the phase's wall-clock
safety limit would cut it at a point that depends on the load."""
IMPORT_WALL_FACTOR = 3
"""The module's import gets its CPU-time limit (``import_timeout``) and this many times it on the wall clock."""
WALL_LIMIT = 120.0
"""Default safety limit of one whole search, in wall-clock seconds."""
HANG_SECONDS = 10
"""CPU seconds one run may use before its process is killed as hung (RLIMIT_CPU, whole
seconds): twenty times the per-call timer, which stops every run that returns to the
interpreter; only a run stuck in C code gets this far (see :class:`HangGuard`)."""
MAX_HANGS = 50
"""Runs that hung a search may count before it is given up (``kind`` ``"hung"``); the
process's CPU-time limit binds first for all but the shortest searches."""
HANG_KEY_SIZE = 20
"""Bytes of the key of the run in progress (a SHA-1 digest) in the supervisor's shared page."""
MAX_SNAPSHOT_BYTES = 64 * 2**20
"""Bytes of the working directory's files :class:`WorkingDirectory` keeps to put back (the
explorer's modules and the target's script: kilobytes); beyond, files are not rewritten."""
MAX_KEPT_TRIALS = 3000
LITERALS = 80
"""Most literals of the target (its own constants first) the search puts into inputs."""


class CallTimeout(BaseException):
    """The per-call timer expired (a BaseException: the target's handlers must not catch it)."""


class WallTimeout(CallTimeout):
    """The per-call wall-clock safety timer expired before the CPU-time one."""


class SafetyClock:
    """The wall-clock safety limit of one search: never a budget, reported when it fires;
    and the count of calls that waited (:func:`waited`), which is a budget: :data:`WAITING_CALLS`
    of them stop a phase.

    ``expired(phase)`` records the first phase the count stopped in ``stats["waiting_stop"]``
    and the first phase the wall clock stopped in ``stats["wall_clock_limit"]``.
    """

    def __init__(self, seconds, stats, waiting_calls=WAITING_CALLS):
        self.seconds, self.stats, self.waiting_calls = seconds, stats, waiting_calls
        self.guard = protocol.WallGuard(seconds)  # stretches while the search computes
        self.waits_before = {"search": stats["waits"]}

    def expired(self, phase):
        count = self.stats["waits"] - self.waits_before.setdefault(phase, self.stats["waits"])
        if count >= self.waiting_calls:
            self.stats.setdefault("waiting_stop", phase)
            return True
        if not self.guard.expired():
            return False
        self.stats.setdefault("wall_clock_limit", phase)
        return True


class CallCounter:
    """The Python calls of one run, counted by the C profiler hook (``_lsprof``, the one
    behind ``cProfile``; C functions not counted, some 2% of a run's time): the work the run
    does, the same on every machine. The calls of the explorer's own code and of coverage.py
    (``machinery``: files and directories) are not counted: how many arcs coverage.py hands
    over after a run varies by one now and then, and with it the calls that read them.
    Without the profiler every run counts 0 calls, and only the budgets of runs bind."""

    def __init__(self, machinery=()):
        self.profiler = _lsprof.Profiler(builtins=False, subcalls=False) if _lsprof is not None else None
        self.machinery = tuple(machinery)
        self.counted = {}  # code object -> counted or not

    def start(self):
        if self.profiler is not None:
            self.profiler.enable()

    def stop(self):
        """Stop counting; the calls since :meth:`start` (and forget them)."""
        if self.profiler is None:
            return 0
        self.profiler.disable()
        try:
            return sum(entry.callcount for entry in self.profiler.getstats() if self._counts(entry.code))
        finally:
            self.profiler.clear()

    def _counts(self, code):
        counts = self.counted.get(code)
        if counts is None:
            filename = getattr(code, "co_filename", "")
            counts = self.counted[code] = not filename.startswith(self.machinery)
        return counts


class HangGuard:
    """Lowers the process's CPU-time limit (RLIMIT_CPU) around each run to
    :data:`HANG_SECONDS` above what the process has used, and leaves the key of the run in
    progress in the page it shares with :func:`supervise` (``shared``): a run stuck in C
    code is killed by SIGXCPU there, and the supervisor reads which one it was.

    ``hung``: keys of runs that hung in an earlier child: :meth:`hung` says to count them as
    stopped by their timer, unrun. ``limit``: the (soft, hard) CPU-time limit of the whole
    child, restored after each run. Without ``shared`` (a search run in-process) it does
    nothing, and no run counts as hung.
    """

    def __init__(self, shared=None, hung=(), limit=None, seconds=HANG_SECONDS):
        self.shared, self.known = shared, frozenset(hung)
        self.limit = limit if limit is not None else resource.getrlimit(resource.RLIMIT_CPU)
        self.seconds = max(1, int(seconds))
        self.armed = False

    @staticmethod
    def key(source, variant):
        """The key of a run: its input, and which mutant (if any) was swapped in."""
        return hashlib.sha1(("%s\0%s" % (variant, source)).encode("utf-8", "surrogatepass")).digest()

    def hung(self, key):
        return key in self.known

    def arm(self, key):
        if self.shared is None:
            return
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft, hard = self.limit
        per_run = math.ceil(usage.ru_utime + usage.ru_stime) + self.seconds
        if soft != resource.RLIM_INFINITY and per_run >= soft:
            return  # the child's own limit comes first: a search over it, not a hang
        self.shared[:HANG_KEY_SIZE] = key
        self.shared[HANG_KEY_SIZE] = 1
        resource.setrlimit(resource.RLIMIT_CPU, (per_run, hard))
        self.armed = True

    def disarm(self):
        if self.armed:
            resource.setrlimit(resource.RLIMIT_CPU, self.limit)
            self.shared[HANG_KEY_SIZE] = 0
            self.armed = False


def machinery_files():
    """Where the explorer's own code and coverage.py's are (not counted by :class:`CallCounter`)."""
    files = [__file__] + [m.__file__ for m in (hints, mutate, pools, protocol, runtime, selection, strategies)]
    coverage = sys.modules.get("coverage")
    if coverage is not None:
        files.append(os.path.dirname(coverage.__file__) + os.sep)
    return sorted(set(files) | {os.path.abspath(f) + (os.sep if f.endswith(os.sep) else "") for f in files})


class Trial:
    """One input run against the ground truth."""

    __slots__ = (
        "source",
        "origin",
        "error",
        "arcs",
        "kind",
        "fingerprint",
        "deliberate",
        "duration",
        "calls",
        "seeded",
        "random",
    )

    def __init__(self, source, origin, error=None):
        self.source, self.origin, self.error = source, origin, error
        self.arcs, self.kind, self.fingerprint = frozenset(), "", ""
        self.deliberate, self.duration, self.seeded, self.random = True, 0.0, False, False
        self.calls = 0

    @property
    def raised(self):
        return self.kind.startswith("raised:")

    def rank(self):
        return (selection.ORIGIN_RANK.get(self.origin, 3), self.raised, len(self.source))


class WorkingDirectory:
    """The working directory as it was, put back after each run: what a run wrote there
    (files, directories, a ``chdir``) does not reach the runs after it. python-fsutil's
    ``copy_dir_content('', 0)`` copies the directory into a new ``0`` inside it, so each
    such run copied twice what the one before did, until a run reached its per-call timer:
    which run that was hung on the CPU's speed, and three builds chose three sets of inputs.
    Each run now sees the directory the final test's first call sees (after the import),
    its directories' permission bits too (``set_permissions('', 0)`` left the next run, and
    the putting back, no way into it)."""

    def __init__(self, root=None, max_bytes=MAX_SNAPSHOT_BYTES):
        self.root = os.path.abspath(root or os.getcwd())
        self.dirs, self.files, self.links = {"": stat.S_IMODE(os.stat(self.root).st_mode)}, {}, {}
        kept = 0
        for dirpath, dirnames, filenames in os.walk(self.root):
            here = os.path.relpath(dirpath, self.root)
            here = "" if here == "." else here
            for name in list(dirnames):
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    self.links[os.path.join(here, name)] = os.readlink(path)
                    dirnames.remove(name)
                else:
                    self.dirs[os.path.join(here, name)] = stat.S_IMODE(os.lstat(path).st_mode)
            for name in filenames:
                path, rel = os.path.join(dirpath, name), os.path.join(here, name)
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    self.links[rel] = os.readlink(path)
                    continue
                data = None
                if stat.S_ISREG(info.st_mode) and kept + info.st_size <= max_bytes:
                    with open(path, "rb") as fh:
                        data = fh.read()
                    kept += len(data)
                self.files[rel] = (data, stat.S_IMODE(info.st_mode), info.st_size, info.st_mtime_ns)

    def restore(self):
        """Put the directory back: what is new goes, what changed or went is written again."""
        self._modes()  # first, so that each directory can be read and written
        try:
            os.chdir(self.root)
        except OSError:
            os.makedirs(self.root, exist_ok=True)
            os.chdir(self.root)
        for dirpath, dirnames, filenames in os.walk(self.root):
            here = os.path.relpath(dirpath, self.root)
            here = "" if here == "." else here
            for name in list(dirnames):
                rel, path = os.path.join(here, name), os.path.join(dirpath, name)
                if os.path.islink(path) or rel not in self.dirs:
                    _remove(path)
                    dirnames.remove(name)
            for name in filenames:
                rel, path = os.path.join(here, name), os.path.join(dirpath, name)
                if rel not in self.files or os.path.islink(path) != (rel in self.links):
                    _remove(path)
        for rel in sorted(self.dirs):
            os.makedirs(os.path.join(self.root, rel), exist_ok=True)
        self._modes()
        for rel, target in self.links.items():
            path = os.path.join(self.root, rel)
            if not os.path.islink(path) or os.readlink(path) != target:
                _remove(path)
                os.symlink(target, path)
        for rel, (data, mode, size, mtime) in self.files.items():
            path = os.path.join(self.root, rel)
            try:
                info = os.lstat(path)
                same = (info.st_size, info.st_mtime_ns, stat.S_IMODE(info.st_mode)) == (size, mtime, mode)
            except OSError:
                same = False
            if same or data is None:
                continue
            _remove(path)
            with open(path, "wb") as fh:
                fh.write(data)
            os.chmod(path, mode)
            os.utime(path, ns=(mtime, mtime))

    def _modes(self):
        """Each directory that is there gets its permission bits back, outermost first."""
        for rel in sorted(self.dirs):
            path = os.path.join(self.root, rel)
            with contextlib.suppress(OSError):
                info = os.lstat(path)
                if stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) != self.dirs[rel]:
                    os.chmod(path, self.dirs[rel])


def _remove(path):
    """Remove a file, link or directory tree, whatever its permissions say."""
    opened = set()

    def writable(function, name, exc_info):
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            os.chmod(name, 0o700)
            if function in (os.rmdir, os.remove, os.unlink):
                function(name)
            elif name not in opened:  # a directory that could not be opened or listed: once more
                opened.add(name)
                shutil.rmtree(name, onerror=writable)

    with contextlib.suppress(OSError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=writable)
        else:
            os.unlink(path)


def _on_cpu_timer(signum, frame):
    raise CallTimeout()


_WALL_GUARD = [None]
"""The :class:`protocol.WallGuard` of the wall-clock safety timer armed."""


def _on_wall_timer(signum, frame):
    guard = _WALL_GUARD[0]
    if guard is not None and not guard.expired():  # computing on a loaded machine: not a wait
        signal.setitimer(signal.ITIMER_REAL, max(0.01, 0.1 * guard.seconds))
        return
    raise WallTimeout()


def waited(guard):
    """Whether the call ``guard`` was armed for has waited :data:`WAIT_SECONDS` or more (its
    time since, less the time it was running or runnable)."""
    if guard is None or time.monotonic() - guard.started < WAIT_SECONDS:
        return False  # too short a call to have waited that long: no /proc read
    return guard.waited() >= WAIT_SECONDS


def set_wall_timer(seconds):
    """Arm (``seconds`` > 0) or disarm (0) the wall-clock safety timer: a guard that stretches
    while the process computes (:class:`protocol.WallGuard`), so only a call that waits meets it."""
    _WALL_GUARD[0] = protocol.WallGuard(seconds) if seconds else None
    signal.setitimer(signal.ITIMER_REAL, seconds)


def set_call_timer(seconds):
    """Arm (``seconds`` > 0) or disarm (0) the per-call timers: CPU time, and the wall-clock safety."""
    signal.setitimer(signal.ITIMER_PROF, seconds)
    set_wall_timer(max(WALL_FLOOR, WALL_FACTOR * seconds) if seconds else 0)


def load_module(path):
    """Import the sandboxed module from ``path`` under a fixed name."""
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)
    for name, value in vars(runtime).items():
        if name.startswith(("_gr_", "_GR_")):
            module.__dict__.setdefault(name, value)
    return module


def target_text(module_text, start, end):
    """The module's text with everything but lines ``start..end`` commented out (line numbers kept).

    Parsing only the target keeps coverage.py's analysis fast on large modules; a method
    gets a ``class`` header on the line before it so that its indentation parses.
    """
    lines = module_text.split("\n")
    body = lines[start - 1 : end]
    indented = bool(body) and body[0][:1] in (" ", "\t")
    # comment lines, not blank ones: coverage.py's exclusion regexes start with ^\s*,
    # which is quadratic over a long run of blank lines
    head = ["#"] * (start - 1)
    if indented and head:
        head[-1] = "class _GrOwner:"
    return "\n".join(head + body) + "\n"


def _unpacked(arc):
    """An arc as ``(from, to)``: coverage.py's C tracer packs both lines into one int."""
    if isinstance(arc, tuple):
        return arc
    first, second = arc & 0xFFFFFFF, (arc >> 28) & 0xFFFFFFF
    return (-first if arc & (1 << 56) else first, -second if arc & (1 << 57) else second)


class ArcRecorder:
    """Arcs of the target's lines executed by each input, as coverage.py counts them.

    coverage.py runs for the whole search; after each input the arcs its tracer gathered
    are read straight from the collector's in-memory sets and cleared (going through
    ``Coverage.get_data()`` would write them to SQLite: milliseconds per input).
    """

    def __init__(self, path, start, end):
        import coverage
        from coverage.config import DEFAULT_EXCLUDE
        from coverage.parser import PythonParser

        self.path, self.start, self.end = os.path.abspath(path), start, end
        with open(path, encoding="utf-8") as fh:
            text = target_text(fh.read(), start, end)
        self.parser = PythonParser(
            text=text, filename=self.path, exclude="|".join("(?:%s)" % e for e in DEFAULT_EXCLUDE)
        )
        self.parser.parse_source()
        self.possible = frozenset(a for a in self.parser.arcs() if start <= a[0] <= end)
        exits = self.parser.exit_counts()
        self.branches = frozenset(a for a in self.possible if a[0] > 0 and exits.get(a[0], 0) > 1)
        self.cov = coverage.Coverage(branch=True, data_file=None, include=[self.path])
        self.cov.start()
        self._data = getattr(getattr(self.cov, "_collector", None), "data", None)
        self._real = {}
        """``os.path.realpath`` of the collector's file names, resolved once each (not per input)."""
        self.collect()

    def _is_target(self, name):
        if name not in self._real:
            self._real[name] = os.path.realpath(name) == os.path.realpath(self.path)
        return self._real[name]

    def collect(self):
        """Arcs of the target reached since the last call (and forget them)."""
        raw = set()
        if isinstance(self._data, dict):
            for name, arcs in list(self._data.items()):
                if self._is_target(name) and isinstance(arcs, set):
                    raw.update(_unpacked(a) for a in arcs)
                    arcs.clear()
        else:
            data = self.cov.get_data()
            raw.update(data.arcs(self.path) or [])
            data.erase()
        return frozenset(self.parser.translate_arcs(raw)) & self.possible


class Target:
    """The function under test, how to call it, and what its source says about inputs."""

    def __init__(self, module, config):
        self.module, self.config = module, config
        self.name = config["name"]
        self.variant = ""  # which mutant is swapped in ("": none; see selection.Mutants)
        self.owner = self._owner()
        self.kind = self._kind()
        text = open(module.__file__, encoding="utf-8").read()
        self.source_lines = text.splitlines()
        tree = ast.parse(text)
        self.tree = tree
        node = pools.find_def(tree, config["qualname"])
        if node is None:
            raise LookupError("%s is not defined in the sandboxed module" % config["qualname"])
        self.node = node
        self.hints = hints.analyse(node, is_method=self.kind in ("method", "property", "classmethod"))
        # the body's constants first, then those of its callees and the tables it reads
        reachable = hints.reachable_literals(node, tree, module.__dict__, self.owner)
        self.literals = list(dict.fromkeys(self.hints.constants + reachable))[:LITERALS]

    def line_literals(self, line):
        """Sources of the literals bearing on one line of the module (see :func:`hints.line_literals`)."""
        return hints.line_literals(self.node, line, self.source_lines, self.module.__dict__, self.owner)

    def _owner(self):
        if not self.config.get("class_name"):
            return None
        value = self.module
        for part in self.config["class_name"].split("."):
            value = getattr(value, part)
        return value

    def _kind(self):
        if self.owner is None:
            return "function"
        raw = next((vars(k)[self.name] for k in self.owner.__mro__ if self.name in vars(k)), None)
        if raw is None:
            raise LookupError("%s has no attribute %s" % (self.owner.__qualname__, self.name))
        if isinstance(raw, staticmethod):
            return "staticmethod"
        if isinstance(raw, classmethod):
            return "classmethod"
        if isinstance(raw, property) or (hasattr(raw, "__get__") and not callable(raw)):
            return "property"
        return "method"

    @property
    def needs_instance(self):
        return self.kind in ("method", "property")

    def outcome(self, instance, args, kwargs, seeded, on_error):
        """The outcome of one call, as ``_gr_outcome`` (or ``_gr_seeded``) computes it.

        The callable is wrapped to report the exception it raises; for a method the
        wrapper is itself bound to the instance, so that ``_gr_outcome`` observes the
        instance's state exactly as in the final test.
        """
        if self.kind == "function":
            fn = _watched(self.module.__dict__[self.name], on_error)
        elif self.kind == "property":
            name = self.name
            fn, args, kwargs = _watched(lambda _gr_self: getattr(_gr_self, name), on_error), (instance,), {}
        elif self.kind == "method":
            method = _watched(getattr(instance, self.name), on_error)
            fn = runtime._gr_types.MethodType(lambda _self, *a, **k: method(*a, **k), instance)
        else:
            fn = _watched(getattr(self.owner, self.name), on_error)
        observe = runtime._gr_seeded if seeded else runtime._gr_outcome
        return observe(fn, *args, **kwargs)


def _watched(fn, on_error):
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            on_error(exc)
            raise

    return call


def outcome_kind(result):
    """``ok:<type tag>`` or ``raised:<exception type>`` of a ``_gr_outcome`` result."""
    if result[0] == "raised":
        return "raised:" + result[1]
    value = result[1]
    if isinstance(value, tuple) and value and isinstance(value[0], str):
        return "ok:" + value[0]
    return "ok:" + type(value).__name__


def _is_raise_line(exc, path):
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None or os.path.abspath(last.tb_frame.f_code.co_filename) != path:
        return False
    return linecache.getline(path, last.tb_lineno).strip().startswith("raise")


def trial_seed(seed, source):
    """The seed of the global generators for one input's call: the search's seed and the
    input's source. A call its timer stops has drawn as many numbers as the machine's speed
    allowed, so a generator carried from call to call gave the calls after it other numbers
    in each search (more-itertools' ``_sample_unweighted`` on an endless iterator), and
    they reached other branches; so does anything that ran before it."""
    return zlib.crc32(source.encode("utf-8", "surrogatepass")) ^ (int(seed) & 0xFFFFFFFF)


class Explorer:
    """Runs inputs, keeps the ones that reach something new, and chooses the test's inputs."""

    def __init__(self, target, recorder, config, guard=None, workdir=None):
        self.target, self.recorder, self.config = target, recorder, config
        self.workdir = workdir
        self.namespace = target.module.__dict__
        self.timeout = float(config.get("call_timeout", 0.5))
        self.trials, self.kept = [], []
        self.covered, self.classes, self.prints = set(), set(), set()
        self.stats = {
            "executed": 0,
            "calls": 0,
            "invalid": 0,
            "timeouts": 0,
            "wall_timeouts": 0,
            "waits": 0,
            "nondeterministic": 0,
            "seeded": 0,
            "mutants": 0,
            "mutants_killed": 0,
        }
        self.build_errors = {}
        self.slow = []
        self.path = os.path.abspath(target.module.__file__)
        self.counter = CallCounter(machinery_files())
        self.guard = HangGuard(None) if guard is None else guard

    def execute(self, source, origin, seeded=False):
        """Run one input; a :class:`Trial` (with ``error`` set when it is unusable)."""
        trial = Trial(source, origin)
        self.stats["executed"] += 1
        key = HangGuard.key(source, self.target.variant) if self.guard.shared is not None else None
        if key is not None and self.guard.hung(key):
            return self._hung(trial)
        errors = []
        sink = io.StringIO()
        if not seeded:  # (a seeded call seeds them itself)
            protocol.seed_generators(trial_seed(self.config.get("seed", 0), source))
        random_state = random.getstate() if self.config.get("may_be_random") else None
        # CPU time, not wall-clock time: what an input costs must not depend on machine load
        started = time.process_time()
        if key is not None:
            self.guard.arm(key)
        set_call_timer(self.timeout)
        try:
            self.counter.start()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                state = self._run(trial, seeded, errors)
                if trial.error is None:
                    self._describe(trial, state, errors, seeded)
        except CallTimeout as exc:
            trial.error = "timeout"
            self.stats["timeouts"] += 1
            self.stats["wall_timeouts"] += isinstance(exc, WallTimeout)
        except Exception as exc:
            trial.error = "observe: %s: %s" % (type(exc).__name__, str(exc)[:100])
        finally:
            guard = _WALL_GUARD[0]
            set_call_timer(0)
            self.guard.disarm()
            counted = self.counter.stop()
            # how far a run its timer stopped got depends on the machine's speed: it counts
            # a fixed number of calls, so that the runs after it are the same on every machine
            trial.calls = TIMEOUT_CALLS if trial.error == "timeout" else counted
            self.stats["calls"] += trial.calls
            self.stats["waits"] += waited(guard)
            trial.duration = time.process_time() - started
        if self.workdir is not None:
            self.workdir.restore()
        trial.random = random_state is not None and not seeded and random.getstate() != random_state
        if trial.duration > 2 * self.timeout:
            self.slow.append((round(trial.duration, 2), source[:120]))
        return trial

    def _hung(self, trial):
        """A run that hung in an earlier child (:class:`HangGuard`): counted as one its timer
        stopped, as a machine that finished it would have, and not run again."""
        trial.error = "timeout"
        trial.calls, trial.duration = TIMEOUT_CALLS, self.timeout
        self.stats["timeouts"] += 1
        self.stats["calls"] += TIMEOUT_CALLS
        self.stats["hung_runs"] = self.stats.get("hung_runs", 0) + 1
        return trial

    def _run(self, trial, seeded, errors):
        try:
            instance, args, kwargs = eval(trial.source, self.namespace)
        except Exception as exc:
            trial.error = "build: %s: %s" % (type(exc).__name__, str(exc)[:100])
            self.build_errors[type(exc).__name__] = trial.error
            return None
        if self.target.needs_instance and instance is None:
            trial.error = "no instance"
            return None
        if self.recorder:
            self.recorder.collect()
        state = self.target.outcome(instance, args, kwargs, seeded, errors.append)
        if self.recorder:
            trial.arcs = self.recorder.collect()
        return state

    def _describe(self, trial, state, errors, seeded):
        trial.kind = outcome_kind(state[0])
        trial.deliberate = not errors or _is_raise_line(errors[-1], self.path)
        try:
            text = repr(state)
        except Exception:
            trial.error = "unprintable outcome"
            return
        trial.fingerprint = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()
        trial.seeded = seeded

    def consider(self, source, origin):
        """Run an input; keep it when it reaches new arcs or a new outcome class.

        Returns True when it was kept (novel).
        """
        trial = self.execute(source, origin)
        if trial.error is not None:
            self.stats["invalid"] += 1
            return False
        if len(self.trials) < MAX_KEPT_TRIALS:
            self.trials.append(trial)
        self.prints.add(trial.fingerprint)
        new_class = trial.kind not in self.classes and trial.deliberate
        if trial.arcs - self.covered or new_class:
            self.kept.append(trial)
            self.covered |= trial.arcs
            self.classes.add(trial.kind)
            if len(self.trials) >= MAX_KEPT_TRIALS:
                self.trials.append(trial)
            return True
        return False

    def complete(self, max_inputs):
        """Every branch (or, without branches, every arc) reached and enough distinct results."""
        if self.recorder is None:
            return False
        goal = self.recorder.branches or self.recorder.possible
        return goal <= self.covered and len(self.prints) >= max_inputs + 4

    def stable(self, trial):
        """Run a chosen input twice more; seed ``random`` when that makes it stable.

        An input whose call drew from the global ``random`` generator is always seeded:
        agreeing twice by chance (a shuffle of three letters) is not being deterministic.
        """
        if not trial.random:
            again = [self.execute(trial.source, trial.origin) for _ in range(2)]
            if all(t.error is None and t.fingerprint == trial.fingerprint and not t.random for t in again):
                return True
        if not self.config.get("may_be_random", True):
            self.stats["nondeterministic"] += 1
            return False
        seeded = [self.execute(trial.source, trial.origin, seeded=True) for _ in range(3)]
        if all(t.error is None and t.fingerprint == seeded[0].fingerprint for t in seeded):
            trial.seeded, trial.fingerprint, trial.kind = True, seeded[0].fingerprint, seeded[0].kind
            self.stats["seeded"] += 1
            return True
        self.stats["nondeterministic"] += 1
        return False


class SearchBudget:
    """What the search may spend, in runs of the target, the Python calls they make, and
    inputs generated (never seconds)."""

    def __init__(self, explorer, executions, clock, calls=CALLS):
        self.explorer, self.clock = explorer, clock
        self.executions, self.calls = executions, calls
        self.stall = max(1, int(STALL_SHARE * executions))
        self.start = explorer.stats["executed"]
        self.calls_start = explorer.stats["calls"]
        self.tries = 0
        self.runs_without_news = self.tries_without_news = 0

    def tried(self, executed, novel):
        """Count one generated input (``executed``: it ran; ``novel``: it was kept)."""
        self.tries += 1
        if novel:
            self.runs_without_news = self.tries_without_news = 0
        else:
            self.runs_without_news += executed
            self.tries_without_news += 1

    def stop(self, generator, max_inputs):
        """Why the search stops now (None: it goes on)."""
        if self.explorer.complete(max_inputs):
            return "complete"
        if self.explorer.stats["executed"] - self.start >= self.executions:
            return "executions"
        if self.explorer.stats["calls"] - self.calls_start >= self.calls:
            return "calls"
        if self.tries >= TRIES_PER_EXECUTION * self.executions:
            return "tries"
        if generator.varied and (
            self.runs_without_news >= self.stall or self.tries_without_news >= TRIES_PER_EXECUTION * self.stall
        ):
            return "stalled"
        if self.clock.expired("search"):
            return "waiting calls" if self.explorer.stats.get("waiting_stop") == "search" else "wall-clock limit"
        return None


def search(explorer, generator, seeds, rng, budget, max_inputs):
    """Seeds, then strategies interleaved with mutants of kept inputs, until completion, the
    budget of runs (:class:`SearchBudget`), or a long run of inputs that reach nothing new."""
    seen = set()
    for seed in seeds:
        source = mutate.join_input(seed.get("instance"), seed["args"], seed["kwargs"])
        if source not in seen:
            seen.add(source)
            explorer.consider(source, "traced")
    generated, replacements = generator.inputs(), strategies.replacement_values(generator)
    while True:
        stop = budget.stop(generator, max_inputs)
        if stop is not None:
            explorer.stats["search_stop"] = stop
            explorer.stats["search_executions"] = explorer.stats["executed"]
            explorer.stats["search_calls"] = explorer.stats["calls"]
            return
        mutating = explorer.kept and rng.random() < (0.5 if generator.varied else 0.2)
        if mutating:
            source = mutate.mutate(
                rng.choice(explorer.kept).source, rng, replacements, literals=explorer.target.literals
            )
            origin = "search"
        else:
            source, origin = next(generated), "strategy"
        if source is None or source in seen:
            budget.tried(False, False)
            continue
        seen.add(source)
        budget.tried(True, explorer.consider(source, origin))


def report(explorer, chosen, generator, started):
    """The JSON report of a search."""
    recorder = explorer.recorder
    covered = set().union(*(t.arcs for t in chosen)) if chosen else set()
    branches = recorder.branches if recorder else frozenset()
    inputs = []
    for t in chosen:
        instance, args, kwargs = mutate.split_input(t.source)
        inputs.append(
            {
                "instance": instance,
                "args": args,
                "kwargs": kwargs,
                "origin": t.origin,
                "seeded": t.seeded,
                "kind": t.kind,
                "fingerprint": t.fingerprint,
            }
        )
    return {
        "ok": True,
        "target_kind": explorer.target.kind,
        "inputs": inputs,
        "branches": len(branches),
        "branches_covered": len(branches & covered),
        "branch_coverage": (len(branches & covered) / len(branches) if branches else 1.0) if recorder else None,
        "missing_branches": sorted(branches - covered)[:20],
        "arcs": len(recorder.possible) if recorder else None,
        "arcs_covered": len(recorder.possible & covered) if recorder else None,
        "searched_branch_coverage": (len(branches & explorer.covered) / len(branches) if branches else 1.0)
        if recorder
        else None,
        "stats": explorer.stats,
        "unbuildable": generator.unbuildable,
        "build_errors": sorted(set(explorer.build_errors.values()))[:5],
        "slow": sorted(explorer.slow, reverse=True)[:5],
        "elapsed": round(time.monotonic() - started, 3),
        "cpu_seconds": round(time.process_time(), 3),
    }


def replay(explorer, config):
    """Fingerprints of the given inputs, one run each."""
    prints = []
    for item in config["inputs"]:
        source = mutate.join_input(item.get("instance"), item["args"], item["kwargs"])
        trial = explorer.execute(source, item.get("origin", "search"), seeded=bool(item.get("seeded")))
        prints.append(trial.fingerprint if trial.error is None else None)
    return {"ok": True, "fingerprints": prints}


def explore(config, guard=None, before=None):
    """Load the module, search, choose: the report (``ok`` False with ``kind`` on failure).

    ``guard``: the :class:`HangGuard` of a search :func:`supervise` runs (None in-process);
    ``before``: the working directory before the module was imported, put back first (what
    a run that hung in an earlier child left there goes)."""
    started = time.monotonic()
    if before is not None:
        before.restore()
    limit = float(config.get("import_timeout", 20.0))
    set_call_timer(limit)
    set_wall_timer(IMPORT_WALL_FACTOR * limit)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            module = load_module(config["module_file"])
    except BaseException as exc:
        return {"ok": False, "kind": "import", "error": "%s: %s" % (_import_error(exc), str(exc)[:300])}
    finally:
        set_call_timer(0)
    try:
        target = Target(module, config)
    except (LookupError, AttributeError, SyntaxError) as exc:
        return {"ok": False, "kind": "target", "error": "%s: %s" % (type(exc).__name__, str(exc)[:300])}
    workdir = WorkingDirectory()  # as the import left it: what the final test's calls find
    if config.get("replay"):
        return replay(Explorer(target, None, config, guard, workdir), config)
    try:
        recorder = ArcRecorder(module.__file__, config["start_line"], config["end_line"])
    except ImportError:
        recorder = None
    explorer = Explorer(target, recorder, config, guard, workdir)
    if guard is not None and guard.known:
        explorer.stats["hangs"] = len(guard.known)
    explorer.stats["setup"] = round(time.monotonic() - started, 3)
    clock = SafetyClock(float(config.get("wall_limit", WALL_LIMIT)), explorer.stats)
    protocol.seed_generators(config.get("seed", 0))  # a forked run's random: seeded by the OS
    rng = random.Random(config.get("seed", 0))
    builder = pools.PoolBuilder(module.__dict__, target.tree, target.literals, MODULE_NAME)
    seeds = config.get("seeds", [])
    generator = strategies.Strategies(target, builder, seeds, rng)
    executions = int(config.get("executions", EXECUTIONS))
    calls = int(config.get("calls", CALLS))
    max_inputs = int(config.get("max_inputs", 12))
    search(explorer, generator, seeds, rng, SearchBudget(explorer, executions, clock, calls), max_inputs)
    mutants = selection.Mutants(target, config.get("mutants", []), config["start_line"])
    chosen = selection.select(
        explorer,
        max_inputs,
        mutants,
        int(config.get("mutant_executions", executions)),
        clock,
        rng,
        strategies.replacement_values(generator),
        target.literals,
        mutant_calls=int(config.get("mutant_calls", calls)),
    )
    return report(explorer, chosen, generator, started)


def _import_error(exc):
    """The exception's name; a timer that fired says which limit it was."""
    if isinstance(exc, WallTimeout):
        return "import took longer than the wall-clock safety limit"
    if isinstance(exc, CallTimeout):
        return "import used more than its CPU time limit"
    return type(exc).__name__


def limit_memory(megabytes):
    """Lower the address-space limit, so that a huge input fails fast with MemoryError
    instead of spending seconds in C code the per-call timer cannot interrupt."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = megabytes * 1024 * 1024
    if soft == resource.RLIM_INFINITY or soft > wanted:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))
        except (ValueError, OSError):
            pass


def _safely(config, guard, before=None):
    """:func:`explore`, with any failure and an unserialisable report as a report."""
    try:
        result = explore(config, guard, before)
    except BaseException as exc:
        result = {"ok": False, "kind": "crash", "error": "%s: %s" % (type(exc).__name__, str(exc)[:300])}
    try:
        json.dumps(result)
    except (TypeError, ValueError) as exc:
        result = {"ok": False, "kind": "crash", "error": "report: %s" % exc}
    return result


def _cpu_used(usage):
    return usage.ru_utime + usage.ru_stime


def supervise(config, token, result_fd):
    """Run the search in a child process, again after a run of it hung (:class:`HangGuard`),
    until one child writes the report; never returns.

    Each child gets the CPU-time limit the children before it left (the process's is the
    whole search's); one that the limit itself stopped, or that died otherwise, ends this
    process the same way (SIGXCPU: the host reports ``"cpu limit"``).
    """
    shared = mmap.mmap(-1, mmap.PAGESIZE)  # anonymous and shared: the children write, this reads
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    seconds = int(config.get("hang_seconds", HANG_SECONDS))
    most = int(config.get("max_hangs", MAX_HANGS))
    hung = []
    before = WorkingDirectory()
    while True:
        spent = _cpu_used(resource.getrusage(resource.RUSAGE_SELF)) + _cpu_used(
            resource.getrusage(resource.RUSAGE_CHILDREN)
        )
        left = soft if soft == resource.RLIM_INFINITY else max(1, math.floor(soft - spent))
        shared[HANG_KEY_SIZE] = 0
        pid = os.fork()
        if pid == 0:
            try:
                resource.setrlimit(resource.RLIMIT_CPU, (left, hard))
                result = _safely(config, HangGuard(shared, hung, (left, hard), seconds), before)
                protocol.write_result(result, token, fd=result_fd)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status):
            os._exit(os.WEXITSTATUS(status))  # its report written (or, with a nonzero status, not)
        signum = os.WTERMSIG(status)
        if signum == signal.SIGXCPU and shared[HANG_KEY_SIZE] == 1:
            hung.append(bytes(shared[:HANG_KEY_SIZE]))
            if len(hung) < most:
                continue
            error = "%d runs of the target hung in C code (each stopped after %d CPU seconds)" % (len(hung), seconds)
            protocol.write_result({"ok": False, "kind": "hung", "error": error}, token, fd=result_fd)
            os._exit(0)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)


def main():
    config = protocol.read_config(token=True)
    token = protocol.read_token()
    result_fd = protocol.keep_stdout()  # an input may close standard output: load_catalog(1)
    signal.signal(signal.SIGPROF, _on_cpu_timer)
    signal.signal(signal.SIGALRM, _on_wall_timer)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    limit_memory(int(config.get("memory_mb", 1536)))
    if hasattr(os, "fork") and config.get("supervised", True):
        supervise(config, token, result_fd)
    protocol.write_result(_safely(config, None), token, fd=result_fd)
    os._exit(0)


if __name__ == "__main__":
    main()
