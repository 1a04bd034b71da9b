"""Run a repository's own tests and record the arguments they pass to targets (in the sandbox).

Copied into the run directory next to the repository's files; its configuration and a
one-time token (read at once) come through the protocol of :mod:`gym_repost.programs`.
It runs pytest in-process (no cache, the configuration's ``addopts`` cleared, a CPU-time
timer per test, and a CPU budget and a wall-clock deadline for the whole run) with a
``sys.settrace`` hook that only looks at *call* events: a call of a code object
whose (file, first line) is a target's is recorded, its arguments written back as Python
source at call time (so later mutations do not leak into the record). What cannot be
written as source is skipped: see :func:`to_source`. The result is written compressed,
then the token's line.

The budget is a count of the calls the hook sees (``max_events``): the suite stops after
the test that reaches it, the same test on any machine, or once every target has all the
calls it may record. The run's RLIMIT_CPU (less a margin) and the wall clock's deadline
are safety limits: the suite stops before the next test once either is spent. A
test may overrun its timer (unittest's ``subTest`` swallows the timer's exception): then
SIGXCPU at the limit itself, or the wall clock a little before the host's timeout, cuts
the run, and the calls recorded so far are written all the same, with the token and the
cut reported (:func:`watch_limits`).
"""

import ast
import builtins
import collections
import datetime
import dis
import enum
import hashlib
import inspect
import io
import keyword
import os
import re
import resource
import signal
import sys
import tempfile
import textwrap
import threading
import time
import types

try:
    from . import protocol
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]

MAX_SOURCE = 2000
MAX_DEPTH = 8
GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
RESUME = dis.opmap.get("RESUME")
STDLIB = frozenset(sys.stdlib_module_names)
VALUE_TYPES = {
    "Decimal": "decimal",
    "Fraction": "fractions",
    "date": "datetime",
    "datetime": "datetime",
    "time": "datetime",
    "timedelta": "datetime",
    "timezone": "datetime",
    "UUID": "uuid",
    "PurePosixPath": "pathlib",
    "PosixPath": "pathlib",
    "PureWindowsPath": "pathlib",
}
ADDRESS = re.compile(r"\bat 0x[0-9a-fA-F]+")
"""An object's address in a repr: never source, and another every run."""
TEMPORARY_NAME = re.compile(r"(?<=[/\\])tmp[a-z0-9_]{8}(?![A-Za-z0-9_])")
"""A path component named by :mod:`tempfile` (``tmp`` and eight random characters)."""


class Unrepresentable(Exception):
    """A value that cannot be written back as source."""


class TestTimeout(BaseException):
    """A test ran past its timer (a BaseException: tests' handlers must not swallow it)."""


WALL_FACTOR = 6
"""A test's timer counts its CPU time (work, not seconds: the same on a loaded machine);
the wall clock stops it only at this many times that limit (a test that sleeps or waits),
a safety limit whose stops are counted and reported."""
_WALL_STOPS: list = []


def _on_cpu_timer(signum, frame):
    raise TestTimeout("the test ran past its CPU time limit")


_ALARM_GUARD: list = [None]
"""The :class:`protocol.WallGuard` of the wall-clock timer armed (a test's, or a collection's)."""


def _arm_wall_timer(seconds):
    """Arm the wall-clock safety timer (``seconds`` > 0) or disarm it (0): a guard that
    stretches while the process computes (:class:`protocol.WallGuard`)."""
    _ALARM_GUARD[0] = protocol.WallGuard(seconds) if seconds else None
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _on_alarm(signum, frame):
    guard = _ALARM_GUARD[0]
    if guard is not None and not guard.expired():  # computing on a loaded machine: not a wait
        signal.setitimer(signal.ITIMER_REAL, max(0.01, 0.1 * guard.seconds))
        return
    _WALL_STOPS.append(1)
    raise TestTimeout("the test ran past its wall-clock safety limit")


