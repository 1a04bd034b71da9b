"""The verdict, decided on the host from data: the candidate's recorded calls against the reference's.

The process that runs a candidate holds neither the reference implementation nor, for
tasks whose calls can be replayed, the tests and their expected values. The harness in
it records what the code under test did for each outermost call (digests of the
arguments before and after, the return value, the exception's type, the printed
output). The reference record is made once per task and sandbox, in runs of the ground
truth alone, and cached:

1. the ground truth runs the tests (``reference`` mode): they must pass, and each call's
   arguments are pickled;
2. it runs them again: fields that differ between the two runs are nondeterministic and
   are not compared (the task is flagged, see :attr:`Reference.nondeterministic`);
3. when every call's arguments could be pickled, the ground truth replays them in a
   script whose tests were removed (``inputs`` mode). If that reproduces the record,
   candidates are judged the same way (``inputs``); otherwise they run the tests with
   the record taken alongside (``driver``), and a failing test also fails them.

A candidate passes when its run completed and its record equals the reference's. A
forged record passes only if it holds the reference's data, which a candidate can only
produce by computing what the reference computes.

Where the tests are the task's specification (HumanEval's ``check``: a tolerance, any
valid root), a record that differs from the reference only in return values that are
plain data gets a second chance: the tests run against those values in a separate run
that holds the ground truth and not the candidate's code (:func:`playback_answers`,
``playback`` mode), and the candidate passes when they complete and every differing
value was checked.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from gym_repost.harness.function_report import Frame, TestReport

MAX_RECORD_CHARS = 8_000_000
MAX_CALLS = 2000
COMPARED = {
    "a": "arguments it was called with",
    "x": "exception raised",
    "xd": "exception's message",
    "r": "return value",
    "gx": "exception while iterating its result",
    "g": "length of its result",
    "p": "arguments (or object) after the call",
    "o": "printed output",
    "w": "warnings issued",
}
"""Fields of a call record compared with the reference, and what each means."""
UNSTABLE = "*"

Mode = Literal["inputs", "driver"]


@dataclass(frozen=True)
class Record:
    """The calls one harness run recorded."""

    calls: list[dict[str, str]]
    overflow: int
    completed: bool
    inputs: list[str | None] | None
    failure: dict[str, Any] | None = None
    """The harness's report of the first exception a call raised (``inputs`` and ``driver`` runs)."""
    cpu: float | None = None
    """CPU seconds the run's process used (``reference`` runs, the ground truth's)."""


def _call_entry(value: Any) -> dict[str, str] | None:
    if type(value) is not dict or len(value) > 16:
        return None
    if not all(type(k) is str and type(v) is str and len(v) <= 400 for k, v in value.items()):
        return None
    return dict(value)


def parse_record(data: dict[str, Any] | None) -> Record | None:
    """The record in a harness run's result (plain JSON, read within limits); None if absent or malformed.

    The candidate controls what it prints, so this never raises: a record that is not
    exactly the expected shape is no record.
    """
    if type(data) is not dict:
        return None
    calls, overflow, completed, inputs = (data.get(k) for k in ("calls", "overflow", "completed", "inputs"))
    if type(calls) is not list or len(calls) > MAX_CALLS or type(overflow) is not int or type(completed) is not bool:
        return None
    entries = [e for c in calls if (e := _call_entry(c)) is not None]
    if len(entries) != len(calls):
        return None
    if inputs is not None and (type(inputs) is not list or not all(i is None or type(i) is str for i in inputs)):
        return None
    failure, cpu = data.get("failure"), data.get("cpu")
    return Record(
        calls=entries,
        overflow=overflow,
        completed=completed,
        inputs=inputs,
        failure=failure if type(failure) is dict else None,
        cpu=float(cpu) if isinstance(cpu, (int, float)) and not isinstance(cpu, bool) and 0 <= cpu < 1e9 else None,
    )


