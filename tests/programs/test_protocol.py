"""The protocol between the host and the in-sandbox programs, both sides.

The host side (``read_program_output``) is fed hostile outputs and must say what was wrong
without raising; each program's configuration makes a round trip through the real local
sandbox; the program side reads exactly its configuration and keeps the token from
forked children.
"""

from __future__ import annotations

import json
import textwrap
import zlib
from base64 import b64encode
from collections.abc import Mapping, Sequence

import pytest
from testfile_tasks import GROUND_TRUTH, make_testfile_task

from gym_repost.construct.testgen import generate_tests, trace_repository
from gym_repost.data.base import TestSuite
from gym_repost.data.matrix import run_code_against_tests
from gym_repost.harness import run_function_tests
from gym_repost.harness.coverage import measure_coverage
from gym_repost.harness.testfile import run_test_file
from gym_repost.programs.protocol import END, RESULT, RESULT_COMPRESSED, undefined_names
from gym_repost.sandbox.base import RunResult, Sandbox
from gym_repost.sandbox.programs import (
    PROTOCOL_NAME,
    ProgramRun,
    program_file,
    program_source,
    program_stdin,
    read_program_output,
)
from gym_repost.task import FunctionTask
from tests.construct.test_testgen import candidate, repository, script

# ---------------------------------------------------------------- the host side, hostile output


def output(stdout: str, token: str | None = "tok", returncode: int = 0, **limits: int) -> ProgramRun:
    return read_program_output(RunResult(returncode, stdout, ""), token, **limits)


def test_a_completed_run_gives_the_result_right_before_the_token() -> None:
    run = output(f'noise\n{RESULT}{{"a": [1, 2]}}\n{END}tok\n')
    assert run.completed and run.problem is None and run.payload == {"a": [1, 2]}


@pytest.mark.parametrize(
    ("stdout", "completed", "payload", "problem"),
    [
        ("", False, None, "no result line"),
        (f"{RESULT}{{}}\n", False, {}, "completion token is missing"),
        (f"{RESULT}{{}}\n{END}other\n", False, {}, "completion token is missing"),
        (f"{RESULT}{{}}\n{END}tok\nlater\n", False, {}, "completion token is missing"),
        (f"{RESULT}{{}}\nforged\n{END}tok\n", True, None, "no result line right before the completion token"),
        (f"{END}tok\n", True, None, "no result line right before"),
        (f"x{RESULT}{{}}\n{END}tok\n", True, None, "no result line right before"),
        (f"{RESULT}" + "[" * 100_000 + "]" * 100_000 + f"\n{END}tok\n", True, None, "nested more than"),
        (f"{RESULT}[1, 2]\n{END}tok\n", True, None, "an array, not an object"),
        (f'{RESULT}"text"\n{END}tok\n', True, None, "a string, not an object"),
        (f"{RESULT}null\n{END}tok\n", True, None, "null, not an object"),
        (f'{RESULT}{{"n": NaN}}\n{END}tok\n', True, None, "not a JSON number"),
        (f'{RESULT}{{"n": {2**70}}}\n{END}tok\n', True, None, "out of range"),
        (f'{RESULT}{{"a": 1\n{END}tok\n', True, None, "not valid JSON"),
        (f"{RESULT_COMPRESSED}not base64!\n{END}tok\n", True, None, "not base64 of zlib data"),
    ],
)
def test_hostile_output_is_described_not_raised(stdout: str, completed: bool, payload: object, problem: str) -> None:
    run = output(stdout)
    assert (run.completed, run.payload) == (completed, payload)
    assert run.problem is not None and problem in run.problem, run.problem


def test_an_oversized_result_is_no_result() -> None:
    big = json.dumps({"x": "y" * 5000})
    run = output(f"{RESULT}{big}\n{END}tok\n", max_chars=1000)
    assert run.payload is None and run.problem is not None and "1000" in run.problem
    assert output(f"{RESULT}{big}\n{END}tok\n", max_chars=10_000).payload == {"x": "y" * 5000}