class Serializer:
    """Write values back as Python source; raise :class:`Unrepresentable` otherwise."""

    def __init__(self, root):
        self.root = root
        self._files = {}
        places = {root, os.path.realpath(root), tempfile.gettempdir()}
        self._run_places = sorted({p for p in places | {os.path.realpath(p) for p in places} if len(p) > 1})
        self.referenced = {}
        """Repository classes and functions the sources written since it was last emptied
        name: qualified name -> module (the host puts them in the script)."""

    def is_repository_file(self, path):
        """A file of the repository that is not a test file (its names exist in the script)."""
        if not path:
            return False
        if path not in self._files:
            real = os.path.realpath(path)
            rel = os.path.relpath(real, self.root)
            parts = rel.replace(os.sep, "/").split("/")
            name = parts[-1]
            self._files[path] = (
                not rel.startswith("..")
                and name.endswith(".py")
                and not any(p in ("test", "tests", "testing") for p in parts[:-1])
                and not name.startswith(("test_", "conftest"))
                and not name.endswith("_test.py")
            )
        return self._files[path]

    def run_specific(self, text):
        """Does the source ``text`` name a path that is another in every run: the run's
        directory (the working directory, ``HOME`` and ``TMPDIR``, with the sandbox's run
        number in it) or a file :mod:`tempfile` named at random? Written into a task, it
        would make two builds of the same sdist differ (boltons' ``SpooledBytesIO`` tests
        pass ``dir=`` a temporary directory) and name a place the task's runs do not have."""
        return any(place in text for place in self._run_places) or TEMPORARY_NAME.search(text) is not None

    def to_source(self, value, depth=0, path=None):
        """Python source that evaluates to a value equal in state to ``value``."""
        if depth > MAX_DEPTH:
            raise Unrepresentable("too deep")
        kind = type(value)
        if value is None or kind is bool or kind is int:
            return repr(value)
        if kind is float:
            return repr(value) if value == value and abs(value) != float("inf") else "float('%r')" % value
        if kind is complex:
            return "complex(%s, %s)" % (self.to_source(value.real), self.to_source(value.imag))
        if kind is str or kind is bytes:
            if len(value) > MAX_SOURCE:
                raise Unrepresentable("too long")
            return repr(value)
        path = set() if path is None else path
        if id(value) in path:
            raise Unrepresentable("cycle")
        path.add(id(value))
        try:
            return self._composite(value, depth + 1, path)
        finally:
            path.discard(id(value))

    def _composite(self, value, depth, path):
        kind = type(value)
        if kind in (list, tuple, set, frozenset, dict):
            return self._container(value, depth, path)
        if kind is bytearray:
            return "bytearray(%r)" % bytes(value)
        if kind is range:
            return repr(value)
        if isinstance(value, enum.Enum):
            return "%s.%s" % (self.class_source(kind), value.name)
        if isinstance(value, type):
            return self.class_source(value)
        if callable(value) and not hasattr(value, "__dict__") or isinstance(value, types.FunctionType):
            return self.function_source(value)
        return self._object(value, depth, path)

    def _container(self, value, depth, path):
        if isinstance(value, dict):
            items = [
                "%s: %s" % (self.to_source(k, depth, path), self.to_source(v, depth, path)) for k, v in value.items()
            ]
            return "{" + ", ".join(items) + "}"
        items = [self.to_source(v, depth, path) for v in value]
        if isinstance(value, (set, frozenset)):
            items.sort()
            body = "{" + ", ".join(items) + "}" if items else ""
            return ("frozenset(%s)" % body) if isinstance(value, frozenset) else (body or "set()")
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"

    def _object(self, value, depth, path):
        kind = type(value)
        module = kind.__module__.split(".")[0]
        if kind.__name__ in VALUE_TYPES and VALUE_TYPES[kind.__name__] == kind.__module__:
            return self._value_type(value, depth, path)
        if module == "collections" and isinstance(
            value, (collections.OrderedDict, collections.deque, collections.Counter)
        ):
            return self._collection(value, depth, path)
        if isinstance(value, tuple) and hasattr(kind, "_fields"):
            fields = ", ".join("%s=%s" % (f, self.to_source(getattr(value, f), depth, path)) for f in kind._fields)
            return "%s(%s)" % (self.class_source(kind), fields)
        if module == "functools" and kind.__name__ == "partial":
            parts = [self.to_source(value.func, depth, path)] + [self.to_source(a, depth, path) for a in value.args]
            parts += self._keywords(value.keywords, depth, path)
            return "__import__('functools').partial(%s)" % ", ".join(parts)
        if (module, kind.__name__) in (("argparse", "Namespace"), ("types", "SimpleNamespace")):
            fields = ", ".join(self._keywords(vars(value), depth, path))
            return "__import__(%r).%s(%s)" % (module, kind.__name__, fields)
        if kind is io.StringIO or kind is io.BytesIO:
            return self._stream(value)
        if module == "re" and kind.__name__ == "Match":
            return self._match(value, depth, path)
        if module == "re" and kind.__name__ == "Pattern":
            return "__import__('re').compile(%r, %d)" % (value.pattern, value.flags)
        return self._instance(value, depth, path)

    def _value_type(self, value, depth, path):
        """A standard-library value; an aware ``datetime`` or ``time`` as the naive one with
        its ``tzinfo`` written as source of its own (its repr names the zone's object by
        address: not source, and another text every run)."""
        if type(value).__name__ in ("date", "datetime") and abs(value.toordinal() - _clock_day()) <= 1:
            raise Unrepresentable("a date within a day of the clock's: the current date, another every build")
        zone = getattr(value, "tzinfo", None) if type(value).__name__ in ("datetime", "time") else None
        if zone is not None:
            naive = _value_type_source(value.replace(tzinfo=None), "datetime")
            return "%s.replace(tzinfo=%s)" % (naive, self.to_source(zone, depth, path))
        text = _value_type_source(value, type(value).__module__)
        if ADDRESS.search(text):
            raise Unrepresentable("a value whose repr names an object by address")
        return text

    def _keywords(self, mapping, depth, path):
        """``key=value`` texts of a call's keyword arguments; the keys that cannot be written
        so (not identifiers, or keywords such as ``class``) in one ``**{...}``."""
        plain, rest = [], []
        for k, v in mapping.items():
            text = self.to_source(v, depth, path)
            if isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k):
                plain.append("%s=%s" % (k, text))
            else:
                rest.append("%r: %s" % (k, text))
        return plain + (["**{%s}" % ", ".join(rest)] if rest else [])

    def _stream(self, value):
        """An in-memory stream, as one holding the same text or bytes at the same position
        (tablib's ``Dbf`` reads and writes the ``BytesIO`` its tests give it)."""
        if value.closed:
            raise Unrepresentable("a closed stream")
        made = "__import__('io').%s(%r)" % (type(value).__name__, value.getvalue())
        position = value.tell()
        return made if not position else "(lambda s: (s.seek(%d), s)[1])(%s)" % (position, made)

    def _match(self, value, depth, path):
        """A regex match, as the same pattern matched again at the same place."""
        again = value.re.match(value.string, value.start(), value.endpos)
        if again is None or again.span() != value.span() or again.groups() != value.groups():
            raise Unrepresentable("a match that matching again does not reproduce")
        return "__import__('re').compile(%r, %d).match(%s, %d, %d)" % (
            value.re.pattern,
            value.re.flags,
            self.to_source(value.string, depth, path),
            value.start(),
            value.endpos,
        )

    def _collection(self, value, depth, path):
        name = type(value).__name__
        if isinstance(value, collections.deque):
            inner = self.to_source(list(value), depth, path)
        else:
            inner = self.to_source(dict(value), depth, path)
        return "__import__('collections').%s(%s)" % (name, inner)

    def _instance(self, value, depth, path):
        """``_gr_build(Class, {...})`` for an instance of a repository class."""
        kind = type(value)
        module = sys.modules.get(kind.__module__)
        if not self.is_repository_file(getattr(module, "__file__", None)) or "<locals>" in kind.__qualname__:
            raise Unrepresentable("instance of %s.%s" % (kind.__module__, kind.__qualname__))
        if isinstance(value, (list, dict, set, tuple, str, bytes, int, float)):
            raise Unrepresentable("instance of a subclass of a built-in")
        state = {}
        attributes = getattr(value, "__dict__", None)
        if attributes is not None and not isinstance(attributes, dict):
            raise Unrepresentable("odd __dict__")
        state.update(attributes or {})
        for klass in kind.__mro__:
            slots = klass.__dict__.get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                    state[slot] = getattr(value, slot)
        body = ", ".join("%r: %s" % (k, self.to_source(v, depth, path)) for k, v in state.items())
        return "_gr_build(%s, {%s})" % (self.class_source(kind), body)

    def class_source(self, kind):
        """How the script names a class: built-in, standard library or repository class."""
        module = kind.__module__
        if module == "builtins" and getattr(builtins, kind.__name__, None) is kind:
            return kind.__name__
        if module.split(".")[0] in STDLIB and "<locals>" not in kind.__qualname__:
            return "__import__(%r, fromlist=['_']).%s" % (module, kind.__qualname__)
        file = getattr(sys.modules.get(module), "__file__", None)
        if self.is_repository_file(file) and "<locals>" not in kind.__qualname__:
            self.referenced[kind.__qualname__] = module
            return kind.__qualname__
        raise Unrepresentable("class %s.%s" % (module, kind.__qualname__))

    def function_source(self, fn):
        """Source for a function value: a name, an import, a lambda, or ``_gr_func(...)``."""
        name = getattr(fn, "__name__", None)
        module = getattr(fn, "__module__", None) or ""
        owner = getattr(fn, "__objclass__", None)
        if owner is not None and getattr(builtins, owner.__name__, None) is owner:
            return "%s.%s" % (owner.__name__, name)
        if module == "builtins" and getattr(builtins, name or "", None) is fn:
            return name
        if module.split(".")[0] in STDLIB and getattr(sys.modules.get(module), name or "", None) is fn:
            return "__import__(%r, fromlist=['_']).%s" % (module, name)
        if not isinstance(fn, types.FunctionType):
            raise Unrepresentable("callable %r" % type(fn).__name__)
        code = fn.__code__
        if self.is_repository_file(code.co_filename) and "<" not in fn.__qualname__ and fn.__closure__ is None:
            self.referenced[fn.__qualname__] = module
            return fn.__qualname__
        return self._defined_function(fn)

    def _defined_function(self, fn):
        """A lambda or a function of a test file that uses nothing but builtins."""
        if fn.__closure__ or not _uses_only_builtins(fn.__code__):
            raise Unrepresentable("function with free names")
        try:
            lines, _ = inspect.findsource(fn.__code__)
        except (OSError, TypeError):
            raise Unrepresentable("no source") from None
        if fn.__name__ == "<lambda>":
            return _lambda_source(lines, fn.__code__)
        source = textwrap.dedent(inspect.getsource(fn))
        if source.lstrip().startswith("@") or len(source) > MAX_SOURCE:
            raise Unrepresentable("decorated or long function")
        return "_gr_func(%r, %r)" % (source, fn.__name__)


