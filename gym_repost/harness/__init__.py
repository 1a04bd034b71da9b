"""The test harness: run a task's evaluation script against a candidate, in a sandbox.

>>> report = run_function_tests(sandbox, task, candidate_source)
>>> report.passed, report.to_text()

May import: analysis, errors, executor, programs, sandbox, task.
"""

from __future__ import annotations

import hashlib
import json
import logging
import marshal
import secrets
from collections.abc import Sequence
from importlib.util import MAGIC_NUMBER
from typing import Any

from gym_repost.errors import CandidateError, TaskError
from gym_repost.harness import reference_store
from gym_repost.harness.candidate import (
    AssembledScript,
    assemble,
    compiled_script,
    do_nothing_candidate,
    extract_code_block,
    playback_script,
    prepare_candidate,
    strip_tests,
)
from gym_repost.harness.function_report import TestReport, parse_run
from gym_repost.harness.requirements import install_named
from gym_repost.harness.verdict import (
    MAX_RECORD_CHARS,
    Record,
    Reference,
    ReferenceCache,
    compare,
    judge,
    judge_beside_tests,
    merge_runs,
    parse_record,
    playback_answers,
    reference_key,
)
from gym_repost.sandbox.base import RunResult, Sandbox
from gym_repost.sandbox.programs import (
    ProgramRun,
    program_file,
    program_files,
    program_source,
    read_program_output,
    run_program,
)
from gym_repost.task import FunctionTask

SCRIPT_NAME = "evaluation.py"
"""File name of the evaluation script inside the run directory."""
HARNESS_NAME = program_file("harness")
"""File name of the in-sandbox harness (:mod:`gym_repost.programs.harness`) inside the run directory."""
PROGRAM_MODULES = ("values",)
"""Program modules the harness imports (:mod:`gym_repost.programs.values`, plain data)."""


def harness_files() -> dict[str, str]:
    """The in-sandbox harness and the program modules it imports, by their run-directory names."""
    return program_files("harness", PROGRAM_MODULES)


def harness_source() -> str:
    """Text of the in-sandbox harness (:mod:`gym_repost.programs.harness`)."""
    return program_source("harness")


INPUTS_NAME = "_gym_repost_inputs.json"
CODE_NAME = "_gym_repost_code.bin"
"""The evaluation script's code as the host compiled it to check it (``marshal``; see
:func:`~gym_repost.harness.candidate.compiled_script`): the harness runs it, where the text
and bytecode version match, rather than compile the text again (~8 ms for a repository's
800-line script here)."""
_REFERENCES = ReferenceCache()
logger = logging.getLogger(__name__)


def install_requirement(sandbox: Sandbox, task: FunctionTask, report: TestReport, done: set[str]) -> bool:
    """Install the requirement of ``task`` (``evaluation.requirements``) that provides the
    module its ground truth could not import (``report``), into the sandbox's package cache;
    True when the ground truth should run again (see
    :func:`~gym_repost.harness.requirements.install_named`)."""
    if report.exception not in ("ModuleNotFoundError", "ImportError"):
        return False
    return install_named(sandbox, task.evaluation.requirements, report.message, task.name, done)


WALL_FACTOR = 3.0
"""A function task's ``timeout`` counts CPU seconds: each process of a harness run may use
that many (RLIMIT_CPU, SIGXCPU at the limit), and the run's wall-clock guard is this many
times as long, which only code that waits without computing (sleeps, blocks) meets. A
loaded machine therefore turns neither a candidate nor the ground truth into a timeout."""


def _harness_run(
    sandbox: Sandbox,
    task: FunctionTask,
    assembled: AssembledScript,
    mode: str,
    timeout: float | None,
    inputs: list[str] | None = None,
    cpu_seconds: float | None = None,
) -> tuple[TestReport, Record | None]:
    """One harness run of ``assembled`` in ``mode``; its process-level report and its record."""
    script = strip_tests(task, assembled) if mode == "inputs" else assembled.script
    data = {INPUTS_NAME: json.dumps(inputs)} if inputs is not None else {}
    config = {"inputs": INPUTS_NAME if inputs is not None else None, "literals": _may_play_back(task, mode)}
    assembled = AssembledScript(script, assembled.start_line, assembled.end_line)
    run = _run_harness(sandbox, task, assembled, mode, data, config, timeout, cpu_seconds)
    return parse_run(run, _cpu_limit(task, timeout, cpu_seconds)), parse_record(run.payload)