def test_a_compressed_result_is_read_within_the_limit() -> None:
    def compressed(text: str) -> str:
        return b64encode(zlib.compress(text.encode())).decode()

    good = output(f"{RESULT_COMPRESSED}{compressed(json.dumps({'k': [1, 2]}))}\n{END}tok\n")
    assert good.completed and good.payload == {"k": [1, 2]} and good.problem is None
    bomb = compressed(json.dumps({"k": " " * 10_000_000}))  # a few kilobytes that inflate to 10 MB
    run = output(f"{RESULT_COMPRESSED}{bomb}\n{END}tok\n", max_chars=100_000)
    assert run.payload is None and run.problem is not None and "size limit" in run.problem


def test_without_a_token_the_last_result_line_counts() -> None:
    run = output(f'{RESULT}{{"n": 1}}\n{RESULT}{{"n": 2}}\n', token=None)
    assert run.completed and run.payload == {"n": 2} and run.problem is None
    late = output(f'{RESULT}{{"n": 1}}\nprinted later\n', token=None)
    assert not late.completed and late.payload == {"n": 1}
    assert late.problem == "the result line is not the last line of output"


def test_an_exit_status_is_named_when_the_token_is_missing() -> None:
    run = output(f"{RESULT}{{}}\n", returncode=3)
    assert not run.completed and run.problem is not None and "exit 3" in run.problem


# ---------------------------------------------------------------- the program side, in the sandbox


PROBE = textwrap.dedent("""
    import os
    import _gym_repost_protocol as protocol

    config = protocol.read_config(token=True)
    after = os.read(0, 100)
    pid = os.fork()
    if pid == 0:
        protocol.drop_token()
        found = b""
        for descriptor in range(3, 256):
            try:
                os.set_blocking(descriptor, False)
                found += os.read(descriptor, 4096)
            except OSError:
                pass
        os._exit(1 if found else 0)
    _, status = os.waitpid(pid, 0)
    token = protocol.read_token()
    protocol.write_result({"size": len(config["blob"]), "stdin_after": after.decode(),
                           "child_found_token": os.WEXITSTATUS(status) == 1, "token": token}, token)
""")


def test_the_configuration_is_read_exactly_and_the_token_kept_from_children(sandbox: Sandbox) -> None:
    config = {"blob": "é" * 300_000}  # several pipe buffers, multi-byte characters
    files = {program_file("probe"): PROBE, PROTOCOL_NAME: program_source("protocol")}
    result = sandbox.run(files, ["python3", program_file("probe")], timeout=30, stdin=program_stdin(config, "s3cret"))
    run = read_program_output(result, "s3cret")
    assert run.completed and run.problem is None, (run.problem, result.stderr[-500:])
    assert run.payload == {"size": 300_000, "stdin_after": "", "child_found_token": False, "token": "s3cret"}


def _exit_in_child(pipe_of: str, replace_fd: bool = False) -> tuple[int, bytes, bytes]:
    """Fork; the child sets ``protocol.exit_pipe`` for a pipe (naming itself or, with
    ``pipe_of="parent"``, this process) and calls ``protocol.exit(3)``, after putting a file
    where the pipe was when ``replace_fd``. Exit status, what the pipe got, what the file got."""
    import os
    import tempfile

    from gym_repost.programs import protocol

    read_end, write_end = os.pipe()
    info = os.fstat(write_end)
    parent = os.getpid()
    with tempfile.TemporaryFile() as stray:
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_end)
                who = os.getpid() if pipe_of == "child" else parent
                protocol.exit_pipe = (who, write_end, info.st_dev, info.st_ino)
                if replace_fd:
                    os.dup2(stray.fileno(), write_end)
                protocol.exit(3)
            finally:
                os._exit(99)
        os.close(write_end)
        _, status = os.waitpid(pid, 0)
        told = os.read(read_end, 16)
        os.close(read_end)
        stray.seek(0)
        return os.waitstatus_to_exitcode(status), told, stray.read()


def test_exit_tells_the_status_pipe_only_from_the_run_process_on_that_very_pipe() -> None:
    """``protocol.exit`` writes the exit status to the local sandbox's status pipe before
    ``os._exit``, so PID 1 answers without waiting for the teardown; a process the run forked
    (another pid) tells nothing, nor does a run whose descriptor now holds a file of its own."""
    assert _exit_in_child("child") == (3, b"\x03", b"")
    assert _exit_in_child("parent") == (3, b"", b"")
    assert _exit_in_child("child", replace_fd=True) == (3, b"", b"")