def _clock_day():
    """Today's ordinal by the system clock (``datetime.now()`` reads it in C: the verification
    run's moved clock, :func:`shift_clock`, does not move it)."""
    return datetime.datetime.now().toordinal()


def _value_type_source(value, module):
    """A standard-library value (``date(...)``, ``Decimal(...)``) with its module imported inline."""
    text = repr(value)
    if text.startswith(module + "."):
        return re.sub(r"\b%s\." % re.escape(module), "__import__(%r)." % module, text)
    return "__import__(%r).%s" % (module, text)


def _uses_only_builtins(code):
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and not hasattr(builtins, instruction.argval):
            return False
    return all(_uses_only_builtins(c) for c in code.co_consts if isinstance(c, types.CodeType))


def _lambda_source(lines, code):
    """The source of the one lambda starting on the code's first line with its arguments."""
    names = list(code.co_varnames[: code.co_argcount])
    text = "".join(lines[code.co_firstlineno - 1 : code.co_firstlineno + 5])
    first_line = lines[code.co_firstlineno - 1] if code.co_firstlineno <= len(lines) else ""
    found = []
    for at in [m.start() for m in re.finditer(r"\blambda\b", first_line)]:
        node = _expression_at(text[at:])
        if isinstance(node, ast.Lambda) and [a.arg for a in node.args.args] == names:
            found.append(ast.unparse(node))
    if len(found) != 1:
        raise Unrepresentable("lambda source")
    return "(%s)" % found[0]