def _cpu_limit(task: FunctionTask, timeout: float | None, cpu_seconds: float | None = None) -> float:
    """The CPU seconds a harness run may use: ``cpu_seconds`` when given, else the timeout
    (``timeout`` or the task's), which counts CPU time (:data:`WALL_FACTOR`)."""
    return cpu_seconds if cpu_seconds is not None else timeout or task.evaluation.timeout


def _may_play_back(task: FunctionTask, mode: str) -> bool:
    """Whether a candidate's run records its return values as data: only where a playback may judge them."""
    return mode != "reference" and playback_script(task) is not None


def _run_harness(
    sandbox: Sandbox,
    task: FunctionTask,
    script: AssembledScript,
    mode: str,
    data: dict[str, str],
    config: dict[str, Any],
    timeout: float | None,
    cpu_seconds: float | None = None,
) -> ProgramRun:
    """Run the in-sandbox harness on ``script`` in ``mode``, beside the task's files and the ``data`` files."""
    files: dict[str, str | bytes] = {**task.evaluation.files, SCRIPT_NAME: script.script, **data}
    config = {"script": SCRIPT_NAME, "start": script.start_line, "end": script.end_line, "mode": mode, **config}
    code = compiled_script(script.script)  # where its check compiled this very text
    if code is not None:
        files[CODE_NAME] = marshal.dumps(code)
        digest = hashlib.sha256(script.script.encode("utf-8", "surrogatepass")).hexdigest()
        config["code"] = {"file": CODE_NAME, "magic": MAGIC_NUMBER.hex(), "digest": digest}
    return run_program(
        sandbox.for_imports(task.metadata.external_packages),
        "harness",
        files,
        config,
        timeout=WALL_FACTOR * (timeout or task.evaluation.timeout),
        token=True,
        modules=PROGRAM_MODULES,
        max_chars=MAX_RECORD_CHARS,
        cpu_seconds=_cpu_limit(task, timeout, cpu_seconds),
    )


PLAYBACK_NAME = "_gym_repost_playback.json"


def playback_accepts(
    sandbox: Sandbox, task: FunctionTask, reference: Reference, record: Record, timeout: float | None = None
) -> bool:
    """Whether the task's own tests accept the record's return values where they differ from the reference's.

    False unless the task's tests are its specification (:func:`playback_script`) and the
    record differs only in return values that are plain data (:func:`playback_answers`).
    Then the tests run in a ``playback`` run, which holds the ground truth and the
    recorded values, never the candidate's code, and must complete with every differing
    value asked for, in the sandbox's ground-truth domain. Nothing of that run reaches the
    agent. An outcome the tests decided (not a run stopped by a limit) is kept on the
    reference: the same values from another candidate (many samples of a task give the
    same wrong answer) are not played again.
    """
    script = playback_script(task)
    answers = playback_answers(reference, record) if script is not None else None
    if script is None or answers is None:
        return False
    text = json.dumps(answers)
    key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    known = reference.playback_outcome(key)
    if known is not None:  # the same values, from another candidate: the tests said so already
        return known
    truth = sandbox.ground_truth()
    run = _run_harness(truth, task, script, "playback", {PLAYBACK_NAME: text}, {"playback": PLAYBACK_NAME}, timeout)
    accepted = _played(run)
    if run.payload is not None and not run.result.timed_out:  # the tests decided, not a limit
        reference.keep_playback_outcome(key, accepted)
    return accepted


def _played(run: ProgramRun) -> bool:
    """A playback completed, every call answered and every differing value asked for."""
    payload = run.payload or {}
    return run.completed and run.problem is None and payload.get("missed") == 0 and payload.get("unasked") == 0


