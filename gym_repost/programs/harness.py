"""The function-task harness: run an evaluation script and record its target's calls.

Started as ``python3 _gym_repost_harness.py``; its configuration (see
:mod:`gym_repost.programs`) is::

    {"script": "evaluation.py", "start": N, "end": M, "mode": MODE,
     "inputs": "_gym_repost_inputs.json" or null}

followed by the completion token, read at once (the code under test runs in this process).

The script it runs holds no original implementation of the target: the host replaced
the original definition with the code under test, bound to both names and wrapped by
``__gym_repost_record__``, which records every outermost call: a digest of the
arguments before and after the call, of the return value (generators are drained), of
the exception's type, of the printed output (standard output and error together) and of
the warnings issued (category and message), and a short text of the result. MODE:

* ``reference`` (the ground truth is the code under test): run the tests, record, and
  also pickle each call's arguments so the calls can be replayed without the tests;
* ``driver``: run the tests, record;
* ``inputs``: the script holds no tests; replay the pickled arguments of the reference
  calls, record;
* ``playback`` (the ground truth is in the script, the code under test is not): run the
  tests with ``{name}_new_implementation`` answering from a candidate's record (the
  ``playback`` file: per call, the digest of its arguments and either its return value as
  a literal or null, "what the ground truth returns"); the result says whether the tests
  completed and every call was answered.

In ``inputs`` and ``driver`` runs with ``"literals": true`` in the configuration (a task
whose tests may judge values, see the host's ``playback_script``), a return value made only of literals (numbers,
strings, bytes, None and lists, tuples, dicts and sets of them) is also recorded as such
(``rl``), so that the host can let the task's own tests judge a value that differs from
the reference's (a float within the test's tolerance, another valid answer): plain data
as :mod:`values` carries it, which cannot carry behaviour.

The result is the record, with ``report``: None when the script completed, else why it
did not (exception, frames, failing assertion). The completion token follows only when
the script completed. The host decides the verdict by comparing the record with the
reference's, recorded in a separate run: nothing printed here is trusted for a pass
except data that only a correct implementation produces.
"""

import ast
import base64
import builtins
import functools
import gc
import hashlib
import io
import itertools
import json
import linecache
import marshal
import math
import os
import pickle
import random
import re
import resource
import sys
import threading
import time
import traceback
import types
import warnings

try:
    from . import protocol, values
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]
    import _gym_repost_values as values  # type: ignore[no-redef,import-not-found]

_MAX_REPR = 400
MAX_CALLS = 2000
MAX_ITEMS = 10000
MAX_DEPTH = 24
MAX_NODES = 20000
"""Values one digest describes at most; past them a value reads as its type and its repr.
An object's state may reach a library's whole object graph (an ORM model's session and
mappers), walked once per shared path: work counted, so the cut is the same in every run."""
MAX_INPUT_BYTES = 600_000
_ADDRESS = r" at 0x[0-9a-fA-F]+| id='[0-9]+'"  # object addresses (and mocks' ids)
_PLAIN = (type(None), bool, int, str)


def _no_address(text):
    """``text`` without object addresses, so that the same value reads the same in every run.

    Compiled only when needed: compiling the pattern was ~0.5 ms of every run.
    """
    if " at 0x" not in text and " id='" not in text:
        return text
    return re.sub(_ADDRESS, "", text)


def _whole_repr(value):
    """``repr(value)`` without addresses, up to 20,000 characters (what a value compared by
    its repr is compared by)."""
    try:
        return _no_address(repr(value))[:20000]
    except BaseException as exc:
        return "<repr failed: %s>" % type(exc).__name__