class Reference(BaseModel):
    """What the ground truth did under the task's tests, in a given sandbox."""

    passed: bool
    """The ground truth ran the tests to completion."""
    report: TestReport
    """The first reference run's report (its failure when ``passed`` is False)."""
    mode: Mode = "driver"
    calls: list[dict[str, str]] = Field(default_factory=list)
    """Per call, the compared fields; ``"*"`` marks a field that differed between runs."""
    overflow: int = 0
    inputs: list[str] | None = None
    """Pickled arguments of each call (base64), replayed in ``inputs`` mode."""
    nondeterministic: list[str] = Field(default_factory=list)
    """What differed between the two reference runs (empty for a deterministic task)."""
    _playbacks: dict[str, bool] = PrivateAttr(default_factory=dict)
    """Whether the tests accepted a candidate's differing values, by the SHA-256 of those
    values' JSON text (:func:`gym_repost.harness.playback_accepts`): this process only."""

    def playback_outcome(self, key: str) -> bool | None:
        """What the playback of the values of ``key`` gave before, None if unknown."""
        return self._playbacks.get(key)

    def keep_playback_outcome(self, key: str, accepted: bool) -> None:
        """Remember a playback's outcome (the :data:`PLAYBACKS_KEPT` most recent)."""
        self._playbacks[key] = accepted
        while len(self._playbacks) > PLAYBACKS_KEPT:
            del self._playbacks[next(iter(self._playbacks))]


PLAYBACKS_KEPT = 256
"""Playback outcomes a reference keeps: many samples of one task give the same wrong values."""


def merge_runs(first: Record, second: Record) -> tuple[list[dict[str, str]], list[str]]:
    """The calls of two reference runs with fields that differ marked unstable, and what differed."""
    notes: list[str] = []
    if len(first.calls) != len(second.calls) or first.overflow != second.overflow:
        notes.append(
            f"the target was called {len(first.calls) + first.overflow} times in one run "
            f"and {len(second.calls) + second.overflow} in the other"
        )
    calls: list[dict[str, str]] = []
    for index, call in enumerate(first.calls):
        other = second.calls[index] if index < len(second.calls) else {}
        merged = dict(call)
        for key in COMPARED:
            if call.get(key, "") != other.get(key, ""):
                merged[key] = UNSTABLE
                notes.append(f"call {index + 1}: {COMPARED[key]}")
        calls.append(merged)
    return calls, notes[:20]


def compare(reference: Reference, record: Record) -> str | None:
    """Why ``record`` differs from the reference, in words for the agent; None if it does not.

    Expected values are never shown: only which call differs, in what, and what the
    candidate's code did.
    """
    found = first_mismatch(reference, record)
    return None if found is None else found[1]


def first_mismatch(reference: Reference, record: Record, stopped: bool = False) -> tuple[int, str] | None:
    """The 1-based number of the first call that differs (0: the number of calls) and why.

    ``stopped``: the tests ended the run early (they failed), so the calls it made are
    compared first and their number last, as a run that made every call would be judged.
    """
    name_counts_unstable = any("times in one run" in n for n in reference.nondeterministic)
    ours, theirs = len(record.calls) + record.overflow, len(reference.calls) + reference.overflow
    count = None
    if ours != theirs and not name_counts_unstable:
        count = (
            0,
            (
                f"the tests called your function {ours} time(s); with a correct implementation "
                f"they call it {theirs} time(s)"
            ),
        )
        if not stopped:
            return count
    for index, (expected, got) in enumerate(zip(reference.calls, record.calls, strict=False)):
        for key, meaning in COMPARED.items():
            want = expected.get(key, "")
            if want != UNSTABLE and got.get(key, "") != want:
                return index + 1, _describe(index, key, meaning, got)
    return count


def playback_answers(reference: Reference, record: Record) -> list[tuple[str, str | None]] | None:
    """The record's answers for a playback of the tests, None when the record does not qualify.

    A record qualifies when it differs from the reference only in return values, each
    recorded as plain data (``rl``): the same calls with the same arguments, no exception
    on either side, the same arguments after the call and the same output. Each call's
    answer is the digest of its arguments and either None (its return value is the
    reference's: the playback runs the original) or the recorded value, which the task's
    own tests then judge in a process without the candidate's code.
    """
    if record.overflow or reference.overflow or len(record.calls) != len(reference.calls) or not record.completed:
        return None
    answers: list[tuple[str, str | None]] = []
    differs = False
    for expected, got in zip(reference.calls, record.calls, strict=True):
        if expected.get("a", "") in ("", UNSTABLE):
            return None
        for key in COMPARED:
            want = expected.get(key, "")
            if key != "r" and want != UNSTABLE and got.get(key, "") != want:
                return None
        same = expected.get("r", "") in (UNSTABLE, got.get("r", ""))
        if not same and (expected.get("x") or got.get("x") or "g" in got or "g" in expected or not got.get("rl")):
            return None
        differs = differs or not same
        answers.append((expected["a"], None if same else got["rl"]))
    return answers if differs else None


