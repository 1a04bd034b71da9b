"""Plain data out of one process and into another (standard library only; numpy if present).

A test judged outside the code's process needs the values the code returned, carried as
data that cannot carry behaviour: a value that compares equal to everything, or that runs
code when it is read back, must not survive the trip. :func:`encode` accepts only
``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, lists, tuples
(named tuples as tuples), dicts, sets and frozensets of those, ``decimal.Decimal``,
``fractions.Fraction``, ``datetime`` values, classes (by module and name: the reading
process uses its own class of that name, among the modules it has loaded) and numpy arrays and scalars of numeric,
boolean or string dtype, by exact type (a subclass could override ``__eq__``). Anything
else is ``None``: not plain data. :func:`decode` rebuilds the value from the JSON-able form
without calling anything the data names.
"""

import base64
import datetime
import decimal
import fractions
import sys

MAX_ITEMS = 10_000
MAX_DEPTH = 32
_TIMES = {"datetime": datetime.datetime, "date": datetime.date, "time": datetime.time}


class NotPlain(Exception):
    """The value is not plain data."""


def encode(value):
    """The JSON-able form of ``value``, or None when it is not plain data."""
    try:
        return _encode(value, 0, [0])
    except (NotPlain, RecursionError, ValueError, TypeError, OverflowError):
        return None


def _encode(value, depth, count):
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_ITEMS:
        raise NotPlain("too large or too deep")
    kind = type(value)
    if value is None or kind is bool:
        return ["c", value]
    if kind is int:
        return ["i", str(value)]
    if kind is float:
        return ["f", float.__repr__(value)]
    if kind is complex:
        return ["z", float.__repr__(value.real), float.__repr__(value.imag)]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["y", base64.b64encode(value).decode("ascii")]
    if kind in (list, tuple) or (isinstance(value, tuple) and kind.__eq__ is tuple.__eq__):
        return ["l" if kind is list else "t", [_encode(v, depth + 1, count) for v in _items(value, kind)]]
    if kind is dict:
        return ["d", [[_encode(k, depth + 1, count), _encode(v, depth + 1, count)] for k, v in dict.items(value)]]
    if kind in (set, frozenset):
        return ["S" if kind is set else "F", [_encode(v, depth + 1, count) for v in kind.__iter__(value)]]
    if kind is decimal.Decimal:
        return ["D", decimal.Decimal.__str__(value)]
    if kind is fractions.Fraction:
        return ["Q", str(value.numerator), str(value.denominator)]
    for name, time_kind in _TIMES.items():
        if kind is time_kind:
            return ["T", name, time_kind.isoformat(value)]
    if kind is datetime.timedelta:
        return ["dt", value.days, value.seconds, value.microseconds]
    if isinstance(value, type) and "<locals>" not in value.__qualname__:
        return ["C", value.__module__, value.__qualname__]  # the judge's own class of that name
    return _encode_numpy(value, kind, depth, count)


def _items(value, kind):
    return list.__iter__(value) if kind is list else tuple.__iter__(value)


def _encode_numpy(value, kind, depth, count):
    numpy = sys.modules.get("numpy")
    if numpy is None:
        raise NotPlain(kind.__name__)
    if kind is numpy.ndarray:
        if value.dtype.kind not in "biufcSU" or value.dtype.fields is not None:
            raise NotPlain("array of %s" % value.dtype)
        if value.size > MAX_ITEMS:
            raise NotPlain("array too large")
        count[0] += int(value.size)
        data = numpy.ascontiguousarray(value).tobytes()
        return ["A", value.dtype.str, list(value.shape), base64.b64encode(data).decode("ascii")]
    if isinstance(value, numpy.generic) and kind.__module__ == "numpy":
        if value.dtype.kind not in "biufcSU":
            raise NotPlain("numpy %s" % value.dtype)
        return ["N", value.dtype.str, base64.b64encode(value.tobytes()).decode("ascii")]
    raise NotPlain(kind.__name__)


def decode(data, classes=True):
    """The value of an :func:`encode` form; ``classes=False`` refuses a class anywhere in it
    (ValueError): its metaclass could claim equality with anything."""
    tag = data[0]
    if tag == "c":
        return data[1]
    if tag == "i":
        return int(data[1])
    if tag == "f":
        return float(data[1])
    if tag == "z":
        return complex(float(data[1]), float(data[2]))
    if tag == "s":
        return str(data[1])
    if tag == "y":
        return base64.b64decode(data[1])
    if tag in ("l", "t"):
        items = [decode(v, classes) for v in data[1]]
        return items if tag == "l" else tuple(items)
    if tag == "d":
        return {decode(k, classes): decode(v, classes) for k, v in data[1]}
    if tag in ("S", "F"):
        items = [decode(v, classes) for v in data[1]]
        return set(items) if tag == "S" else frozenset(items)
    if tag == "D":
        return decimal.Decimal(data[1])
    if tag == "Q":
        return fractions.Fraction(int(data[1]), int(data[2]))
    if tag == "T":
        return _TIMES[data[1]].fromisoformat(data[2])
    if tag == "dt":
        return datetime.timedelta(days=data[1], seconds=data[2], microseconds=data[3])
    if tag == "C":
        if not classes:
            raise ValueError("a class is not plain data here")
        return _class(data[1], data[2])
    if tag in ("A", "N"):
        import numpy

        raw = base64.b64decode(data[-1])
        if numpy.dtype(data[1]).kind not in "biufcSU":
            raise ValueError("not a plain dtype: %r" % (data[1],))
        if tag == "N":
            return numpy.frombuffer(raw, dtype=numpy.dtype(data[1]))[0]
        return numpy.frombuffer(raw, dtype=numpy.dtype(data[1])).reshape(data[2]).copy()
    raise ValueError("unknown tag %r" % (tag,))


def _class(module_name, qualname):
    """The class of that name among the modules already loaded here (nothing is imported)."""
    found = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if not isinstance(found, type):
        raise ValueError("no class %s.%s here" % (module_name, qualname))
    return found
