"""JSON from untrusted sources, read within limits.

Agents send actions as Python values or JSON text; sandboxed programs print JSON reports
the code under test can forge. Both are read here, into plain JSON types only (``dict``
with ``str`` keys, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``), within a
size and a nesting depth, so that nothing downstream meets a subclass whose methods run
the sender's code, a structure deep enough to exhaust the interpreter's stack, or a
string a million lines long.

:func:`plain_copy` copies a value without calling any method a subclass may override:
types are checked with ``type()`` and ``issubclass`` and contents are read through the
base type's own methods (``str.__str__``, ``dict.items``). :func:`loads` parses text,
then copies. Both raise :class:`~gym_repost.errors.UntrustedDataError` with a message
saying what was wrong and where.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gym_repost.errors import UntrustedDataError

MAX_CHARS = 1_000_000
"""Largest value read: characters of its strings and keys, plus one per item."""
MAX_DEPTH = 16
"""Deepest nesting of objects and arrays read (a bare string or number is depth 0)."""
MAX_INT = 2**63
"""Integers must lie strictly between -MAX_INT and MAX_INT."""


def type_name(value: Any) -> str:
    """The name of ``value``'s type, read without running code its metaclass may define."""
    return str(type.__dict__["__name__"].__get__(type(value), type))


def plain_copy(value: Any, *, max_chars: int = MAX_CHARS, max_depth: int = MAX_DEPTH) -> Any:
    """Copy ``value`` into plain JSON types within the limits.

    Subclasses of ``str``, ``int``, ``float``, ``dict``, ``list`` and ``tuple`` are
    copied as their base type (tuples become lists) without calling their methods.

    Raises:
        UntrustedDataError: the value is too large, too deep, holds a non-string key, a
            non-finite or out-of-range number, or a type JSON does not have.
    """
    return _Copier(max_chars, max_depth).copy(value, max_depth, "")


def loads(text: str, *, max_chars: int = MAX_CHARS, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON ``text`` into plain JSON types within the limits.

    Raises:
        UntrustedDataError: the text is too long, not valid JSON, nested too deeply, or
            holds a value :func:`plain_copy` refuses.
    """
    if not issubclass(type(text), str):
        raise UntrustedDataError(f"expected JSON text, got {type_name(text)}")
    text = str.__str__(text)
    if len(text) > max_chars:
        raise UntrustedDataError(f"the JSON text is {len(text)} characters long; the limit is {max_chars}")
    try:
        data = json.loads(text)
    except RecursionError:
        raise UntrustedDataError(f"nested more than {max_depth} levels deep") from None
    except ValueError as exc:  # JSONDecodeError, or an integer with too many digits
        raise UntrustedDataError(f"not valid JSON ({_reason(exc)})") from None
    return plain_copy(data, max_chars=max_chars, max_depth=max_depth)


def _reason(exc: ValueError) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)


def _at(where: str) -> str:
    return f"at {where}: " if where else ""


class _Copier:
    """One copy: the limits and the characters left."""

    def __init__(self, max_chars: int, max_depth: int) -> None:
        self.max_chars = max_chars
        self.max_depth = max_depth
        self.left = max_chars

    def spend(self, amount: int, where: str) -> None:
        self.left -= amount
        if self.left < 0:
            raise UntrustedDataError(f"{_at(where)}the value is too large (the limit is {self.max_chars} characters)")

    def copy(self, value: Any, depth: int, where: str) -> Any:
        kind = type(value)
        if value is None or kind is bool:  # bool cannot be subclassed
            self.spend(1, where)
            return value
        if issubclass(kind, str):
            text = str.__str__(value)
            self.spend(len(text) + 1, where)
            return text
        if issubclass(kind, int):
            number = int.__int__(value)
            if not -MAX_INT < number < MAX_INT:
                raise UntrustedDataError(f"{_at(where)}an integer out of range (|n| < 2**63)")
            self.spend(1, where)
            return number
        if issubclass(kind, float):
            real = float.__float__(value)
            if not math.isfinite(real):
                raise UntrustedDataError(f"{_at(where)}{real} is not a JSON number")
            self.spend(1, where)
            return real
        if issubclass(kind, (dict, list, tuple)):
            if depth <= 0:
                raise UntrustedDataError(f"{_at(where)}nested more than {self.max_depth} levels deep")
            return self.copy_container(value, kind, depth - 1, where)
        raise UntrustedDataError(
            f"{_at(where)}a value of type {type_name(value)} is not JSON "
            "(object, array, string, number, true, false or null)"
        )

    def copy_container(self, value: Any, kind: type, depth: int, where: str) -> Any:
        if issubclass(kind, dict):
            self.spend(dict.__len__(value) + 1, where)
            out: dict[str, Any] = {}
            for key, item in list(dict.items(value)):
                if not issubclass(type(key), str):
                    raise UntrustedDataError(
                        f"{_at(where)}object keys must be strings, got a key of type {type_name(key)}"
                    )
                name = str.__str__(key)
                self.spend(len(name), where)
                out[name] = self.copy(item, depth, f"{where}.{name[:40]}" if where else name[:40])
            return out
        items = list.copy(value) if issubclass(kind, list) else [*tuple.__iter__(value)]
        self.spend(len(items) + 1, where)
        return [self.copy(item, depth, f"{where}[{i}]") for i, item in enumerate(items)]