def _short_repr(value):
    try:
        text = repr(value)
    except BaseException as exc:
        text = "<repr failed: %s>" % type(exc).__name__
    text = _no_address(text)
    if len(text) > _MAX_REPR:
        text = text[: _MAX_REPR // 2] + " ... " + text[-_MAX_REPR // 2 :]
    return text


def _find_assert(path, lineno):
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and node.lineno <= lineno <= (node.end_lineno or lineno):
            return node
    return None


def _explain_assert(path, tb_frame, lineno):
    """The failing assert's source and, for a single comparison, the value of each side,
    evaluated again: ``equal_again`` when an ``==`` now holds (what it compares keeps state
    between calls: a cache, a warning issued once; the values at the failure differed)."""
    node = _find_assert(path, lineno)
    if node is None:
        return None
    with open(path, encoding="utf-8") as fh:
        text = ast.get_source_segment(fh.read(), node) or ""
    info = {"source": text}
    test = node.test
    if isinstance(test, ast.Compare) and len(test.comparators) == 1:
        scope_globals, scope_locals = tb_frame.f_globals, dict(tb_frame.f_locals)
        values = []
        for side, expr in (("left", test.left), ("right", test.comparators[0])):
            try:
                code = compile(ast.Expression(expr), path, "eval")
                values.append(eval(code, scope_globals, scope_locals))
                info[side] = _short_repr(values[-1])
            except BaseException as exc:
                info[side] = "<raised %s: %s>" % (type(exc).__name__, str(exc)[:200])
        if len(values) == 2 and isinstance(test.ops[0], ast.Eq):
            try:
                info["equal_again"] = bool(values[0] == values[1])
            except BaseException:
                pass
    return info


def _frames(tb, script, start, end):
    frames = []
    script_abs = os.path.abspath(script)
    for frame, lineno in traceback.walk_tb(tb):
        path = frame.f_code.co_filename
        if (
            os.path.basename(path) == os.path.basename(__file__)
            or path.startswith("<frozen")
            or path.endswith(os.sep + "runpy.py")
        ):
            continue
        in_script = os.path.abspath(path) == script_abs
        in_candidate = in_script and start <= lineno <= end
        if frames and frames[-1]["_key"] == (path, lineno, frame.f_code.co_name):
            frames[-1]["repeated"] += 1
            continue
        frames.append(
            {
                "_key": (path, lineno, frame.f_code.co_name),
                "repeated": 0,
                "file": os.path.basename(path) if in_script else path,
                "line": lineno - start + 1 if in_candidate else lineno,
                "function": frame.f_code.co_name,
                "code": (linecache.getline(path, lineno) or "").strip(),
                "in_script": in_script,
                "in_candidate": in_candidate,
            }
        )
    for f in frames:
        del f["_key"]
    return frames


def _last_script_frame(tb, script):
    found = None
    script_abs = os.path.abspath(script)
    for frame, lineno in traceback.walk_tb(tb):
        if os.path.abspath(frame.f_code.co_filename) == script_abs:
            found = (frame, lineno)
    return found


def _failure_report(exc, script, start, end):
    frames = _frames(exc.__traceback__, script, start, end)
    report = {
        "status": "failed" if isinstance(exc, AssertionError) else "error",
        "exception": type(exc).__name__,
        "message": str(exc)[:2000],
        "frames": frames[-12:],
        "in_candidate": any(f["in_candidate"] for f in frames),
        "assertion": None,
    }
    if isinstance(exc, AssertionError):
        last = _last_script_frame(exc.__traceback__, script)
        if last is not None:
            report["assertion"] = _explain_assert(script, last[0], last[1])
    return report


def _exit_report(exc, script, start, end):
    frames = _frames(exc.__traceback__, script, start, end)
    from_candidate = any(f["in_candidate"] for f in frames)
    if exc.code in (None, 0) and not from_candidate:
        return None
    return {
        "status": "error",
        "exception": "SystemExit",
        "message": ("the candidate called sys.exit(%r): code under test must return, not exit" % (exc.code,))
        if from_candidate
        else "the script exited with %r" % (exc.code,),
        "frames": frames[-12:],
        "in_candidate": from_candidate,
        "assertion": None,
    }


# ------------------------------------------------------------------ canonical values


def _type_name(value):
    kind = type(value)
    return "%s.%s" % (getattr(kind, "__module__", "?"), getattr(kind, "__qualname__", kind.__name__))


def _float(value):
    if math.isnan(value) or math.isinf(value):
        return repr(value)
    return repr(float("%.10g" % value))


def _array(value, depth, active):
    shape = getattr(value, "shape", None)
    try:
        size = 1
        for n in shape:
            size *= int(n)
        if size <= MAX_ITEMS:
            return [
                "array",
                _type_name(value),
                str(getattr(value, "dtype", "")),
                _canon(value.tolist(), depth + 1, active),
            ]
        data = value.tobytes()
    except BaseException:
        return ["array?", _type_name(value)]
    return ["array", _type_name(value), str(getattr(value, "dtype", "")), str(shape), hashlib.sha1(data).hexdigest()]


_NODES = [0]


def _canon(value, depth, active):
    """A JSON-able description of ``value`` that two equal values share (floats to 10 digits)."""
    kind = type(value)
    if kind in _PLAIN:
        return value if kind is not int or abs(value) < 1 << 53 else ["int", hex(value)]
    if kind is float:
        return ["float", _float(value)]
    if depth > MAX_DEPTH:
        return ["deep", _type_name(value)]
    _NODES[0] += 1
    if _NODES[0] > MAX_NODES:
        return ["beyond", _type_name(value), _whole_repr(value)]
    if id(value) in active:
        return ["cycle", _type_name(value)]
    active.add(id(value))
    try:
        return _canon_container(value, kind, depth, active)
    except BaseException as exc:
        return ["unserializable", _type_name(value), type(exc).__name__]
    finally:
        active.discard(id(value))


def _canon_container(value, kind, depth, active):
    if kind in (list, tuple):
        items = [_canon(v, depth + 1, active) for v in value[:MAX_ITEMS]]
        return [kind.__name__, items, len(value)]
    if kind is dict:
        pairs = [
            [_canon(k, depth + 1, active), _canon(v, depth + 1, active)] for k, v in list(value.items())[:MAX_ITEMS]
        ]
        return ["dict", pairs, len(value)]
    if kind in (set, frozenset):
        items = sorted(json.dumps(_canon(v, depth + 1, active)) for v in list(value)[:MAX_ITEMS])
        return [kind.__name__, items, len(value)]
    if kind in (complex, bytes, bytearray, range, slice):
        return [kind.__name__, repr(value)]
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return ["callable", getattr(value, "__qualname__", "?")]
    if kind in (io.StringIO, io.BytesIO):
        return _stream(value)
    if isinstance(value, BaseException):
        return ["exception", _type_name(value), _canon(value.args, depth + 1, active)]
    if all(hasattr(kind, name) for name in ("tobytes", "shape", "tolist")):  # on the type: mocks fake any attribute
        return _array(value, depth, active)
    if _by_repr(kind):
        return [_type_name(value), _no_address(repr(value))[:20000]]
    # what the object holds, never only what its repr chooses to show
    base, state = _builtin_value(value), _attributes(value, kind)
    if base is None and not state:
        return [_type_name(value), _no_address(repr(value))[:20000]]
    described = [_type_name(value)]
    if base is not None:
        described.append(_canon(base, depth + 1, active))
    if state:
        described.append(_canon(state, depth + 1, active))
    return described


def _stream(value):
    """An in-memory stream (exactly ``io.StringIO`` or ``io.BytesIO``): what it holds and
    where it stands, read without moving it. Compared as an iterator, it showed only the
    lines after its position: none once a call had written to it, so what a call wrote to
    a stream argument was never compared."""
    if value.closed:
        return [type(value).__name__, "closed"]
    data = value.getvalue()
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    held = repr(data) if len(raw) <= 20000 else ["sha1", hashlib.sha1(raw).hexdigest(), len(raw)]
    return [type(value).__name__, held, value.tell()]


def _builtin_value(value):
    """The value of a subclass of a built-in type as that type holds it (read through the base
    type's own methods, which the subclass may override), or None."""
    for base, read in _BUILTIN_BASES:
        if isinstance(value, base):
            return read(value)
    return None


_BUILTIN_BASES = (
    (str, str.__str__),
    (int, int.__index__),
    (float, float.__float__),
    (bytes, bytes),
    (tuple, lambda v: list(tuple.__iter__(v))[:MAX_ITEMS]),
    (list, lambda v: list(list.__iter__(v))[:MAX_ITEMS]),
    (dict, lambda v: dict(list(dict.items(v))[:MAX_ITEMS])),
    (frozenset, lambda v: frozenset(list(frozenset.__iter__(v))[:MAX_ITEMS])),
    (set, lambda v: frozenset(list(set.__iter__(v))[:MAX_ITEMS])),
)


_VALUE_MODULES = frozenset(
    {"datetime", "decimal", "fractions", "uuid", "pathlib", "ipaddress", "enum", "re", "collections", "unittest"}
)
"""Modules whose types are compared by their repr: standard value types (a timezone, a Decimal,
a path, whose repr shows their whole value) and mocks (whose state records their calls)."""


def _by_repr(kind):
    """Whether objects of ``kind`` are compared by their repr: standard value types and mocks,
    and a library's (installed, or the standard library's) types that define one, whose state
    may reach the library's whole object graph. The task's own types, whose repr the
    repository wrote and may show less than they hold, are compared by state."""
    if kind.__repr__ is object.__repr__:
        return False
    name = getattr(kind, "__module__", None) or ""
    if name.split(".")[0] in _VALUE_MODULES:
        return True
    known = _LIBRARY.get(name)
    if known is None:
        known = _LIBRARY[name] = _is_library(name)
    return known


_LIBRARY = {}  # type: dict[str, bool]


def _is_library(name):
    """Whether module ``name`` is installed (site-packages) or part of Python itself."""
    if name in sys.builtin_module_names or name == "builtins":
        return True
    path = getattr(sys.modules.get(name), "__file__", None) or ""
    if not path:
        return False
    path = os.path.realpath(path)
    if "site-packages" in path or "dist-packages" in path:
        return True
    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    return any(path.startswith(os.path.join(root, "lib", "")) for root in roots)


def _attributes(value, kind):
    """The object's ``__dict__`` and ``__slots__`` values by name, or None when it has neither
    (as the tests' own ``_gr_state`` compares objects)."""
    found, has_state = {}, False
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict):
        has_state = True
        found.update(state)
    for klass in kind.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if not isinstance(slot, str) or slot in ("__dict__", "__weakref__"):
                continue
            has_state = True
            try:
                found[slot] = getattr(value, slot)
            except AttributeError:
                pass
    return dict(sorted(found.items(), key=lambda item: str(item[0]))) if has_state else None