@pytest.mark.limits
def test_a_wall_clock_guard_stretches_only_for_a_busy_process() -> None:
    """Every program's wall-clock guards stop code that waits; its CPU limits stop code that
    computes. Past its guard, a process that has been busy (running, or waiting for a CPU on
    a loaded machine) for half the time since the guard was armed goes on, up to
    ``WALL_STRETCH`` times the guard, so the load does not decide a verdict; one that sleeps
    is stopped at the guard."""
    import subprocess
    import sys
    import time

    from gym_repost.programs import protocol
    from gym_repost.programs.testfile_zygote import _over_limit

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdout.write('up'); time.sleep(60)"])
    try:
        for _ in range(600):  # until the sleeper sleeps and the loop has run (counted, not timed)
            if not protocol.runnable(idle.pid) and protocol.cpu_seconds(busy.pid) > 0.02:
                break
            time.sleep(0.05)
        guards = {pid: protocol.WallGuard(0.3, pid) for pid in (busy.pid, idle.pid)}
        time.sleep(0.6)
        limits = {"cpu": 1000.0, "wall": 0.3}
        assert _over_limit(busy.pid, limits, guards[busy.pid]) is None  # stretched
        assert "wall-clock guard" in (_over_limit(idle.pid, limits, guards[idle.pid]) or "")
        assert guards[idle.pid].waited() >= 0.5 and guards[busy.pid].waited() < 0.3  # waiting, not queued
        guards[busy.pid].started -= protocol.WALL_STRETCH * 0.3  # beyond the stretched guard
        assert "wall-clock guard" in (_over_limit(busy.pid, limits, guards[busy.pid]) or "")
        assert "CPU limit" in (_over_limit(busy.pid, {"cpu": 0.01, "wall": 1.0}, protocol.WallGuard(60)) or "")
        own = protocol.WallGuard(0.2)  # this process's own guard (an alarm's): it sleeps
        time.sleep(1.0)  # (a loaded machine adds its wait for a CPU on waking: far less than this)
        assert own.expired()
    finally:
        for process in (busy, idle):
            process.kill()
            process.wait()
    assert not protocol.runnable(busy.pid)  # gone


# ---------------------------------------------------------------- each program's round trip


class RecordingSandbox(Sandbox):
    """The real sandbox, keeping every program run's command, standard input and result."""

    def __init__(self, inner: Sandbox) -> None:
        self.inner = inner
        self.runs: list[tuple[list[str], str | None, RunResult]] = []

    def start(self) -> None:
        self.inner.start()

    def close(self) -> None:
        pass

    def run(
        self,
        files: Mapping[str, str | bytes],
        command: Sequence[str],
        timeout: float = 10.0,
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        cpu_seconds: float | None = None,
    ) -> RunResult:
        result = self.inner.run(files, command, timeout, stdin=stdin, env=env, network=network, cpu_seconds=cpu_seconds)
        self.runs.append((list(command), stdin, result))
        return result

    def program_runs(self, name: str) -> list[tuple[dict[str, object], ProgramRun]]:
        """Each run of program ``name``: the configuration it was given and what it reported."""
        out = []
        for command, stdin, result in self.runs:
            if command != ["python3", program_file(name)]:
                continue
            assert stdin is not None
            size, rest = stdin.split("\n", 1)
            text, token = rest.encode()[: int(size)].decode(), rest.encode()[int(size) + 1 :].decode().strip()
            out.append((json.loads(text), read_program_output(result, token or None)))
        return out


def assert_round_trips(recorder: RecordingSandbox, name: str, keys: set[str]) -> None:
    runs = recorder.program_runs(name)
    assert runs, f"no run of {name}"
    for config, run in runs:
        assert isinstance(config, dict) and config
        assert run.completed and run.problem is None, (name, run.problem, run.result.stderr[-500:])
        assert run.payload is not None and keys <= set(run.payload), (name, sorted(run.payload or {}))


def test_harness_round_trip(sandbox: Sandbox, function_task: FunctionTask) -> None:
    recorder = RecordingSandbox(sandbox)
    task = function_task.model_copy(
        update={
            "evaluation": function_task.evaluation.model_copy(
                update={"timeout": function_task.evaluation.timeout + 0.25}
            )
        }
    )  # a fresh reference: runs it here
    assert run_function_tests(recorder, task, task.ground_truth.replace("\n", "\n\n", 1)).passed
    assert_round_trips(recorder, "harness", {"calls", "overflow", "completed", "inputs", "report"})


