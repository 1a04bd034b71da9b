"""The structured result of running a task's tests against a candidate."""

from __future__ import annotations

import signal
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from gym_repost.programs.protocol import MARK
from gym_repost.sandbox.base import RunResult
from gym_repost.sandbox.programs import ProgramRun

_TAIL = 1500

Status = Literal["passed", "failed", "error", "timeout", "invalid"]


class Frame(BaseModel):
    """One traceback frame, with line numbers of the candidate's own code where it is."""

    file: str
    line: int
    function: str
    code: str = ""
    in_script: bool = False
    in_candidate: bool = False
    repeated: int = 0
    """How many more times this frame repeated right after itself (recursion)."""


class Assertion(BaseModel):
    """The failing ``assert`` and, for a single comparison, both sides' values."""

    source: str
    left: str | None = None
    right: str | None = None
    equal_again: bool = False
    """Both sides are evaluated again for the report; True when they were equal then:
    what the assert compares keeps state between calls, so the values it failed on are
    not the ones shown."""


class TestReport(BaseModel):
    """What ``run_tests`` tells the agent and the runner.

    ``status``: ``passed``; ``failed`` (an assertion failed); ``error`` (an exception,
    a crash, or an early exit); ``timeout``; ``invalid`` (the candidate could not be
    placed into the script: no such function, a syntax error). No wall-clock timings, so
    seeded episodes are reproducible.
    """

    __test__ = False  # not a pytest test class

    passed: bool
    status: Status
    exception: str | None = None
    message: str = ""
    assertion: Assertion | None = None
    frames: list[Frame] = Field(default_factory=list)
    in_candidate: bool = False
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    timed_out: bool = False

    @classmethod
    def invalid(cls, message: str) -> TestReport:
        """A candidate that could not be placed into the script."""
        return cls(passed=False, status="invalid", message=message)

    def traceback_text(self) -> str:
        """The traceback in terms of the candidate's own lines."""
        if not self.frames:
            return ""
        out = ["Traceback (most recent call last):"]
        for f in self.frames:
            where = "your code" if f.in_candidate else f.file
            out.append(f"  {where}, line {f.line}, in {f.function}")
            if f.code:
                out.append(f"    {f.code}")
            if f.repeated:
                out.append(f"  [the frame above repeated {f.repeated} more times]")
        out.append(f"{self.exception}: {self.message}" if self.message else f"{self.exception}")
        return "\n".join(out)

    def to_text(self) -> str:
        """The report as the agent reads it."""
        if self.passed:
            return "All tests passed."
        if self.status == "invalid":
            return f"Your code could not be tested: {self.message}"
        if self.status == "timeout":
            detail = self.message.removeprefix("timed out").lstrip(": ") or "the run was killed"
            head = f"Tests timed out: {detail} (an infinite loop or very slow code?)."
        else:
            kind = "Tests failed" if self.status == "failed" else "Tests raised an error"
            head = f"{kind}: {self.exception or 'the script failed'}"
            if self.message and (self.status != "failed" or self.assertion is None):
                head += f": {self.message}"
        parts = [head]
        if self.assertion is not None:
            parts.append(f"  {self.assertion.source}")
            if self.assertion.left is not None:
                parts.append(f"  left side:  {self.assertion.left}")
                parts.append(f"  right side: {self.assertion.right}")
                if self.assertion.equal_again:
                    parts.append(
                        "  (both sides were evaluated again for this report, and were equal then: what the"
                        " assert compares keeps state between calls, such as a cache, a counter or a warning"
                        " issued once; the values it failed on differed)"
                    )
        if self.frames:
            parts.append(self.traceback_text())
        elif self.stderr.strip():
            parts.append("stderr (end):\n" + self.stderr.strip()[-_TAIL:])
        if self.stdout.strip():
            parts.append("stdout (end):\n" + self.stdout.strip()[-_TAIL // 2 :])
        return "\n".join(parts)


def _strip_marks(text: str) -> str:
    return "\n".join(ln for ln in text.split("\n") if not ln.startswith(MARK)).strip()


def _harness_report(run: ProgramRun) -> dict[str, Any] | None:
    """The harness's report of why the script did not complete; None when there is none
    (the code under test shares the output and may forge or garble it: see
    :func:`~gym_repost.sandbox.programs.read_program_output`)."""
    report = run.payload.get("report") if run.payload is not None else None
    return report if type(report) is dict else None


def _trim_stderr(stderr: str) -> str:
    """Drop the traceback the harness already reported in frames."""
    text = _strip_marks(stderr)
    cut = text.rfind("Traceback (most recent call last):")
    return (text[:cut] if cut >= 0 else text).strip()[-_TAIL:]


def parse_run(run: ProgramRun, cpu_limit: float | None = None) -> TestReport:
    """Turn a harness run (:func:`~gym_repost.sandbox.programs.run_program`) into a :class:`TestReport`.

    Passing needs both exit status 0 and the completion token on the last line of
    stdout: a candidate that exits early never prints the token. ``cpu_limit``: the run's
    CPU seconds (RLIMIT_CPU); a process stopped by it (SIGXCPU) timed out.
    """
    result = run.result
    stdout = _strip_marks(result.stdout)[-_TAIL:]
    cpu_out = cpu_limit is not None and result.returncode == -signal.SIGXCPU and not result.killed_for
    common: dict[str, Any] = {
        "stdout": stdout,
        "returncode": result.returncode,
        "timed_out": result.timed_out or cpu_out,
    }
    if result.timed_out or cpu_out:
        if cpu_out:
            why = f"timed out: the CPU time limit ({cpu_limit:g} s) stopped the run"
        elif cpu_limit is not None:
            why = f"timed out: still running after {result.duration:.3g} s of wall-clock time"
        else:
            why = "timed out"
        return TestReport(
            passed=False, status="timeout", message=why, stderr=_strip_marks(result.stderr)[-_TAIL:], **common
        )
    if result.returncode == 0 and run.completed and run.payload is not None:
        return TestReport(passed=True, status="passed", **common)
    data = _harness_report(run)
    if data is None:
        return TestReport(
            passed=False,
            status="error",
            exception=_exit_reason(result),
            message=_exit_message(result),
            stderr=_strip_marks(result.stderr)[-_TAIL:],
            **common,
        )
    try:
        return TestReport(
            passed=False,
            status="failed" if data.get("status") == "failed" else "error",
            exception=data.get("exception"),
            message=str(data.get("message", ""))[:2000],
            assertion=Assertion.model_validate(data["assertion"]) if data.get("assertion") else None,
            frames=[Frame.model_validate(f) for f in _as_list(data.get("frames"))],
            in_candidate=bool(data.get("in_candidate")),
            stderr=_trim_stderr(result.stderr),
            **common,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return TestReport(
            passed=False,
            status="error",
            exception="MalformedReport",
            message=f"the run's report is malformed ({where}: {first['msg']}); the code under "
            "test may have written a result line in the harness's format",
            stderr=_strip_marks(result.stderr)[-_TAIL:],
            **common,
        )


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _exit_reason(result: RunResult) -> str:
    if result.killed_for == "output":
        return "OutputLimitExceeded"
    if result.returncode < 0:
        return "KilledBySignal"
    return "EarlyExit"


def _exit_message(result: RunResult) -> str:
    if result.killed_for == "output":
        return "the run printed more output than the sandbox allows and was killed"
    if result.returncode < 0:
        return f"the process was killed by signal {-result.returncode} (memory, CPU or process limit?)"
    return f"the process exited with status {result.returncode} before the tests finished (did the code call exit?)"