def _digest(value):
    try:
        _NODES[0] = 0
        text = json.dumps(_canon(value, 0, set()), separators=(",", ":"))
    except BaseException as exc:
        text = "unserializable:" + type(exc).__name__
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


# ------------------------------------------------------------------ recording calls


def _warn_again(warned):
    """Issue the warnings a recorded call gave to the code around it (the tests' own
    catchers), which the recording caught to compare them by category and message: not
    by the text Python prints for them, which names the line that warned."""
    for w in warned:
        try:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        except Exception:  # an "error" filter around the call: it raised inside already
            pass


class _Tee(io.TextIOBase):
    def __init__(self, inner, sink):
        self.inner, self.sink = inner, sink

    def write(self, text):
        self.sink.append(str(text))
        return self.inner.write(text)

    def flush(self):
        return self.inner.flush()


class Recorder:
    """Records the outermost calls of the wrapped code under test."""

    def __init__(self, pickle_inputs, where=None):
        self.literals = False
        """Record return values as data too (``rl``): only where the host may play them back."""
        self.where = where
        self.failure = None
        self.calls = []
        self.inputs = [] if pickle_inputs else None
        self.input_bytes = 0
        self.overflow = 0
        self.targets = []
        self._local = threading.local()

    def wrap(self, obj):
        """Wrap a function (or a static/class method or property) so that its calls are recorded."""
        if isinstance(obj, staticmethod):
            return staticmethod(self.wrap(obj.__func__))
        if isinstance(obj, classmethod):
            return classmethod(self.wrap(obj.__func__))
        if isinstance(obj, property):
            return property(self.wrap(obj.fget) if obj.fget else None, obj.fset, obj.fdel, obj.__doc__)
        if not callable(obj):
            return obj
        recorder = self

        def recorded(*args, **kwargs):
            return recorder.call(obj, args, kwargs)

        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(recorded, attr, getattr(obj, attr))
            except (AttributeError, TypeError):
                pass
        recorded.__wrapped__ = obj
        self.targets.append(recorded)
        return recorded

    def call(self, func, args, kwargs):
        if getattr(self._local, "depth", 0):
            return func(*args, **kwargs)
        if len(self.calls) >= MAX_CALLS:
            self.overflow += 1
            return func(*args, **kwargs)
        entry = {"a": _digest((args, kwargs)), "ar": _short_repr(args)[:200]}
        self._pickle(args, kwargs)
        self.calls.append(entry)
        printed = []
        saved, saved_error = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(saved, printed), _Tee(saved_error, printed)
        catcher = warnings.catch_warnings(record=True)
        warned = catcher.__enter__()
        self._local.depth = 1
        drained = None
        try:
            result = func(*args, **kwargs)
            if isinstance(result, _DRAINED):
                result, drained = self._drain(result, entry)
        except BaseException as exc:
            entry["x"] = _type_name(exc)
            entry["xm"] = _short_repr(_safe_str(exc))[:300]
            entry["xd"] = _digest(_safe_str(exc))
            if self.failure is None and self.where is not None:
                self.failure = dict(_failure_report(exc, *self.where), call=len(self.calls))
            raise
        else:
            if isinstance(result, _CALLABLES):  # compared by name only: the builder drops such targets
                entry["k"] = "callable"
            entry["r"] = _digest(result if drained is None else ["iterator", drained])
            entry["rr"] = _short_repr(result if drained is None else drained)[:300]
            if self.literals and drained is None:
                literal = _literal_text(result)
                if literal is not None:
                    entry["rl"] = literal
            return result
        finally:
            self._local.depth = 0
            catcher.__exit__(None, None, None)
            sys.stdout, sys.stderr = saved, saved_error
            entry["p"] = _digest((args, kwargs))
            entry["o"] = hashlib.sha1("".join(printed).encode("utf-8", "surrogatepass")).hexdigest()[:24]
            if warned:
                entry["w"] = _digest([(_type_name(w.message), _safe_str(w.message)) for w in warned[:20]])
            _warn_again(warned)

    def _drain(self, iterator, entry):
        """The items of a returned iterator, drained now so that they are compared one by
        one, and an iterator giving the same items to the caller. Past :data:`MAX_ITEMS`
        items (one more exists) ``g`` is ``partial`` and the caller gets the rest lazily.
        An exception it raises is recorded (``gx``) with the items before it, and raised
        again to the caller after them."""
        items = []
        try:
            for item in iterator:
                if len(items) == MAX_ITEMS:
                    entry["g"] = "partial"
                    return _chain(items, item, iterator), items
                items.append(item)
        except BaseException as exc:
            entry["gx"] = _type_name(exc)
            return _then_raise(items, exc), items
        return iter(items), items

    def _pickle(self, args, kwargs):
        if self.inputs is None:
            return
        try:
            blob = pickle.dumps((args, kwargs), protocol=4)
        except BaseException:
            blob = None
        if blob is not None:
            self.input_bytes += len(blob)
        self.inputs.append(
            None if blob is None or self.input_bytes > MAX_INPUT_BYTES else base64.b64encode(blob).decode("ascii")
        )

    def replay(self, path):
        """Call the first wrapped target with each pickled argument list in ``path``."""
        with open(path, encoding="utf-8") as fh:
            blobs = json.load(fh)
        target = self.targets[0] if self.targets else None
        for blob in blobs:
            if target is None:
                self.calls.append({"a": "no-target"})
                continue
            args, kwargs = pickle.loads(base64.b64decode(blob))
            try:
                result = target(*args, **kwargs)
                if hasattr(result, "__next__") and not isinstance(result, types.GeneratorType):
                    list(result)
            except Exception:
                pass

    def record(self, completed):
        return {
            "calls": self.calls,
            "overflow": self.overflow,
            "completed": completed,
            "inputs": self.inputs,
            "failure": self.failure,
        }


