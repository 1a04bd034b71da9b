"""The conformance suite against the local backend (warm, cold, isolation="none"), and
against an unsandboxed fake to show that the suite catches what it should."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

import pytest

from gym_repost.sandbox.base import RunResult, Sandbox, check_relative_path
from gym_repost.sandbox.config import LocalSandboxConfig
from gym_repost.sandbox.conformance import CHECK_NAMES, CheckResult, run_conformance
from gym_repost.sandbox.local import LocalSandbox

pytestmark = pytest.mark.limits  # run again beside CPU burners in CI (.ci/run)

QUICK = [
    "hello_world",
    "fresh_directory",
    "no_network",
    "no_writes_outside",
    "environment_scrubbed",
    "stdin_closed_by_default",
    "background_process_killed",
]
"""Cheap checks for the slower configurations (a cold run starts an interpreter)."""

TRUSTED_ONLY = [
    "hello_world",
    "exit_codes",
    "fresh_directory",
    "nested_files",
    "path_escape_rejected",
    "timeout_kills_tree",
    "background_process_killed",
    "cpu_limit",
    "memory_limit",
    "output_flood_capped",
    "output_head_and_tail",
    "file_size_limit",
    "environment_scrubbed",
    "stdin_delivered",
    "stdin_closed_by_default",
    "hash_seed_stable",
]
"""What isolation="none" still guarantees: limits, timeouts, output caps, scrubbing."""


def _by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.name: r for r in results}


@pytest.fixture(scope="module")
def warm_results(warm_sandbox: LocalSandbox) -> dict[str, CheckResult]:
    return _by_name(run_conformance(warm_sandbox))


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_warm_sandbox_conforms(warm_results: dict[str, CheckResult], name: str) -> None:
    result = warm_results[name]
    assert result.passed, result.detail


def test_suite_runs_every_check_once(warm_results: dict[str, CheckResult]) -> None:
    assert list(warm_results) == list(CHECK_NAMES)
    assert len(CHECK_NAMES) >= 18


def test_cold_sandbox_keeps_the_quick_guarantees(tmp_path: os.PathLike[str]) -> None:
    config = LocalSandboxConfig(warm=False, work_root=str(tmp_path))
    sandbox = LocalSandbox(config)
    with sandbox:
        results = run_conformance(sandbox, only=QUICK)
    assert [r.name for r in results if not r.passed] == [], results


@pytest.mark.slow
def test_cold_sandbox_conforms_fully(tmp_path: os.PathLike[str]) -> None:
    sandbox = LocalSandbox(LocalSandboxConfig(warm=False, work_root=str(tmp_path)))
    with sandbox:
        failed = [r for r in run_conformance(sandbox) if not r.passed]
    assert failed == []


def test_isolation_none_keeps_limits_and_timeouts(tmp_path: os.PathLike[str]) -> None:
    config = LocalSandboxConfig(isolation="none", work_root=str(tmp_path))
    sandbox = LocalSandbox(config)
    with sandbox:
        failed = [r for r in run_conformance(sandbox, only=TRUSTED_ONLY) if not r.passed]
    assert failed == []


def test_unknown_check_is_rejected(warm_sandbox: LocalSandbox) -> None:
    with pytest.raises(ValueError, match="no_such_check"):
        run_conformance(warm_sandbox, only=["no_such_check"])


class UnsandboxedSubprocess(Sandbox):
    """A plain subprocess with the host's environment and network: what not to do."""

    name = "unsandboxed"

    def start(self) -> None:
        pass

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
        with tempfile.TemporaryDirectory() as directory:
            for name, content in files.items():
                path = os.path.join(directory, check_relative_path(name))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as handle:
                    handle.write(content.encode() if isinstance(content, str) else content)
            argv = [sys.executable if command[0].startswith("python") else command[0], *command[1:]]
            done = subprocess.run(
                argv,
                cwd=directory,
                input=stdin or "",
                text=True,
                capture_output=True,
                timeout=timeout,
                env={**os.environ, **(env or {})},
                check=False,
            )
        return RunResult(done.returncode, done.stdout, done.stderr)


def test_suite_catches_an_unsandboxed_backend() -> None:
    safe = [
        "hello_world",
        "path_escape_rejected",
        "no_network",
        "no_writes_outside",
        "environment_scrubbed",
        "hidden_host_paths",
    ]
    results = _by_name(run_conformance(UnsandboxedSubprocess(), only=safe))
    assert results["hello_world"].passed
    assert results["path_escape_rejected"].passed
    assert not results["no_network"].passed
    assert "loopback" in results["no_network"].detail
    assert not results["no_writes_outside"].passed
    assert not results["environment_scrubbed"].passed
    assert not results["hidden_host_paths"].passed
    assert "readable" in results["hidden_host_paths"].detail


class ClockAheadInName(UnsandboxedSubprocess):
    """Offers a clock ahead whose runs read the real clock."""

    def clock_ahead(self, seconds: float) -> Sandbox | None:
        return self


def test_suite_catches_a_clock_ahead_that_is_not() -> None:
    assert run_conformance(UnsandboxedSubprocess(), only=["clock_ahead"])[0].passed  # none offered
    result = run_conformance(ClockAheadInName(), only=["clock_ahead"])[0]
    assert not result.passed and "a run on the clock ahead read the wall clock" in result.detail