def record_reference(sandbox: Sandbox, task: FunctionTask) -> Reference:
    """Run the ground truth alone to make the task's reference record: two runs, or three.

    Run 1 runs the tests and records the calls (pickling their arguments). When every
    argument pickled, run 2 replays them in the script without its tests; if that gives
    run 1's record exactly, the task is judged in ``inputs`` mode and is deterministic
    (two runs). Otherwise run 3 runs the tests again: fields that differ between runs 1
    and 3 are nondeterministic (not compared), and the replay decides ``inputs`` mode
    against what is left.

    The replay makes the same calls as run 1 without the tests' own work, so it gets
    :func:`replay_cpu_limit` of run 1's CPU time: a replay that goes another way (a call
    that spins on hardware the tests had mocked) is stopped by CPU time, not after the
    task's whole timeout, and the choice of mode does not depend on the machine's load.

    Runs 2 and 3 have the wall clock :data:`REFERENCE_CLOCK_AHEAD` ahead where the sandbox
    can (:meth:`~gym_repost.sandbox.base.Sandbox.clock_ahead`): what the ground truth
    derives from the clock (a timestamp it logs or returns) then differs from run 1's and
    is not compared, so a correct candidate run a minute or a day later does not fail on
    it. Two runs a moment apart on the same clock agreed on it, and made it part of the
    reference.

    Every run is in the sandbox's ground-truth domain
    (:meth:`~gym_repost.sandbox.base.Sandbox.ground_truth`).

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    try:
        assembled = assemble(task, task.ground_truth)
    except (CandidateError, TaskError) as exc:
        return Reference(passed=False, report=TestReport.invalid(f"the ground truth: {exc}"))
    truth = sandbox.ground_truth()
    report, first = _harness_run(truth, task, assembled, "reference", None)
    installed: set[str] = set()
    while not report.passed and install_requirement(truth, task, report, installed):
        report, first = _harness_run(truth, task, assembled, "reference", None)
    if not report.passed or first is None:
        return Reference(passed=False, report=report)
    ahead = truth.clock_ahead(REFERENCE_CLOCK_AHEAD) or truth
    replay: tuple[list[str], TestReport, Record | None] | None = None
    if first.calls and not first.overflow and first.inputs and all(first.inputs):
        inputs = [blob for blob in first.inputs if blob is not None]
        limit = replay_cpu_limit(first.cpu, task.evaluation.timeout)
        replay = (inputs, *_harness_run(ahead, task, assembled, "inputs", None, inputs, limit))
        exact = Reference(
            passed=True,
            report=report,
            calls=merge_runs(first, first)[0],
            overflow=first.overflow,
            mode="inputs",
            inputs=inputs,
        )
        if _replays(exact, replay):
            return exact
    again, second = _harness_run(ahead, task, assembled, "reference", None)
    calls, notes = merge_runs(first, second if second is not None else Record([], 0, False, None))
    if not again.passed:
        notes.insert(0, f"the ground truth failed one of two runs: {again.exception}: {again.message[:200]}")
    reference = Reference(passed=True, report=report, calls=calls, overflow=first.overflow, nondeterministic=notes)
    if replay is not None:
        replayed = reference.model_copy(update={"mode": "inputs", "inputs": replay[0]})
        if _replays(replayed, replay):
            reference = replayed
    return reference


REFERENCE_CLOCK_AHEAD = 400 * 86400 + 3600 + 60 + 1.5
"""Seconds ahead the wall clock of a reference's second and third runs is: 400 days, an
hour, a minute and a second and a half, so that a timestamp changes at every resolution
(year to microsecond; the weekday too, 400 days being 57 weeks and a day)."""
REPLAY_CPU_FACTOR = 20.0
"""A reference's replay may use this many times the recording run's CPU time..."""
REPLAY_CPU_FLOOR = 2.0
"""... and at least this many seconds (interpreter and imports included)."""


def replay_cpu_limit(reference_cpu: float | None, timeout: float) -> float | None:
    """The CPU-time limit of a reference's replay: :data:`REPLAY_CPU_FACTOR` times the recording
    run's CPU seconds, at least :data:`REPLAY_CPU_FLOOR`; None (the sandbox's own limit) when
    that run did not say, or when the limit would not be below the task's timeout."""
    if reference_cpu is None:
        return None
    limit = max(REPLAY_CPU_FLOOR, REPLAY_CPU_FACTOR * reference_cpu)
    return limit if limit < timeout else None


def _replays(reference: Reference, replay: tuple[list[str], TestReport, Record | None]) -> bool:
    """The replay of the pickled arguments passed and gave ``reference``'s record."""
    _, report, record = replay
    return report.passed and record is not None and compare(reference, record) is None


def reference_for(sandbox: Sandbox, task: FunctionTask) -> Reference:
    """The task's reference record in this sandbox, made on first use and kept.

    Kept for the process, and on disk for the local sandbox
    (:mod:`gym_repost.harness.reference_store`), so a later process (``eval`` after
    ``validate``) makes none. A failing reference is never kept on disk, and for the
    process only when the ground truth ran into its timeout: the other samples of the task
    would each wait for the same timeout again (a task that needs the network, say). Any
    other failure (a missing package the builder then installs) is tried again.
    """
    return _reference(sandbox, task, _reference_key(sandbox, task))


