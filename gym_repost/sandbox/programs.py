"""The host side of the protocol with the programs of :mod:`gym_repost.programs`.

>>> run = run_program(sandbox, "coverage", files, {"script": "evaluation.py"}, timeout=30.0)
>>> run.payload, run.completed, run.problem

:func:`run_program` ships a program and the protocol module, passes the configuration
(and a fresh one-time token where the program uses one) on standard input, runs it, and
reads its result line within :mod:`gym_repost.bounded_json`'s limits. The output is
untrusted (the code under test shares it): a missing, malformed or forged result is
described in :attr:`ProgramRun.problem` for the caller to judge, never raised.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from gym_repost import bounded_json
from gym_repost.errors import UntrustedDataError
from gym_repost.programs import protocol
from gym_repost.sandbox.base import MAX_TIMEOUT, RunResult, Sandbox

PREFIX = "_gym_repost_"
"""Prefix of the run-directory names of the programs and their modules."""
PROTOCOL_NAME = PREFIX + "protocol.py"
WALL_STRETCH = protocol.WALL_STRETCH
"""A program's wall-clock guard stretches up to this many times while the code computes on a
loaded machine (:class:`gym_repost.programs.protocol.WallGuard`): a run's timeout on the host
leaves it room."""


def program_file(name: str) -> str:
    """The run-directory file name of the program (or program module) ``name``."""
    return f"{PREFIX}{name}.py"


@lru_cache(maxsize=None)
def program_source(name: str) -> str:
    """The text of ``gym_repost/programs/{name}.py``."""
    return resources.files("gym_repost.programs").joinpath(f"{name}.py").read_text("utf-8")


def program_files(name: str, modules: Sequence[str] = ()) -> dict[str, str]:
    """The program ``name``, the protocol module and the program ``modules`` it imports, by file name."""
    return {program_file(part): program_source(part) for part in (name, "protocol", *modules)}


def program_stdin(config: Mapping[str, Any], token: str | None = None) -> str:
    """Standard input of a program run: the configuration's length, the configuration, the token."""
    text = json.dumps(config, separators=(",", ":"))
    return f"{len(text.encode('utf-8', 'surrogatepass'))}\n{text}\n" + (f"{token}\n" if token is not None else "")


@dataclass(frozen=True)
class ProgramRun:
    """One run of a program: the sandbox's result and what the program reported.

    Attributes:
        result: the sandbox's result (exit status, output, timeout).
        payload: the JSON object of the result line used, None when there is none or it is
            malformed (then :attr:`problem` says why).
        completed: for a program given a token, the last line of output is the completion
            line with that token; otherwise the result line is the last line.
        problem: what was wrong with the output, None when the program completed and its
            result was read.
    """

    result: RunResult
    payload: dict[str, Any] | None
    completed: bool
    problem: str | None = None


def run_program(
    sandbox: Sandbox,
    name: str,
    files: Mapping[str, str | bytes],
    config: Mapping[str, Any],
    *,
    timeout: float,
    token: bool = False,
    modules: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    max_chars: int = bounded_json.MAX_CHARS,
    cpu_seconds: float | None = None,
) -> ProgramRun:
    """Run the program ``name`` beside ``files`` with ``config``; what it reported.

    Args:
        sandbox: a started sandbox.
        name: the program, ``gym_repost/programs/{name}.py``.
        files: the run directory's other files.
        config: the configuration (JSON), read by the program's ``protocol.read_config()``.
        timeout: seconds for the whole run, at most the sandbox's :data:`MAX_TIMEOUT` (a
            guard a program's budget makes may be longer: the audit's, of every mutant at its
            CPU limit; its CPU limits stop it long before).
        token: pass a fresh one-time token after the configuration (``protocol.read_token()``).
        modules: other program modules it imports (``gym_repost/programs/{module}.py``).
        env: extra environment variables.
        max_chars: the largest result read (characters of its JSON).
        cpu_seconds: the run's CPU-time limit in place of the sandbox's (see :meth:`Sandbox.run`).

    Raises:
        SandboxError: the sandbox itself failed (infrastructure).
    """
    secret = secrets.token_hex(16) if token else None
    shipped = {**files, **program_files(name, modules)}
    result = sandbox.run(
        shipped,
        ["python3", program_file(name)],
        timeout=min(timeout, MAX_TIMEOUT),
        stdin=program_stdin(config, secret),
        env=env,
        cpu_seconds=cpu_seconds,
    )
    return read_program_output(result, secret, max_chars=max_chars)


def read_program_output(result: RunResult, token: str | None, *, max_chars: int = bounded_json.MAX_CHARS) -> ProgramRun:
    """What a program run reported: its result line and whether it completed. Never raises."""
    lines = [line for line in result.stdout.split("\n") if line]
    if token is not None:
        completed = bool(lines) and lines[-1] == protocol.END + token
        if completed:
            line = lines[-2] if len(lines) > 1 and _is_result(lines[-2]) else None
            if line is None:
                return ProgramRun(result, None, True, "no result line right before the completion token")
            payload, problem = _payload(line, max_chars)
            return ProgramRun(result, payload, True, problem)
        line = next((ln for ln in reversed(lines) if _is_result(ln)), None)
        payload, problem = _payload(line, max_chars) if line is not None else (None, "no result line")
        why = "the completion token is missing" + ("" if result.returncode == 0 else f" (exit {result.returncode})")
        return ProgramRun(result, payload, False, f"{why}; {problem}" if problem else why)
    line = next((ln for ln in reversed(lines) if _is_result(ln)), None)
    if line is None:
        return ProgramRun(result, None, False, "no result line")
    payload, problem = _payload(line, max_chars)
    completed = line is lines[-1]
    if problem is None and not completed:
        problem = "the result line is not the last line of output"
    return ProgramRun(result, payload, completed, problem)


def _is_result(line: str) -> bool:
    return line.startswith((protocol.RESULT, protocol.RESULT_COMPRESSED))


def _payload(line: str, max_chars: int) -> tuple[dict[str, Any] | None, str | None]:
    if line.startswith(protocol.RESULT_COMPRESSED):
        text = _decompress(line[len(protocol.RESULT_COMPRESSED) :], max_chars)
        if text is None:
            return None, "the compressed result is not base64 of zlib data within the size limit"
    else:
        text = line[len(protocol.RESULT) :]
    try:
        data = bounded_json.loads(text, max_chars=max_chars)
    except UntrustedDataError as exc:
        return None, f"the result is unreadable: {exc}"
    if type(data) is not dict:
        return None, f"the result is {_JSON_TYPES.get(bounded_json.type_name(data), 'not JSON')}, not an object"
    return data, None


def _decompress(blob: str, max_chars: int) -> str | None:
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(base64.b64decode(blob, validate=True), 4 * max_chars + 1)
        if len(data) > 4 * max_chars or inflater.unconsumed_tail:
            return None
        return data.decode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError, zlib.error):  # UnicodeDecodeError is a ValueError
        return None


_JSON_TYPES = {
    "list": "an array",
    "str": "a string",
    "int": "a number",
    "float": "a number",
    "bool": "a boolean",
    "NoneType": "null",
}