_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)
"""Returned values compared by their name, not by what they do."""

_DRAINED = (
    types.GeneratorType,
    map,
    filter,
    zip,
    enumerate,
    reversed,
    *{type(iter(sample)) for sample in ([], (), range(0), "", b"", {}, set(), frozenset())},  # type: ignore[var-annotated]
    type(iter({}.values())),
    type(iter({}.items())),
    *(
        getattr(itertools, name)
        for name in (
            "accumulate",
            "chain",
            "combinations",
            "combinations_with_replacement",
            "compress",
            "count",
            "cycle",
            "dropwhile",
            "filterfalse",
            "islice",
            "pairwise",
            "permutations",
            "product",
            "repeat",
            "starmap",
            "takewhile",
            "zip_longest",
        )
        if hasattr(itertools, name)
    ),
)
"""Iterators a target may return whose items are drained and compared (a generator, the
built-in and itertools iterators); not ``groupby`` or ``tee``, whose items are tied to them."""


def _chain(items, following, rest):
    yield from items
    yield following
    yield from rest


def _safe_str(exc):
    try:
        return _no_address(str(exc))
    except BaseException:
        return "<str failed>"


def _then_raise(items, exc):
    yield from items
    raise exc


# ------------------------------------------------------------------ literal values and playback

MAX_LITERAL = 380
"""Longest JSON text of a return value recorded as data (``rl``); longer ones are not."""