def _reference_key(sandbox: Sandbox, task: FunctionTask) -> str:
    description = {k: v for k, v in sandbox.describe().items() if k != "workers"}
    return reference_key(task.evaluation.model_dump(), task.target.model_dump(), task.ground_truth, description)


def _reference(sandbox: Sandbox, task: FunctionTask, key: str) -> Reference:
    reference = _known_reference(sandbox, task, key, make=True)
    assert reference is not None
    return reference


def _known_reference(sandbox: Sandbox, task: FunctionTask, key: str, make: bool = False) -> Reference | None:
    """The reference kept for the process or on disk; one made now if ``make``, else None."""
    with _REFERENCES.lock(key):
        reference = _REFERENCES.get(key)
        if reference is None:
            stored = reference_store.disk_key(sandbox, task)
            reference = reference_store.load(stored) if stored is not None else None
            if reference is None:
                if not make:
                    return None
                reference = record_reference(sandbox, task)
                if reference.passed and stored is not None:
                    reference_store.save(stored, reference)
            if reference.passed or reference.report.status == "timeout":
                _REFERENCES.put(key, reference)
        return reference


def run_function_tests(sandbox: Sandbox, task: FunctionTask, code: str, timeout: float | None = None) -> TestReport:
    """Run the task's tests with ``code`` as the candidate; the verdict is decided on the host.

    The ground truth's own reference record is made on first use (see
    :func:`reference_for`); the candidate runs in a script without the original, and
    passes when its recorded calls equal the reference's. A candidate that cannot be
    placed into the script gives an ``invalid`` report; a sandbox failure raises
    :class:`~gym_repost.errors.SandboxError` (infrastructure).
    """
    key = _reference_key(sandbox, task)
    known = _known_reference(sandbox, task, key)  # a replay runs the script without its tests: check that text
    try:
        assembled = assemble(task, code, check_stripped=known is not None and known.mode == "inputs")
    except (CandidateError, TaskError) as exc:
        return TestReport.invalid(str(exc))
    reference = known if known is not None else _reference(sandbox, task, key)
    if not reference.passed:
        return reference.report
    if code == task.ground_truth:
        return reference.report
    report, record = _harness_run(sandbox, task, assembled, reference.mode, timeout, reference.inputs)
    return _verdict(sandbox, task, reference, report, record, timeout)


def _verdict(
    sandbox: Sandbox,
    task: FunctionTask,
    reference: Reference,
    report: TestReport,
    record: Record | None,
    timeout: float | None = None,
) -> TestReport:
    """The verdict of one candidate run: its record against the reference's, then, where they
    differ only in values, the task's own tests on those values (:func:`playback_accepts`)."""
    verdict = judge(report, record, reference)
    if verdict.passed or not report.passed or record is None:
        return verdict
    return report if playback_accepts(sandbox, task, reference, record, timeout) else verdict


CPU_FACTOR = 10.0
"""A host-made candidate in a batch may use this many times the ground truth's CPU time
(as a test file's mutants may use ``timeout_factor``, 10, times their tests' time)..."""
CPU_FLOOR = 0.1
"""... and at least this many CPU seconds."""
BATCH_OUTPUT = 700_000
"""Characters of the children's output one batch returns (the sandbox caps a run's at 1 MB)."""