def test_coverage_round_trip(sandbox: Sandbox, function_task: FunctionTask) -> None:
    recorder = RecordingSandbox(sandbox)
    assert measure_coverage(recorder, function_task).line_coverage > 0
    assert_round_trips(recorder, "coverage", {"outcome", "executed_lines", "missing_branches"})


WIPE = """\
import os
import shutil


def wipe(keep):
    \"\"\"Remove every entry of the working directory; give back ``keep``.\"\"\"
    for name in sorted(os.listdir(".")):
        if os.path.isdir(name):
            shutil.rmtree(name)
        else:
            os.remove(name)
    return keep
"""


def test_coverage_is_measured_when_the_tests_empty_their_working_directory(sandbox: Sandbox) -> None:
    """python-fsutil's ``delete_dir_content('')`` empties the working directory, the
    evaluation script with it, and coverage.py's report, which reads the script's source,
    failed: the candidate was dropped as an infrastructure error ("coverage measurement
    ... produced no result"). The script is put back before the report."""
    from tests.conftest import build_task

    script = WIPE + (
        "\n\ndef test_wipe():\n"
        "    assert wipe(1) == wipe_new_implementation(1)\n"
        "    assert wipe(0) == wipe_new_implementation(0)\n"
        "\n\nif __name__ == '__main__':\n    test_wipe()\n"
    )
    task = build_task(script, "wipe", {"tiny/__init__.py": "", "tiny/wipe.py": WIPE}, "tiny/wipe.py")
    measured = measure_coverage(sandbox, task)
    assert measured.outcome == "passed" and measured.line_coverage > 0.5, measured


def test_matrix_round_trip(sandbox: Sandbox, function_task: FunctionTask) -> None:
    recorder = RecordingSandbox(sandbox)
    suite = TestSuite(("assert score([1, 2, 3], 100) == 60", "assert score([]) == 1"))
    run = run_code_against_tests(recorder, function_task, function_task.ground_truth, suite)
    assert [o.outcome for o in run.outcomes] == ["pass", "fail"]
    assert_round_trips(recorder, "matrix", {"results"})


def test_testfile_round_trip(sandbox: Sandbox) -> None:
    recorder = RecordingSandbox(sandbox)
    run = run_test_file(recorder, make_testfile_task(max_mutants=3), GROUND_TRUTH)
    assert run.status == "completed" and run.mutation_status == "completed"
    assert_round_trips(recorder, "testfile", {"status", "tests", "coverage", "mutants"})


def test_trace_round_trip(sandbox: Sandbox, tmp_path) -> None:  # type: ignore[no-untyped-def]
    recorder = RecordingSandbox(sandbox)
    repo = repository(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/mod.py": "def double(x):\n    return 2 * x\n",
            "tests/test_mod.py": "from pkg.mod import double\n\n\ndef test_double():\n    assert double(3) == 6\n",
        },
    )
    target = candidate(repo.files["pkg/mod.py"], "double", "pkg/mod.py")
    result = trace_repository(recorder, repo, [target], timeout=60)
    assert result.tests_run == 1 and result.calls[target.key]
    assert_round_trips(recorder, "trace", {"calls", "missing", "tests_run"})


def test_explore_round_trip(sandbox: Sandbox) -> None:
    recorder = RecordingSandbox(sandbox)
    module = "def sign(x):\n    if x > 0:\n        return 1\n    if x < 0:\n        return -1\n    return 0\n"
    generate_tests(recorder, script(module, "sign"), executions=500)
    assert_round_trips(recorder, "explore", {"ok"})


def test_undefined_names_are_read_from_the_collection_errors_of_pytest_s_summary() -> None:
    output = textwrap.dedent("""\
        E   NameError: name 'ignored' is not defined
        =========================== short test summary info ============================
        ERROR test_mccabe.py - NameError: name 'settings' is not defined
        ERROR tests/test_b.py::test_x - NameError: name 'given' is not defined
        ERROR tests/test_c.py - ImportError: cannot import name 'x'
        ERROR test_mccabe.py - NameError: name 'settings' is not defined
        """)
    assert undefined_names(output) == [("test_mccabe.py", "settings"), ("tests/test_b.py", "given")]
    assert undefined_names("no summary") == []
