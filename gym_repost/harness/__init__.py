"""The test harness: run a task's evaluation script against a candidate, in a sandbox.

>>> report = run_function_tests(sandbox, task, candidate_source)
>>> report.passed, report.to_text()
"""

from __future__ import annotations

import json

from gym_repost.errors import CandidateError, TaskError
from gym_repost.harness.candidate import (
    AssembledScript,
    assemble,
    do_nothing_candidate,
    extract_code_block,
    prepare_candidate,
    strip_tests,
)
from gym_repost.harness.report import TestReport, parse_run
from gym_repost.harness.verdict import (
    MAX_RECORD_CHARS,
    Record,
    Reference,
    ReferenceCache,
    compare,
    judge,
    merge_runs,
    parse_record,
    reference_key,
)
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.programs import program_file, program_source, run_program
from gym_repost.task import FunctionTask

SCRIPT_NAME = "evaluation.py"
"""File name of the evaluation script inside the run directory."""
HARNESS_NAME = program_file("harness")
"""File name of the in-sandbox harness (:mod:`gym_repost.programs.harness`) inside the run directory."""


def harness_source() -> str:
    """Text of the in-sandbox harness (:mod:`gym_repost.programs.harness`)."""
    return program_source("harness")


INPUTS_NAME = "_gym_repost_inputs.json"
_REFERENCES = ReferenceCache()


def _harness_run(sandbox: Sandbox, task: FunctionTask, assembled: AssembledScript, mode: str,
                 timeout: float | None, inputs: list[str] | None = None) -> tuple[TestReport, Record | None]:
    """One harness run of ``assembled`` in ``mode``; its process-level report and its record."""
    script = strip_tests(task, assembled) if mode == "inputs" else assembled.script
    files = {**task.evaluation.files, SCRIPT_NAME: script}
    if inputs is not None:
        files[INPUTS_NAME] = json.dumps(inputs)
    config = {"script": SCRIPT_NAME, "start": assembled.start_line, "end": assembled.end_line,
              "mode": mode, "inputs": INPUTS_NAME if inputs is not None else None}
    run = run_program(sandbox, "harness", files, config, timeout=timeout or task.evaluation.timeout,
                      token=True, max_chars=MAX_RECORD_CHARS)
    return parse_run(run), parse_record(run.payload)


def record_reference(sandbox: Sandbox, task: FunctionTask) -> Reference:
    """Run the ground truth alone (two runs, and a replay) to make the task's reference record.

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    try:
        assembled = assemble(task, task.ground_truth)
    except (CandidateError, TaskError) as exc:
        return Reference(passed=False, report=TestReport.invalid(f"the ground truth: {exc}"))
    report, first = _harness_run(sandbox, task, assembled, "reference", None)
    if not report.passed or first is None:
        return Reference(passed=False, report=report)
    again, second = _harness_run(sandbox, task, assembled, "reference", None)
    calls, notes = merge_runs(first, second if second is not None else Record([], 0, False, None))
    if not again.passed:
        notes.insert(0, f"the ground truth failed one of two runs: {again.exception}: {again.message[:200]}")
    reference = Reference(passed=True, report=report, calls=calls, overflow=first.overflow,
                          nondeterministic=notes)
    if first.calls and not first.overflow and first.inputs and all(first.inputs):
        inputs = [blob for blob in first.inputs if blob is not None]
        replayed = reference.model_copy(update={"mode": "inputs", "inputs": inputs})
        report_c, third = _harness_run(sandbox, task, assembled, "inputs", None, inputs)
        if report_c.passed and third is not None and compare(replayed, third) is None:
            reference = replayed
    return reference


def reference_for(sandbox: Sandbox, task: FunctionTask) -> Reference:
    """The task's reference record in this sandbox, made on first use and kept for the process.

    A failing reference (a missing package, a timeout) is not kept: the next call tries again.
    """
    description = {k: v for k, v in sandbox.describe().items() if k != "workers"}
    key = reference_key(task.evaluation.model_dump(), task.target.model_dump(), description)
    with _REFERENCES.lock(key):
        reference = _REFERENCES.get(key)
        if reference is None:
            reference = record_reference(sandbox, task)
            if reference.passed:
                _REFERENCES.put(key, reference)
        return reference


def run_function_tests(sandbox: Sandbox, task: FunctionTask, code: str,
                       timeout: float | None = None) -> TestReport:
    """Run the task's tests with ``code`` as the candidate; the verdict is decided on the host.

    The ground truth's own reference record is made on first use (see
    :func:`reference_for`); the candidate runs in a script without the original, and
    passes when its recorded calls equal the reference's. A candidate that cannot be
    placed into the script gives an ``invalid`` report; a sandbox failure raises
    :class:`~gym_repost.errors.SandboxError` (infrastructure).
    """
    try:
        assembled = assemble(task, code)
    except (CandidateError, TaskError) as exc:
        return TestReport.invalid(str(exc))
    reference = reference_for(sandbox, task)
    if not reference.passed:
        return reference.report
    if code == task.ground_truth:
        return reference.report
    report, record = _harness_run(sandbox, task, assembled, reference.mode, timeout, reference.inputs)
    return judge(report, record, reference)


__all__ = ["AssembledScript", "HARNESS_NAME", "SCRIPT_NAME", "Reference", "TestReport", "assemble",
           "do_nothing_candidate", "extract_code_block", "harness_source", "prepare_candidate",
           "record_reference", "reference_for", "run_function_tests"]