def _literal_text(value):
    """``value`` as plain data (:mod:`values`), as JSON text of at most :data:`MAX_LITERAL` characters, else None."""
    if type(value) in (str, bytes, list, tuple, dict, set, frozenset) and len(value) > MAX_LITERAL:
        return None  # too long anyway: not worth encoding
    try:
        data = values.encode(value)
        text = None if data is None else json.dumps(data, separators=(",", ":"))
    except Exception:  # whatever goes wrong, the value is just not recorded as data
        return None
    return text if text is not None and len(text) <= MAX_LITERAL else None


class Playback:
    """Answers the calls of the tests from a candidate's record; any call it cannot answer fails the run.

    Calls are matched by the digest of their arguments, first unanswered first. A call
    the record answers with null runs the original (the ground truth, whose answer the
    candidate's matched); one with a value returns that value. A miss is remembered
    (tests that catch it still fail), and so is a value no call asked for.
    """

    def __init__(self, path):
        with open(path, encoding="utf-8") as fh:
            entries = json.load(fh)
        answer = lambda text: values.decode(json.loads(text), classes=False)  # noqa: E731 - a class could claim equality
        self.entries = [(str(d), v is None, None if v is None else answer(v)) for d, v in entries]
        self.used = [False] * len(self.entries)
        self.missed = 0

    def wrap(self, original):
        playback = self

        def answered(*args, **kwargs):
            return playback.answer(original, args, kwargs)

        answered.__name__ = getattr(original, "__name__", "answered")
        return answered

    def answer(self, original, args, kwargs):
        digest = _digest((args, kwargs))
        for index, (want, same, value) in enumerate(self.entries):
            if not self.used[index] and want == digest:
                self.used[index] = True
                return original(*args, **kwargs) if same else value
        self.missed += 1
        raise AssertionError("a call the candidate's record does not answer")

    def unasked(self):
        """Values of the record that no call of the tests received."""
        return sum(1 for (_, same, _), used in zip(self.entries, self.used) if not same and not used)


