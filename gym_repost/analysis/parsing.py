"""``ast.parse`` that is safe to call from several threads at once.

CPython before 3.13 keeps the AST constructor's recursion depth in interpreter-wide state.
When two threads parse at the same time (a thread switch inside the constructor, e.g. a
garbage collection running a finalizer), one of them can fail with ``SystemError: AST
constructor recursion depth mismatch`` (python/cpython#106905). The construction pipeline
and the data builders parse from worker threads, so every host-side parse goes through
:func:`parse_python`, which admits one thread at a time. Parsing holds the GIL throughout,
so the lock costs no parallelism. Code that runs inside the sandbox (``*_main.py``) is
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
