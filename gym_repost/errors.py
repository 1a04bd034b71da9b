"""The exception hierarchy of gym-repost.

One root, :class:`GymRepostError`. Leaves also inherit the matching built-in so that
callers who catch ``ValueError`` or ``RuntimeError`` keep working.

Two families matter to the runner:

* what an *agent* did wrong (malformed action, bad path, code that does not parse) is
  never raised out of an environment: it becomes an observation (:class:`ToolError`);
* what the *infrastructure* did wrong (a sandbox that cannot start, a worker that died,
  an LLM endpoint that keeps failing) raises :class:`InfrastructureError` and is recorded
  as an infrastructure error, never scored as a failed task.

A third, the *policy's own* error (its constructor, ``reset`` or ``act`` raised:
:class:`PolicyError`), is neither: the runner records the episode as failed, with the
policy's traceback, and counts it apart (``policy_errors``).
"""

from __future__ import annotations

import json


class GymRepostError(Exception):
    """Root of every error gym-repost raises on purpose."""


class ConfigError(GymRepostError, ValueError):
    """A user-supplied setting or command-line value is invalid."""


class MissingExtraError(GymRepostError, ImportError):
    """An optional dependency is not installed.

    The message names the ``pip install "gym-repost[extra]"`` command to run, and the one
    for a clone of the repository (``pip install -e ".[extra]"``).
    """

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{purpose} needs the '{package}' package, which is not installed. "
            f'Install it with: pip install "gym-repost[{extra}]" '
            f'(from a clone of the repository: pip install -e ".[{extra}]")'
        )


class TaskFormatError(GymRepostError, ValueError):
    """A task file (or one line of it) does not hold a valid task.

    Attributes:
        path: the file.
        line: 1-based line number, or None when the whole file is at fault.
        field: dotted name of the offending field, or None.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.reason = message
        where = path or "<tasks>"
        if line is not None:
            where += f":{line}"
        if field:
            where += f": field '{field}'"
        super().__init__(f"{where}: {message}")


class BuildError(GymRepostError, ValueError):
    """A source, or one candidate function of it, cannot be turned into a task."""


class SourceUnreachableError(BuildError):
    """A source could not be fetched for now (the index or its files host unreachable, or
    answering a server error or 429): a corpus build does not keep it as the repository's
    result, so a resumed build tries it again."""


class TaskError(GymRepostError, ValueError):
    """A task that cannot be evaluated as written (its script lacks its target, say)."""


class CandidateError(GymRepostError, ValueError):
    """A candidate solution cannot be placed into the evaluation script.

    Shown to the agent as an observation; it counts as a failing test run.
    """


class ToolError(GymRepostError):
    """An agent's tool call is invalid. Environments turn it into an error observation."""


class UntrustedDataError(GymRepostError, ValueError):
    """A value from an untrusted source (an agent's action, a sandboxed program's output)
    is not plain JSON within the limits: too large, nested too deeply, a non-string key,
    a type JSON does not have, or text that does not parse."""


class InfrastructureError(GymRepostError, RuntimeError):
    """Something outside the agent's control failed; the episode is not scored."""


class SandboxError(InfrastructureError):
    """A sandbox backend failed to run a command (not the command itself failing)."""


class SandboxUnavailableError(SandboxError):
    """A sandbox backend cannot start on this machine; the message says how to fix it."""


class PolicyError(GymRepostError, RuntimeError):
    """A policy could not be built, or raised in ``reset`` or ``act``: the policy's own
    error, not the infrastructure's. An episode it ends is a failed one (scored as such,
    counted apart as a policy error), never retried as an infrastructure error is."""


class LLMError(InfrastructureError):
    """A model endpoint failed: a permanent error (bad key, unknown model), or transient
    ones (rate limits, 5xx, timeouts) that outlasted the retry budget.

    Attributes:
        attempts: HTTP attempts made.
        transient: the last failure was of a kind that is retried.
    """

    def __init__(self, message: str, *, attempts: int = 0, transient: bool = False) -> None:
        self.attempts = attempts
        self.transient = transient
        super().__init__(message)


class RunDirError(GymRepostError, ValueError):
    """A run directory belongs to a different configuration or is damaged."""


class RunDirBusyError(RunDirError):
    """Another process is writing to the run directory (it holds ``RUN_DIR/.lock``)."""


class DataError(GymRepostError, ValueError):
    """Input to a training-data builder is malformed (an execution matrix that is not
    rectangular or not 0/1, pass rates outside [0, 1])."""


def json_error_text(exc: json.JSONDecodeError) -> str:
    """A JSON syntax error in words, with its column: ``Expecting value at column 7``,
    ``Unterminated string starting at column 3`` (the decoder's own message of the latter
    ends in "at", which a plain "at column" would double)."""
    return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"