def _playback(config, token):
    """Run the tests against a candidate's recorded answers; never returns."""
    try:
        playback = Playback(config["playback"])
    except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError):
        protocol.write_result({"completed": False, "missed": 0, "unasked": 0})
        protocol.exit(1)
    builtins.__gym_repost_playback__ = playback.wrap
    script = config["script"]
    sys.argv = [script]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    kind, _ = _run_script(script, None, "driver", None)
    ok = kind is None and not playback.missed and not playback.unasked()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    result = {"completed": kind is None, "missed": playback.missed, "unasked": playback.unasked()}
    protocol.write_result(result, token if ok else None)
    protocol.exit(0 if ok else 1)


# ------------------------------------------------------------------ main


def _shipped_code(shipped, source, path):
    """The script's code as the host compiled it (``shipped``: its file, the bytecode magic and
    the text's SHA-256), named ``path``; None unless this interpreter reads that bytecode and
    ``source`` is the very text compiled (then the script is compiled here, as before)."""
    if not isinstance(shipped, dict) or sys.flags.optimize:
        return None
    try:
        from importlib.util import MAGIC_NUMBER

        if shipped.get("magic") != MAGIC_NUMBER.hex():
            return None
        if hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest() != shipped.get("digest"):
            return None
        with open(shipped["file"], "rb") as fh:
            code = marshal.loads(fh.read())
        return _renamed(code, path) if isinstance(code, types.CodeType) else None
    except Exception:
        return None


