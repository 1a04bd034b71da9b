"""``ast.parse`` that is safe to call from several threads at once.

CPython before 3.13 keeps the AST constructor's recursion depth in interpreter-wide state.
When two threads parse at the same time (a thread switch inside the constructor, e.g. a
garbage collection running a finalizer), one of them can fail with ``SystemError: AST
constructor recursion depth mismatch`` (python/cpython#106905). The construction pipeline
and the data builders parse from worker threads, so every host-side parse goes through
:func:`parse_python`, which admits one thread at a time. Parsing holds the GIL throughout,
so the lock costs no parallelism. :func:`ast.literal_eval` of a string parses it too, and
goes through :func:`literal_eval` here. Code that runs inside the sandbox (``*_main.py``) is
single-threaded and keeps plain ``ast.parse``, and so do the modules shipped into it
(``construct/testgen``: ``mutate``, ``pools``, ``selection``, ``strategies``), which must not
import gym_repost.

Code nested too deeply for the parser (``-`` repeated ten thousand times, thousands of
brackets) makes ``ast.parse`` raise ``RecursionError`` or ``MemoryError``; for code an
agent wrote that is a syntax error like any other, so :func:`parse_python` raises it as
a :class:`SyntaxError`.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.RLock()


def parse_python(source: str | bytes, filename: str = "<unknown>", mode: str = "exec", **options: Any) -> Any:
    """:func:`ast.parse`, one thread at a time; same arguments, result and errors.

    Raises:
        SyntaxError: as ``ast.parse``, and for code nested too deeply to parse.
    """
    with _LOCK:
        try:
            return ast.parse(source, filename, mode, **options)
        except (RecursionError, MemoryError):
            pass
    raise SyntaxError(
        "code nested too deeply to parse (a very long chain of operators or brackets)", (filename, 1, 1, None)
    )


def literal_eval(text: str) -> Any:
    """:func:`ast.literal_eval` of ``text``, its parse one thread at a time (:func:`parse_python`):
    a plain ``ast.literal_eval`` of a string parses it outside the lock, and one in a worker
    thread beside another's parse failed a RepoST-Eval validation with ``SystemError: AST
    constructor recursion depth mismatch``.

    Raises:
        ValueError, SyntaxError: as ``ast.literal_eval`` (and :func:`parse_python`).
    """
    return ast.literal_eval(parse_python(text.lstrip(" \t"), mode="eval"))