def _describe(index: int, key: str, meaning: str, got: dict[str, str]) -> str:
    called = f"call {index + 1}" + (f" with {got['ar']}" if got.get("ar") else "")
    if got.get("x"):
        did = f"raised {got['x'].rsplit('.', 1)[-1]}: {got.get('xm', '')}"
    else:
        did = f"returned {got.get('rr', '?')}"
    return f"{called}: your code {did}; a correct implementation differs in the {meaning}"


def judge(report: TestReport, record: Record | None, reference: Reference, stopped: bool = False) -> TestReport:
    """The verdict of one candidate run: ``report`` (process level) checked against the record.

    ``stopped``: the run's tests failed and ended it early (see :func:`first_mismatch`).
    """
    if report.status in ("timeout", "invalid"):
        return report
    if reference.mode == "driver" and not report.passed:
        return report
    if record is None:
        return (
            report
            if not report.passed
            else report.model_copy(
                update={
                    "passed": False,
                    "status": "error",
                    "exception": "NoRecord",
                    "message": "the run ended without the harness's record of the calls",
                }
            )
        )
    found = first_mismatch(reference, record, stopped)
    if found is None:
        return report
    call, mismatch = found
    update: dict[str, Any] = {
        "passed": False,
        "status": "failed",
        "exception": "WrongBehaviour",
        "message": mismatch,
        "assertion": None,
        "frames": [],
        "in_candidate": True,
    }
    if record.failure is not None and record.failure.get("call") == call:
        update.update(
            status="error",
            exception=str(record.failure.get("exception", "Exception"))[:100],
            frames=_frames(record.failure.get("frames")),
        )
    return report.model_copy(update=update)


def judge_beside_tests(report: TestReport, record: Record | None, reference: Reference) -> TestReport | None:
    """The verdict of a host-made candidate run beside the task's tests, on a task whose tests
    are its specification; None where only a run of its own can give it.

    A run of its own passes when its record equals the reference's, or differs only in
    return values (plain data) that the task's tests accept when they are played back
    to them. Beside the tests, the tests received exactly those values, so their outcome
    is the playback's: no playback run is needed. A run whose tests failed is judged on
    the calls it made before they stopped it. A task judged in ``inputs`` mode whose
    tests failed although every call matched the reference (a side effect the record
    does not hold) gives None: its own run, which replays the calls without the tests,
    decides. Only for candidates the host made: code beside the tests could fool them.
    """
    verdict = judge(report, record, reference, stopped=not report.passed)
    if record is None or verdict.passed or report.status in ("timeout", "invalid"):
        return verdict
    if report.passed:  # the tests took the values that differ: what a playback of them decides
        return report if playback_answers(reference, record) is not None else verdict
    if reference.mode == "inputs" and first_mismatch(reference, record, stopped=True) is None:
        return None
    return verdict


def _frames(data: Any) -> list[Frame]:
    """Traceback frames the candidate's process reported, dropped if malformed (it controls them)."""
    if type(data) is not list:
        return []
    try:
        return [Frame.model_validate(f) for f in data[:12]]
    except (ValueError, TypeError, RecursionError):
        return []


class ReferenceCache:
    """References by key, computed once each (concurrent askers for one key wait for it)."""

    def __init__(self) -> None:
        self._done: dict[str, Reference] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def get(self, key: str) -> Reference | None:
        return self._done.get(key)

    def put(self, key: str, reference: Reference) -> None:
        self._done[key] = reference


def reference_key(*parts: Any) -> str:
    """A key for the reference of a task (its evaluation and target) in a sandbox (its description)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