def _renamed(code, path):
    """``code`` and every code object in it, as if compiled from ``path``."""
    consts = tuple(_renamed(c, path) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=path, co_consts=consts)


def _run_script(script, recorder, mode, inputs, shipped=None):
    """Execute ``script`` as ``__main__`` (and, in ``inputs`` mode, replay); the failure report or None.

    ``shipped``: the script's code as the host compiled it (see :func:`_shipped_code`)."""
    path = os.path.abspath(script)
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    code = _shipped_code(shipped, source, path)
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    random.seed(0)  # tests that draw random inputs draw the same ones in every run
    try:
        exec(code or compile(source, path, "exec", dont_inherit=True), module.__dict__)
        if mode == "inputs":
            recorder.replay(inputs)
    except SystemExit as exc:
        return "exit", exc
    except BaseException as exc:
        traceback.print_exc()
        return "error", exc
    return None, None


def main():
    config = protocol.read_config(token=True)
    token = protocol.read_token()
    if config.get("batch"):
        _batch(config, token)
    if config.get("mode") == "playback":
        _playback(config, token)
    _single(config, token)


def _single(config, token):
    """Run one script (the candidate's) and write its record; never returns."""
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    script, start, end, mode = config["script"], config["start"], config["end"], config["mode"]
    recorder = Recorder(pickle_inputs=mode == "reference", where=None if mode == "reference" else (script, start, end))
    recorder.literals = mode != "reference" and bool(config.get("literals"))
    builtins.__gym_repost_record__ = recorder.wrap
    sys.argv = [script]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    kind, exc = _run_script(script, recorder, mode, config.get("inputs"), config.get("code"))
    report = None
    if kind == "exit":
        report = _exit_report(exc, script, start, end)
    elif kind == "error":
        report = _failure_report(exc, script, start, end)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    result = dict(recorder.record(report is None), report=report)
    if mode == "reference":  # the ground truth's CPU seconds bound its replay (see the host's record_reference)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        result["cpu"] = usage.ru_utime + usage.ru_stime
    protocol.write_result(result, token if report is None else None, compress=True)
    protocol.exit(0 if report is None else 1)


# ------------------------------------------------------------------ batch (host-made candidates)


_CHILD_OUTPUT = 4_000_000
_TAIL = 8000


