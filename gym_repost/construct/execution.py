"""Stage 6: run an evaluation script in the sandbox; install what it is missing.

On ``ModuleNotFoundError`` the missing module's distribution (import name resolved by
:func:`~gym_repost.analysis.packages.distribution_for`) is installed into the
sandbox's package cache and the run is retried, a bounded number of times. Installs are
remembered per build, so two candidates missing the same package install it once, and
a package that failed to install is not tried again. A build installs into a package set
of its own (:func:`own_packages`), made empty when it starts: what it sees is what it
installed, whatever other builds installed before it.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gym_repost.analysis.packages import distribution_for
from gym_repost.errors import BuildError
from gym_repost.harness import run_function_tests
from gym_repost.harness.function_report import TestReport
from gym_repost.sandbox.base import RunResult, Sandbox
from gym_repost.task import FunctionTask

logger = logging.getLogger(__name__)

_MISSING = re.compile(r"No module named '([^']+)'")
_PIP_INSTALLED = re.compile(r"^Successfully installed (.+)$", re.M)
_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9][A-Za-z0-9.+!_-]*")


def read_constraints(path: Path) -> tuple[str, ...]:
    """The pins of a constraints file (``NAME==VERSION`` a line; ``#`` comments and blank
    lines left out), sorted: what a build's installs are held to (see
    :meth:`~gym_repost.sandbox.base.Sandbox.install`), so that a corpus built again later
    installs its repositories' test dependencies at the versions of its first build.

    Raises:
        BuildError: the file cannot be read, or a line is not ``NAME==VERSION`` (with the
            file and line).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BuildError(f"{path}: cannot read the constraints file: {exc}") from None
    pins = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not _PIN.fullmatch(line):
            raise BuildError(f"{path}:{number}: {raw.strip()!r} is not a pin (NAME==VERSION)")
        pins.append(line)
    return tuple(sorted(set(pins), key=str.lower))


def pip_installed(output: str) -> dict[str, str]:
    """Name to version of what pip's ``Successfully installed NAME-VERSION ...`` line lists."""
    found = _PIP_INSTALLED.search(output)
    pairs = [item.rsplit("-", 1) for item in found.group(1).split()] if found else []
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2 and pair[0] and pair[1]}


def missing_module(text: str, tried: Collection[str] = ()) -> str | None:
    """The first top-level module a ``ModuleNotFoundError`` message names that is not in
    ``tried``, if any."""
    return next((m for m in (f.split(".")[0] for f in _MISSING.findall(text)) if m not in tried), None)


@contextmanager
def own_packages(sandbox: Sandbox) -> Iterator[tuple[Sandbox, str | None]]:
    """``sandbox`` with a package set of its own for one repository's build or audit (see
    :meth:`Sandbox.package_set`), removed afterwards: the runs see only what this work
    installs, so what it builds never depends on what other builds installed into the
    cache before it, on this machine or on this node. Yields ``(sandbox, limit)``: where the
    backend has no package sets, the sandbox itself and a line for the build's limits."""
    name = f"b{os.getpid()}-{secrets.token_hex(6)}"
    box = sandbox.package_set(name)
    if box is None:
        yield (
            sandbox,
            (
                f"packages: the {sandbox.name} sandbox has no package sets: this build's runs saw "
                "what earlier builds installed into its package cache, and what it kept may depend on it"
            ),
        )
        return
    try:
        yield box, None
    finally:
        sandbox.remove_package_set(name)


@dataclass
class PackageInstaller:
    """Installs distributions into a sandbox's package cache, once each per build.

    Attributes:
        refuse: top-level names never installed (the repository's own packages: a
            script that still imports them is a sandboxing failure, not a missing
            dependency).
    """

    sandbox: Sandbox
    refuse: frozenset[str] = frozenset()
    timeout: float = 600.0
    constraints: tuple[str, ...] = ()
    """Pins every install is held to (:func:`read_constraints`)."""
    installed: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    """Every distribution pip installed for the build (requirements and theirs), by name:
    its version, as pip's ``Successfully installed`` line gives them."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def pins(self) -> list[str]:
        """``NAME==VERSION`` of what pip installed for the build, sorted: what a corpus's
        constraints file holds its next build to."""
        return [f"{name}=={version}" for name, version in sorted(self.versions.items(), key=lambda n: n[0].lower())]

    def provide(self, module: str) -> bool:
        """Install the distribution providing ``module``: True when it is there."""
        return self.install_for(module)[0]

    def install_for(self, module: str) -> tuple[bool, str]:
        """Install the distribution providing ``module``; ``(ok, what happened)``."""
        if module in self.refuse:
            return False, f"{module} is the repository's own package (the script still imports it)"
        dist = distribution_for(module)
        with self._lock:
            if dist in self.installed:
                return True, f"{dist} already installed"
            if dist in self.failed:
                return False, f"installing {dist} failed before: {self.failed[dist]}"
            result = self._install(dist)
            if result.ok:
                self.installed[dist] = module
                self.versions.update(pip_installed(result.stdout))
                return True, f"installed {dist}"
            reason = _pip_error(result)
            self.failed[dist] = reason
            return False, f"installing {dist} failed: {reason}"

    def _install(self, dist: str) -> RunResult:
        logger.info("installing %s into the sandbox's package cache", dist)
        try:
            return self.sandbox.install([dist], timeout=self.timeout, constraints=self.constraints)
        except NotImplementedError as exc:
            return RunResult(returncode=1, stdout="", stderr=str(exc))


def _pip_error(result: RunResult) -> str:
    lines = [ln.strip() for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or [f"pip exited with {result.returncode}"])[-1][:200]


@dataclass
class ExecutionOutcome:
    """The last run of the ground truth and what was installed on the way."""

    report: TestReport
    installs: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """The ground truth passes the script's tests."""
        return self.report.passed


def run_with_installs(
    sandbox: Sandbox, task: FunctionTask, installer: PackageInstaller | None, max_installs: int = 5
) -> ExecutionOutcome:
    """Run the task's tests with its ground truth, installing missing packages.

    Raises:
        SandboxError: the sandbox failed (infrastructure).
    """
    outcome = ExecutionOutcome(run_function_tests(sandbox, task, task.ground_truth))
    while installer is not None and len(outcome.installs) < max_installs:
        module = (
            missing_module(outcome.report.message)
            if outcome.report.exception in ("ModuleNotFoundError", "ImportError")
            else None
        )
        if module is None:
            break
        ok, what = installer.install_for(module)
        outcome.installs.append(what)
        if not ok:
            break
        outcome.report = run_function_tests(sandbox, task, task.ground_truth)
    return outcome