def _expression_at(text):
    """The shortest prefix of ``text`` that parses as an expression and ends where the
    expression must end (a comma, closing bracket or line end at bracket depth zero)."""
    depth = 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if depth < 0 or (depth == 0 and char in ",\n"):
            try:
                return ast.parse("(" + text[:i].strip() + "\n)", mode="eval").body
            except SyntaxError:
                if depth < 0:
                    return None
    return None


def _real_call(frame):
    """False when a generator or coroutine frame is being resumed rather than started."""
    code = frame.f_code.co_code
    lasti = frame.f_lasti
    if RESUME is None or not 0 <= lasti < len(code) - 1 or code[lasti] != RESUME:
        return lasti < 0
    return code[lasti + 1] == 0


class Recorder:
    """A ``sys.settrace`` hook that records calls of the targets as source."""

    _UNSEEN = object()

    def __init__(self, targets, root, max_calls, verify=False):
        self.serializer = Serializer(root)
        self.verify = verify
        """The verification run (:func:`main`): every call the tests make is recorded, as a
        digest in :attr:`digests`, with no pool or share to fill."""
        self.digests = {t["key"]: set() for t in targets}
        self.by_file = {}
        for target in targets:
            path = os.path.realpath(os.path.join(root, target["file"]))
            for line in target["lines"]:
                self.by_file.setdefault(path, {})[line] = target
        self._resolved = {}
        self._defaults = {}
        self.calls = {t["key"]: [] for t in targets}
        self.reserve = {t["key"]: [] for t in targets}
        """Calls past a test function's share (the cases of one parametrized test beyond
        the first few): used only where the other tests gave too few."""
        self.seen = {t["key"]: set() for t in targets}
        self.attempts = collections.Counter()
        self.per_test = collections.Counter()
        self.per_function = collections.Counter()
        self.skipped = collections.Counter()
        self.reasons = {}
        self.pool, self.per_test_cap = 3 * max_calls, max(2, max_calls // 4)
        self.max_attempts = 50 * max_calls
        self.current_test = ""
        self.stopped = False
        """Set when the run is cut: a test still running records nothing more."""
        self.events = 0
        """Calls the hook has seen (every Python call while tracing is on): the tracing
        budget counts these, work that a loaded machine does not change."""

    def trace(self, frame, event, arg):
        self.events += 1
        code = frame.f_code
        lines = self._resolved.get(code.co_filename, self._UNSEEN)
        if lines is self._UNSEEN:
            lines = self._resolved[code.co_filename] = self.by_file.get(os.path.realpath(code.co_filename))
        if lines is None:
            return None
        target = lines.get(code.co_firstlineno)
        if target is None or code.co_name != target["name"]:
            return None
        if code.co_flags & GENERATOR_FLAGS and not _real_call(frame):
            return None
        self.record(target, frame)
        return None

    def saturated(self):
        """Every target has all the calls it may record: tracing can stop."""
        if self.verify:
            return False
        return all(len(self.calls[k]) >= self.pool or self.attempts[k] >= self.max_attempts for k in self.calls)

    def record(self, target, frame):
        key = target["key"]
        if self.verify:
            self._record_digest(key, target, frame)
            return
        if (
            self.stopped
            or self.attempts[key] >= self.max_attempts
            or len(self.calls[key]) >= self.pool
            or self.per_test[(key, self.current_test)] >= self.per_test_cap
        ):
            return
        function = test_function(self.current_test)
        spare = self.per_function[(key, function)] >= self.per_test_cap
        if spare and len(self.reserve[key]) >= self.pool:
            return
        self.attempts[key] += 1
        try:
            call = self.describe(target, frame)
        except Exception as exc:
            self.skipped[key] += 1
            self.reasons[key] = str(exc)[:200]
            return
        if call in self.seen[key]:
            return
        self.seen[key].add(call)
        self.per_test[(key, self.current_test)] += 1
        if spare:
            self.reserve[key].append((function, self.current_test, call))
            return
        self.calls[key].append((function, self.current_test, call))
        self.per_function[(key, function)] += 1

    def _record_digest(self, key, target, frame):
        if self.stopped or self.attempts[key] >= self.max_attempts:
            return
        self.attempts[key] += 1
        try:
            call = self.describe(target, frame)
        except Exception:
            return
        self.digests[key].add(call_digest(call[:3]))

    def describe(self, target, frame):
        """``(instance, args, kwargs)`` sources of the call starting in ``frame``."""
        code, values = frame.f_code, frame.f_locals
        self.serializer.referenced = {}
        count = code.co_argcount + code.co_kwonlyargcount
        names = list(code.co_varnames[: code.co_argcount])
        varargs = code.co_varnames[count] if code.co_flags & inspect.CO_VARARGS else None
        varkw = code.co_varnames[count + bool(varargs)] if code.co_flags & inspect.CO_VARKEYWORDS else None
        instance, posonly = None, code.co_posonlyargcount
        if target["kind"] in ("method", "property", "classmethod") and names:
            receiver = values[names.pop(0)]
            posonly = max(0, posonly - 1)
            if target["kind"] != "classmethod":
                instance = self.serializer.to_source(receiver)
        defaults = self.defaults(target, frame)
        extra = list(values[varargs]) if varargs else []
        args, kwargs, omitted = [], [], False
        for i, name in enumerate(names):
            value = values[name]
            if i >= posonly and not extra and name in defaults and value is defaults[name]:
                omitted = True
                continue
            (
                kwargs.append((name, self.serializer.to_source(value)))
                if omitted
                else args.append(self.serializer.to_source(value))
            )
        if not omitted:
            args.extend(self.serializer.to_source(v) for v in extra)
        for name in code.co_varnames[code.co_argcount : count]:
            if not (name in defaults and values[name] is defaults[name]):
                kwargs.append((name, self.serializer.to_source(values[name])))
        if varkw:
            kwargs.extend((k, self.serializer.to_source(v)) for k, v in values[varkw].items())
        if any(self.serializer.run_specific(text) for text in (instance or "", *args, *(v for _, v in kwargs))):
            raise Unrepresentable("a value naming the run's directory or a temporary file: another path every run")
        return (*_render(instance, args, kwargs), tuple(sorted(self.serializer.referenced.items())))

    def defaults(self, target, frame):
        """Parameter name -> default object of the target (found once per target)."""
        key = target["key"]
        if key not in self._defaults:
            self._defaults[key] = _find_defaults(target, frame)
        return self._defaults[key]

    def selected(self, key, limit):
        """Up to ``limit`` recorded calls (:func:`select`)."""
        return select(
            [(f, _call_dict(c)) for f, _, c in list(self.calls[key])],  # copies: a cut run's
            [(f, _call_dict(c)) for f, _, c in list(self.reserve[key])],  # tests may still run
            limit,
        )

    def recorded(self, key):
        """Every call recorded for ``key``, the reserve's after: ``[function, test id,
        call, reserve?]`` (a verification run then tells which to keep: :func:`select`)."""
        return [
            [f, t, _call_dict(c), spare]
            for spare, recorded in ((False, list(self.calls[key])), (True, list(self.reserve[key])))
            for f, t, c in recorded
        ]


def _call_dict(call):
    instance, args, kwargs, names = call
    return {"instance": instance, "args": args, "kwargs": kwargs, "names": dict(names)}


def call_digest(call):
    """A short digest of a call's ``(instance, args, kwargs)`` sources."""
    return hashlib.sha256(repr(tuple(call)).encode("utf-8", "surrogatepass")).hexdigest()[:20]


def select(calls, reserve, limit):
    """Up to ``limit`` of the recorded ``(test function, call)`` pairs ``calls``, taken
    round-robin over the test functions that made them (the cases of a parametrized test
    are one function), then of ``reserve`` likewise."""
    out = []
    for recorded in (calls, reserve):
        by_test = collections.OrderedDict()
        for test, call in recorded:
            by_test.setdefault(test, []).append(call)
        while len(out) < limit and any(by_test.values()):
            for found in by_test.values():
                if found and len(out) < limit:
                    out.append(found.pop(0))
    return out


def shift_clock(seconds):
    """Move the clock the standard library's Python functions read ``seconds`` ahead: ``time``'s
    ``time``, ``time_ns``, ``localtime``, ``gmtime``, ``ctime``, ``asctime`` and ``strftime``
    (without a time given), and with ``time.time`` ``date.today()`` and ``datetime.today()``.
    The verification run's clock (:func:`main`): a call whose values the clock decides is
    another call there. (``datetime.now()`` reads the system clock in C; its values differ
    between the two runs by the time between them, and the serializer refuses dates within a
    day of it: ``datetime.now().date()`` is the same in both.) Set before the tests are imported, so that a
    ``from time import time`` gets the moved one; pytest's own timing, imported before,
    and the monotonic clocks the guards read are left alone."""
    real_time, real_time_ns = time.time, time.time_ns
    real_localtime, real_gmtime, real_strftime = time.localtime, time.gmtime, time.strftime
    real_ctime, real_asctime = time.ctime, time.asctime
    nanoseconds = int(seconds * 1e9)

    def moved_time():
        return real_time() + seconds

    def moved_time_ns():
        return real_time_ns() + nanoseconds

    def moved(seconds_since=None):
        return moved_time() if seconds_since is None else seconds_since

    time.time, time.time_ns = moved_time, moved_time_ns
    time.localtime = lambda secs=None: real_localtime(moved(secs))
    time.gmtime = lambda secs=None: real_gmtime(moved(secs))
    time.ctime = lambda secs=None: real_ctime(moved(secs))
    time.asctime = lambda t=None: real_asctime(real_localtime(moved_time()) if t is None else t)
    time.strftime = lambda fmt, t=None: real_strftime(fmt, real_localtime(moved_time()) if t is None else t)


def derandomize_hypothesis(config):
    """Hypothesis's examples the same in every run, where its pytest plugin is loaded: a
    fixed seed, no deadline (a loaded machine would fail examples and shrink them into other
    calls) and no example database, the defaults of every profile the tests register after.
    Set as its options, before its own ``pytest_configure`` reads them: importing Hypothesis
    any earlier warns that pytest cannot rewrite its modules, an error under
    ``filterwarnings = error``. Without it a property-based suite traces other calls, so
    gives other tasks, each build."""
    if not hasattr(config.option, "hypothesis_seed"):
        return
    try:
        from hypothesis import settings

        settings.register_profile("gym-repost", deadline=None, derandomize=True, database=None)
    except Exception:
        return
    config.option.hypothesis_profile = "gym-repost"
    config.option.hypothesis_seed = "0"


def test_function(nodeid):
    """The test function of a test id: its parameters (``test_x[1-2]``) left out."""
    return nodeid.split("[", 1)[0]


def _render(instance, args, kwargs):
    args_source = "(" + ", ".join(args) + ("," if len(args) == 1 else "") + ")"
    kwargs_source = "{" + ", ".join("%r: %s" % (k, v) for k, v in kwargs) + "}"
    if len(args_source) + len(kwargs_source) + len(instance or "") > 2 * MAX_SOURCE:
        raise Unrepresentable("too long")
    return instance, args_source, kwargs_source


def _find_defaults(target, frame):
    """Defaults of the function object whose code runs in ``frame``, or {}."""
    code = frame.f_code
    holder = frame.f_globals
    obj = holder.get(target["name"])
    if target.get("class_name"):
        owner = holder.get(target["class_name"].split(".")[0])
        for part in target["class_name"].split(".")[1:]:
            owner = getattr(owner, part, None)
        raw = next((vars(k)[target["name"]] for k in getattr(owner, "__mro__", ()) if target["name"] in vars(k)), None)
        obj = getattr(raw, "__func__", None) or getattr(raw, "fget", None) or raw
    for _ in range(10):
        if obj is None or getattr(obj, "__code__", None) is code:
            break
        obj = getattr(obj, "__wrapped__", None) or getattr(obj, "func", None)
    if obj is None or getattr(obj, "__code__", None) is not code:
        return {}
    names = code.co_varnames[: code.co_argcount]
    positional = dict(zip(names[len(names) - len(obj.__defaults__ or ()) :], obj.__defaults__ or ()))
    return {**positional, **(obj.__kwdefaults__ or {})}


def make_plugin(pytest, recorder, deadline, per_test, cpu_limit=float("inf"), max_events=float("inf"), only=None):
    """A pytest plugin: tracing, a timer per test, the budget (``max_events`` calls seen
    by the hook: counted work), safety limits (CPU time, the wall clock), collection
    timers, counts; ``only``: the set of test ids to run (the others deselected)."""

    class TracePlugin:
        tests_run = 0
        failed = 0
        stopped_by = None
        """What stopped the suite early: ``"call budget"`` (counted), ``"saturated"`` (every
        target has the calls it may record), ``"cpu budget"`` or ``"deadline"`` (safety
        limits: CPU time and the wall clock's), or None."""

        @pytest.hookimpl(tryfirst=True)
        def pytest_configure(self, config):
            derandomize_hypothesis(config)

        def pytest_collection_modifyitems(self, session, config, items):
            if only is not None:  # the verification run: the tests that recorded calls
                protocol.keep_only(config, items, only)

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            passed, cpu_left = deadline.expired(), cpu_limit - time.process_time()
            why = (
                "call budget"
                if recorder.events >= max_events
                else "saturated"
                if recorder.saturated()
                else "cpu budget"
                if cpu_left <= 0
                else "deadline"
                if passed
                else None
            )
            if why is not None:  # this test is the last: pytest stops after it
                item.session.shouldstop = "the tracing stopped: %s" % why
                self.stopped_by = self.stopped_by or why
            recorder.current_test = item.nodeid
            protocol.seed_generators(0)  # a test's draws: the same in every run
            if not recorder.saturated():
                sys.settrace(recorder.trace)
                threading.settrace(recorder.trace)
            signal.setitimer(signal.ITIMER_PROF, max(0.05, min(per_test, cpu_left)))
            _arm_wall_timer(max(0.05, per_test * WALL_FACTOR))
            try:
                yield
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                # counted here: a timer that fired after the test's body, on the way back to
                # this wrapper, skipped a count made after the ``finally``, and a test that
                # had recorded calls was not among the tests run (now and then, on a suite
                # stopped by its CPU budget)
                self.tests_run += 1
                _arm_wall_timer(0)
                sys.settrace(None)
                threading.settrace(None)
                recorder.current_test = ""

        def pytest_runtest_logreport(self, report):
            if report.failed:
                self.failed += 1

        @pytest.hookimpl(hookwrapper=True)
        def pytest_make_collect_report(self, collector):
            _arm_wall_timer(30.0)
            try:
                yield
            finally:
                _arm_wall_timer(0)

    return TracePlugin()


def cpu_deadline(margin=8.0):
    """CPU seconds (``time.process_time``) at which to stop: before RLIMIT_CPU kills the run
    (``margin`` before it, at most a quarter of it)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
    return float("inf") if soft == resource.RLIM_INFINITY else max(1.0, soft - min(margin, soft / 4))


class TraceRun:
    """One tracing run: pytest in-process, then the result on standard output.

    If the CPU limit is reached anyway (SIGXCPU, sent a second before the kill), or the run
    is still going at its cut time, it reports what it recorded so far (:func:`watch_limits`).
    """

    def __init__(self, token, config, recorder):
        self.token, self.config, self.recorder = token, config, recorder
        self.plugin, self.code, self.error = None, None, None
        self.captured = io.StringIO()
        self.captured_err = io.StringIO()
        """pytest's standard error: where it says a ``conftest.py`` failed to load."""
        self.deadline = protocol.WallGuard(float(config.get("deadline", 240)))
        """When the suite stops before the next test (a wall-clock guard that stretches while
        the tests compute: :class:`protocol.WallGuard`)."""
        self.cut_at = protocol.WallGuard(float(config.get("cut", float(config.get("deadline", 240)) + 10)))
        """When a run still going is cut (a guard likewise; the host's timeout is later)."""
        self.cut = None
        """``(what, test)`` when the run was cut: ``"cpu"`` (SIGXCPU) or ``"deadline"``, and
        the test that was running (``""``: none)."""
        self.cpu_limit = resource.getrlimit(resource.RLIMIT_CPU)[0]
        """The soft limit as the run began (the kernel raises it by a second with each SIGXCPU)."""
        self.stdout_fd = protocol.keep_stdout()
        """The real standard output: pytest's fd capture points fd 1 at a temporary file
        while a test runs, and SIGXCPU can end the run right then."""
        self._finishing = threading.Lock()

    def run(self):
        saved, saved_err = sys.stdout, sys.stderr
        try:
            import pytest

            verify = self.config.get("verify")
            self.plugin = make_plugin(
                pytest,
                self.recorder,
                self.deadline,
                float(self.config.get("test_timeout", 10)),
                cpu_deadline(),
                float(self.config.get("max_events", float("inf"))),
                set(verify["tests"]) if verify else None,
            )
            if verify:
                shift_clock(float(verify["clock_shift"]))
            sys.stdout, sys.stderr = self.captured, self.captured_err
            args = [*protocol.pytest_compat_args(pytest), *self.config["args"]]
            self.code = int(pytest.main(args, plugins=[self.plugin]))
        except BaseException as exc:
            self.error = "%s: %s" % (type(exc).__name__, str(exc)[:300])
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.settrace(None)
            threading.settrace(None)
            sys.stdout, sys.stderr = saved, saved_err
        self.finish()

    def on_limit(self, what):
        """SIGXCPU (``what="cpu"``) or the cut time (``"deadline"``), on the watching thread
        while a test may still run: report what was recorded."""
        self.recorder.stopped = True
        test = self.recorder.current_test
        self.cut = (what, test)
        limit = "the CPU time limit (%s s)" % self.cpu_limit if what == "cpu" else "the wall clock's deadline"
        self.error = "%s cut the run%s; the calls recorded so far are kept" % (limit, " during " + test if test else "")
        self.finish()

    def finish(self):
        """Write the result and the token, then exit; whichever thread comes second waits here."""
        self._finishing.acquire()
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        result = summary(
            self.config,
            self.recorder,
            self.plugin,
            self.code,
            self.captured.getvalue(),
            self.error,
            self.cut,
            self.captured_err.getvalue(),
        )
        protocol.write_result(result, self.token, compress=True, fd=self.stdout_fd)
        os._exit(0)


def watch_limits(on_limit, cut_at):
    """Call ``on_limit("cpu")`` when SIGXCPU arrives, or ``on_limit("deadline")`` once the
    guard ``cut_at`` (a :class:`protocol.WallGuard`) has passed, on a thread of its own.

    Not a signal handler: Python runs those in the main thread only, between two bytecodes,
    and SIGXCPU goes to whichever thread runs when the limit is reached. A test whose main
    thread waits in ``join()`` for threads that compute (more-itertools' concurrency tests)
    deferred the handler past the SIGKILL one CPU second later, and nothing was reported.
    SIGXCPU is blocked here, before any other thread exists (they inherit the mask), and
    this thread takes it with ``sigtimedwait``; it then needs only the GIL, which a waiting
    main thread does not hold. (A single C call that holds the GIL past that second still
    loses the result: the host then reports the missing token. Processes the tests start
    inherit the mask: past their own CPU limit they get SIGKILL, a second later than SIGXCPU.)
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGXCPU})

    def wait():
        while not cut_at.expired():
            if signal.sigtimedwait({signal.SIGXCPU}, max(0.05, min(1.0, cut_at.left()))) is not None:
                on_limit("cpu")
        on_limit("deadline")

    threading.Thread(target=wait, name="gym-repost-limits", daemon=True).start()


def summary(config, recorder, plugin, code, output, error, cut=None, err_output=""):
    """The JSON-able result of a tracing run (``cut``: see :attr:`TraceRun.cut`;
    ``err_output``: pytest's standard error, where a ``conftest.py`` that failed to load
    is reported, with its exception on the ``E`` lines)."""
    cut_by = cut[0] if cut else None
    limit = int(config.get("max_calls", 20))
    errors = protocol.pytest_problems(err_output, 4)
    errors += [line.strip()[:300] for line in output.split("\n") if line.startswith(("ERROR", "INTERNALERROR"))]
    stopped_by = plugin.stopped_by if plugin else None
    verify = bool(config.get("verify"))
    return {
        "calls": {} if verify else {key: recorder.selected(key, limit) for key in recorder.calls},
        "pools": {key: recorder.recorded(key) for key in recorder.calls} if config.get("pools") else {},
        "digests": {key: sorted(found) for key, found in recorder.digests.items()} if verify else {},
        "missing": protocol.missing_modules(output + err_output + (error or "")),
        "undefined": protocol.undefined_names(output),
        "errors": ([error] if error else []) + errors[:10],
        "tests_run": plugin.tests_run if plugin else 0,
        "tests_failed": plugin.failed if plugin else 0,
        "deadline_hit": stopped_by == "deadline" or cut_by == "deadline",
        "cpu_limit_hit": stopped_by == "cpu budget" or cut_by == "cpu",
        "budget_hit": stopped_by == "call budget",
        "events": recorder.events,
        "cpu": time.process_time(),
        "cut": cut_by is not None,
        "wall_stops": len(_WALL_STOPS),
        "exit_code": code,
        "skipped": dict(recorder.skipped),
        "skip_reasons": dict(recorder.reasons),
    }


def main():
    config = protocol.read_config(token=True)
    token = protocol.read_token()
    protocol.hold_low_descriptors()
    protocol.script_idioms_off()
    root = os.getcwd()
    for extra in reversed([root] + [os.path.join(root, p) for p in config.get("sys_path", [])]):
        sys.path.insert(0, extra)
    recorder = Recorder(config["targets"], root, int(config.get("max_calls", 20)), verify=bool(config.get("verify")))
    run = TraceRun(token, config, recorder)
    signal.signal(signal.SIGPROF, _on_cpu_timer)
    signal.signal(signal.SIGALRM, _on_alarm)
    watch_limits(run.on_limit, run.cut_at)
    run.run()


if __name__ == "__main__":
    main()