def _batch(config, token):
    """Run several host-made candidates, each in a child forked from one warm process.

    Only for candidates the host made from the ground truth (mutants, a do-nothing body):
    they share this process's imports and run one after another, and they see
    ``child_token``, the token their own runs end with. Each child runs exactly
    what :func:`_single` runs for one candidate, its output going to a file; its exit
    status, output and the CPU time it used are returned for the host to judge as if it
    had been a run of its own. The first entry is the ground truth: its CPU time sets the
    others' limit (``cpu_factor`` times it, at least ``cpu_floor`` seconds, at most
    ``cpu_max``), so that a mutant that loops forever costs CPU
    seconds, not a wall-clock guess that a loaded machine would change. A wall-clock guard
    (four times that, or three times the ground truth's wall time, plus 2 s; at most
    ``wall_max``) stops a child that sleeps or waits.
    """
    entries = config["batch"]
    _warm_imports(entries[0]["script"])
    gc.collect()
    gc.freeze()  # the children's collections skip (and do not copy) what is here already
    runs, used, limit = [], 0, config["cpu_max"]
    wall = config["wall_max"]
    for index, entry in enumerate(entries):
        run = _batch_child(dict(config, batch=None, **entry), config["child_token"], limit, wall)
        if index == 0 and run["returncode"] == 0:
            limit = min(config["cpu_max"], max(config["cpu_floor"], config["cpu_factor"] * run["cpu"]))
            wall = min(config["wall_max"], max(4 * limit, 3 * run["wall"]) + 2.0)
        used += len(run["stdout"]) + len(run["stderr"])
        runs.append(run)
        if used > config["max_output"]:  # the host runs the rest in another batch
            break
    protocol.write_result({"runs": runs, "cpu_limit": limit, "wall_limit": wall}, token, compress=True)
    protocol.exit(0)


def _warm_imports(script):
    """Import what the (ground truth's) script imports at its top level, once for every child."""
    try:
        with open(script, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return
    saved = sys.stdout
    sys.stdout = io.StringIO()
    try:
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                try:
                    exec(compile(ast.Module([node], []), script, "exec"), {})
                except BaseException:
                    pass
    finally:
        sys.stdout = saved


def _batch_child(config, token, cpu_limit, wall_limit):
    out_path, err_path = "_gym_repost_child.out", "_gym_repost_child.err"
    sys.stdout.flush()
    sys.stderr.flush()
    seconds = int(math.ceil(cpu_limit))
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            for fd, path in ((1, out_path), (2, err_path)):
                handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(handle, fd)
                os.close(handle)
            resource.setrlimit(resource.RLIMIT_CPU, (seconds + 1, seconds + 2))  # a backstop
            _single(config, token)
        finally:
            os._exit(70)
    status, usage, timed_out = _wait_child(pid, protocol.WallGuard(wall_limit, pid), cpu_limit)
    protocol.kill_group(pid)  # what the child started goes with it
    run = {
        "returncode": _returncode(status),
        "timed_out": timed_out,
        "cpu": usage.ru_utime + usage.ru_stime if usage is not None else 0.0,
        "wall": time.monotonic() - started,
    }
    if os.WIFSIGNALED(status) and run["cpu"] >= cpu_limit:
        run["timed_out"] = True
    for key, path in (("stdout", out_path), ("stderr", err_path)):
        run[key], too_long = _child_output(path)
        if too_long:
            run["killed_for"] = "output"
    return run


def _wait_child(pid, guard, cpu_limit):
    """Wait for the child; kill it past its CPU time or its wall-clock guard (which stretches
    while the child computes: :class:`protocol.WallGuard`)."""
    import select

    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):
        handle = None
    try:
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return status, usage, False
            if protocol.over_limit(pid, cpu_limit, guard) is not None:
                protocol.kill_group(pid)
                _, status, usage = os.wait4(pid, 0)
                return status, usage, True
            if handle is None:
                time.sleep(0.003)
            else:
                select.select([handle], [], [], 0.01)  # wakes the moment the child exits
    finally:
        if handle is not None:
            os.close(handle)


def _returncode(status):
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _child_output(path):
    """The child's output: its protocol lines whole, the rest's tail; and whether it was too long."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            data = fh.read(_CHILD_OUTPUT)
        os.unlink(path)
    except OSError:
        return "", False
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    marks = [i for i, line in enumerate(lines) if line.startswith(protocol.MARK)]
    if not marks:
        return text[-_TAIL:], size > _CHILD_OUTPUT
    first = marks[-2] if len(marks) > 1 and marks[-1] == marks[-2] + 1 else marks[-1]
    before = "\n".join(lines[:first])[-_TAIL:]
    return before + "\n" + "\n".join(lines[first:]), size > _CHILD_OUTPUT


if __name__ == "__main__":
    main()