def run_host_made(sandbox: Sandbox, task: FunctionTask, codes: Sequence[str]) -> list[TestReport]:
    """Judge candidates the host made from the ground truth (mutants, a do-nothing body) in batches.

    One sandbox run forks each candidate from a process that imported the script's modules
    once (:mod:`gym_repost.programs.harness`, batch mode), and returns each child's output
    and exit status; the host judges each as a run of its own would be judged, passed or
    not (where the tests are the specification the children run beside them, so no
    playback run is needed: :func:`judge_beside_tests`; a mutant the tests reject before
    it reaches an input it loops on fails rather than times out). A candidate that loops
    forever is stopped by CPU time: at most :data:`CPU_FACTOR` times the ground truth's
    (run first in the same batch), at least :data:`CPU_FLOOR` seconds, so the verdicts do
    not depend on how busy the machine is.

    Never use it for a policy's code: the candidates of a batch share a process tree and
    the files of the run, in the sandbox's ground-truth domain. Results are in the order
    of ``codes``.

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    reference = reference_for(sandbox, task)
    if not reference.passed:
        return [reference.report for _ in codes]
    results: list[TestReport | None] = [None] * len(codes)
    pending: list[tuple[int, AssembledScript]] = []
    for index, code in enumerate(codes):
        try:
            pending.append((index, assemble(task, code)))
        except (CandidateError, TaskError) as exc:
            results[index] = TestReport.invalid(str(exc))
    ground_truth = assemble(task, task.ground_truth)
    while pending:
        judged = _batch_run(sandbox, task, reference, [ground_truth] + [a for _, a in pending])
        if judged is None or not judged or judged[0] is None or not judged[0].passed or len(judged) < 2:
            # The batch could not reproduce the ground truth's pass (or held only it): one alone.
            index, _ = pending.pop(0)
            results[index] = run_function_tests(sandbox, task, codes[index])
            continue
        for (index, _), report in zip(pending, judged[1:]):
            results[index] = report if report is not None else run_function_tests(sandbox, task, codes[index])
        pending = pending[len(judged) - 1 :]
    return [r if r is not None else TestReport.invalid("not run") for r in results]


def _batch_run(
    sandbox: Sandbox, task: FunctionTask, reference: Reference, scripts: list[AssembledScript]
) -> list[TestReport | None] | None:
    """One batch run of ``scripts`` (the ground truth's first); each child's verdict, in order.

    Where the task's tests are its specification (:func:`playback_script`), the children
    run beside the tests and are judged by :func:`judge_beside_tests`: the tests' outcome
    on a child's own values is what a playback of them would give. None for a child only
    a run of its own can judge. Elsewhere they run as a candidate's own run does.
    """
    beside = playback_script(task) is not None
    mode = "driver" if beside else reference.mode
    replay = mode == "inputs" and reference.inputs is not None
    files = dict(task.evaluation.files)
    entries = []
    for i, assembled in enumerate(scripts):
        name = f"_gym_repost_candidate_{i}.py"
        files[name] = strip_tests(task, assembled) if mode == "inputs" else assembled.script
        entries.append({"script": name, "start": assembled.start_line, "end": assembled.end_line, "literals": beside})
    if replay:
        files[INPUTS_NAME] = json.dumps(reference.inputs)
    children = _batch_children(sandbox, task, mode, files, entries, replay)
    if children is None:
        return None
    runs = [(parse_run(child), parse_record(child.payload)) for child in children]
    if beside:
        return [judge_beside_tests(report, record, reference) for report, record in runs]
    return [judge(report, record, reference) for report, record in runs]


def _batch_children(
    sandbox: Sandbox, task: FunctionTask, mode: str, files: dict[str, str], entries: list[dict[str, Any]], inputs: bool
) -> list[ProgramRun] | None:
    """One batch run of the harness (``entries``, the ground truth's first); what each child reported, in order.

    None when the batch itself failed; fewer children than entries when their output
    filled the batch (the rest go in another).
    """
    child_token = secrets.token_hex(16)
    limit = task.evaluation.timeout
    config = {
        "batch": entries,
        "mode": mode,
        "child_token": child_token,
        "inputs": INPUTS_NAME if inputs else None,
        "cpu_factor": CPU_FACTOR,
        "cpu_floor": CPU_FLOOR,
        "cpu_max": limit,
        "wall_max": WALL_FACTOR * limit,
        "max_output": BATCH_OUTPUT,
    }
    run = run_program(
        sandbox.ground_truth().for_imports(task.metadata.external_packages),
        "harness",
        files,
        config,
        timeout=WALL_FACTOR * limit * len(entries) + 10.0,
        token=True,
        modules=PROGRAM_MODULES,
        max_chars=MAX_RECORD_CHARS,
    )
    if not run.completed or run.payload is None or not isinstance(run.payload.get("runs"), list):
        return None
    children = []
    try:
        for child in run.payload["runs"]:
            result = RunResult(
                returncode=int(child["returncode"]),
                stdout=str(child["stdout"]),
                stderr=str(child["stderr"]),
                timed_out=bool(child["timed_out"]),
                duration=float(child["wall"]),
                killed_for=child.get("killed_for"),
            )
            children.append(read_program_output(result, child_token, max_chars=MAX_RECORD_CHARS))
    except (KeyError, TypeError, ValueError):
        return None
    return children


__all__ = [
    "AssembledScript",
    "HARNESS_NAME",
    "SCRIPT_NAME",
    "Reference",
    "TestReport",
    "assemble",
    "do_nothing_candidate",
    "extract_code_block",
    "harness_source",
    "prepare_candidate",
    "record_reference",
    "reference_for",
    "run_function_tests",
    "run_host_made",
]
