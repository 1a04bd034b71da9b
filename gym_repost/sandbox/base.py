"""The sandbox seam: one ABC every backend implements, and the result of a run.

The contract every backend keeps (``gym-repost sandbox check`` runs one conformance
suite against each):

* no network unless ``network=True`` is asked for;
* a fresh, empty working directory per run, holding only the ``files`` given;
* limits on CPU time, memory, number of processes and file size;
* stdout and stderr capped (head and tail are kept, the middle is dropped);
* on timeout the whole process tree is killed, and nothing keeps running after
  :meth:`Sandbox.close`;
* nothing written outside the working directory survives the run or reaches the host;
* nothing readable but the run's directory, the interpreter and the evaluation
  environment's packages (no project, task files, datasets, home or host packages);
* a disk quota per run (``disk_mb``: ENOSPC past it), and a memory cap on all the run's
  processes together (a cgroup; where none can be made, RLIMIT_AS per process only, as
  ``describe()["memory_cap"]`` says);
* a scrubbed environment: only ``PATH``, ``HOME``, ``LANG``, ``TMPDIR``,
  ``PYTHONHASHSEED``, ``PYTHONDONTWRITEBYTECODE``, in a run without network
  :data:`OFFLINE_ENV`, and what the caller passes in ``env``.

A command whose first element is ``python`` or ``python3`` runs the sandbox's own
interpreter (the one that has the evaluation packages installed).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_TIMEOUT = 7 * 24 * 3600.0
"""The longest wall-clock timeout a run may have (seconds), on every backend."""


@dataclass(frozen=True)
class RunResult:
    """What one sandboxed command did.

    Attributes:
        returncode: exit status; negative ``-N`` when killed by signal ``N``.
        stdout: captured standard output (UTF-8, undecodable bytes replaced), capped.
        stderr: captured standard error, capped the same way.
        timed_out: True when the wall-clock timeout expired and the tree was killed.
        duration: wall-clock seconds from start to the end of the process tree.
        output_truncated: True when stdout or stderr exceeded the cap.
        killed_for: why the sandbox killed the run (``"timeout"``, ``"output"``), else None.
    """

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration: float = 0.0
    output_truncated: bool = False
    killed_for: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0 in time."""
        return self.returncode == 0 and not self.timed_out


class SandboxLimits(BaseModel):
    """Resource limits applied to every run. Shared by all backends."""

    model_config = ConfigDict(extra="forbid")

    cpu_seconds: float = Field(default=60.0, gt=0)
    """CPU time per process (RLIMIT_CPU); a backstop behind the wall-clock timeout."""
    memory_mb: int = Field(default=4096, gt=0)
    """Address space per process in MiB (RLIMIT_AS); RepoST used 4 GiB."""
    max_processes: int = Field(default=64, gt=0)
    """Processes and threads the run may have at once (RLIMIT_NPROC)."""
    max_file_size_mb: int = Field(default=64, gt=0)
    """Largest file the run may write, in MiB (RLIMIT_FSIZE)."""
    disk_mb: int = Field(default=256, gt=0)
    """What a run may write in all, in MiB: its directory, ``/tmp`` and ``/dev/shm``
    together (one tmpfs of this size per run); past it writes fail with ENOSPC."""
    max_output_bytes: int = Field(default=1_000_000, gt=0)
    """Bytes kept of stdout and of stderr each (head and tail)."""


INSTALL_TARGET = "_gym_repost_target"
"""Directory of an install run where pip puts the packages; the backend copies it out."""
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "npm_config_offline": "true",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
}
"""Set in every run without network: tools that would download (the Hugging Face hub, ``npx``)
fail at once, saying they are offline, instead of retrying until the run's timeout, and
litellm reads the model prices it ships instead of retrying their download at every import."""
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
"""The host's proxy settings, which an install run (and an image build) passes on to pip."""
CA_ENV = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
"""Variables naming a CA bundle that pip should trust."""


CONSTRAINTS_FILE = "_gym_repost_constraints.txt"
"""The run file of an install's pip constraints (``-c``): see :meth:`Sandbox.install`."""


def pip_install_command(requirements: Sequence[str], constraints: Sequence[str] = ()) -> list[str]:
    """The command of :meth:`Sandbox.install`: ``pip install --target`` into the run directory,
    under the constraints file :data:`CONSTRAINTS_FILE` when ``constraints`` names any.

    Raises:
        ValueError: ``requirements`` is a string or empty.
    """
    if isinstance(requirements, str) or not requirements:
        raise ValueError("requirements must be a non-empty list of pip arguments")
    return [
        "python",
        "-m",
        "pip",
        "install",
        "--no-cache-dir",
        "--no-input",
        "--disable-pip-version-check",
        "--target",
        INSTALL_TARGET,
        *(["-c", CONSTRAINTS_FILE] if constraints else []),
        *requirements,
    ]


def install_files(constraints: Sequence[str]) -> dict[str, str | bytes]:
    """The run files of an install: the constraints file when there are constraints.

    Raises:
        ValueError: ``constraints`` is a string, or a line holds a newline.
    """
    if isinstance(constraints, str) or any("\n" in line or "\r" in line for line in constraints):
        raise ValueError("constraints must be a list of pip constraint lines (NAME==VERSION)")
    return {CONSTRAINTS_FILE: "".join(f"{line}\n" for line in constraints)} if constraints else {}


PACKAGE_SETS = ".sets"  # the worker's protocol module names it too
"""The package cache's directory of package sets (see :meth:`Sandbox.package_set`); its
name is no module name, so nothing imports it from the cache."""
_SET_NAME = re.compile(r"[0-9a-z][0-9a-z_-]{0,63}")


def check_package_set(name: str) -> str:
    """``name`` if it names a package set (lower-case letters, digits, ``_`` and ``-``; at
    most 64): it becomes a directory name below the package cache.

    Raises:
        ValueError: it does not.
    """
    if not isinstance(name, str) or not _SET_NAME.fullmatch(name):
        raise ValueError(f"a package set's name is 1-64 of [0-9a-z_-], starting with a letter or digit: {name!r}")
    return name


CANDIDATES = "candidates"
"""The trust domain of every run but those of :meth:`Sandbox.ground_truth`."""
GROUND_TRUTH = "ground_truth"
"""The trust domain of runs that hold a ground truth (:meth:`Sandbox.ground_truth`)."""


class Sandbox(abc.ABC):
    """A place to run untrusted code.

    Use as a context manager, or call :meth:`start` and :meth:`close`. :meth:`run` is
    thread-safe: the runner calls it from several worker threads at once.
    """

    name: str = "sandbox"

    def __deepcopy__(self, memo: dict[int, object]) -> Sandbox:
        # A sandbox is a handle on running workers: copies share it (gymnasium deep-copies
        # environment kwargs, e.g. in check_env).
        return self

    def __reduce__(self) -> str | tuple[Any, ...]:
        raise TypeError(
            f"a {type(self).__name__} cannot be sent to another process; give the environment "
            "sandbox_config=... instead and each process starts its own sandbox"
        )

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @abc.abstractmethod
    def start(self) -> None:
        """Acquire resources (start warm workers or containers). Idempotent.

        Raises:
            SandboxUnavailableError: the backend cannot run here; the message says why
                and how to fix it.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Stop everything this sandbox started. Idempotent; nothing keeps running."""

    @abc.abstractmethod
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
        """Run ``command`` in a fresh working directory holding ``files``.

        Args:
            files: relative POSIX path to content; parent directories are created. Paths
                that are absolute or climb out with ``..`` are rejected.
            command: argv; ``python``/``python3`` as the first element means the
                sandbox's interpreter.
            timeout: wall-clock seconds; on expiry the whole process tree is killed and
                the result has ``timed_out=True``. With ``cpu_seconds`` given it is a guard
                beside that limit: the local sandbox lets a run that computes (or waits for a
                CPU on a loaded machine) go on past it, up to ``WALL_STRETCH`` (10) times.
                At most :data:`MAX_TIMEOUT`.
            stdin: text fed to the command's standard input (then closed).
            env: extra environment variables (the rest of the environment is scrubbed).
            network: allow network access for this run (package installs only).
            cpu_seconds: this run's CPU-time limit (RLIMIT_CPU) in place of the sandbox's
                ``cpu_seconds``, for a run with a CPU budget of its own (a repository's
                whole test suite under the tracer); None: the sandbox's. At the limit the
                run gets SIGXCPU, and SIGKILL one second later.

        Returns:
            The :class:`RunResult`. A command that fails, crashes or times out is a
            normal result, not an exception.

        Raises:
            SandboxError: the sandbox itself failed (a worker died, the engine is gone);
                the caller records an infrastructure error.
            ValueError: ``files`` holds a path outside the working directory, or
                ``cpu_seconds`` is not a positive number.
        """

    def install(
        self, requirements: Sequence[str], timeout: float = 900.0, constraints: Sequence[str] = ()
    ) -> RunResult:
        """Install distributions into the package cache every later run sees (into a
        package set, for a sandbox :meth:`package_set` gave).

        Runs ``pip install`` inside the sandbox with the network enabled for that run
        only, under ``constraints`` (pip constraint lines, ``NAME==VERSION``: what a
        corpus pins its repositories' test dependencies with). Backends without a package
        cache raise ``NotImplementedError``.
        """
        raise NotImplementedError(f"the {self.name} sandbox cannot install packages")

    def describe(self) -> dict[str, object]:
        """A JSON-able description of the backend and its limits (for run configs)."""
        return {"backend": self.name}

    def package_set(self, name: str) -> Sandbox | None:
        """This sandbox with runs that see the package set ``name``, empty when made, in place
        of the package cache, and whose :meth:`install` installs into it; None when the backend
        has no package sets (the default).

        A build installs what its repository needs into a set of its own, so that what it
        builds never depends on what other builds installed before it, on this machine or on
        this node of a Ray cluster: an optional package that another repository's tests
        needed (``pytest.importorskip("hypothesis")``) would change which of its tests run.
        Making a set that exists empties it. :meth:`remove_package_set` removes it.

        Raises:
            ValueError: ``name`` is no set's name (:func:`check_package_set`).
        """
        check_package_set(name)
        return None

    def remove_package_set(self, name: str) -> None:
        """Remove the package set ``name`` and what was installed into it (none: nothing)."""
        check_package_set(name)

    def for_imports(self, packages: Iterable[str]) -> Sandbox:
        """The sandbox to run code that imports the top-level ``packages`` in: the same runs,
        the same results, maybe sooner. The local sandbox serves such runs from a warm
        worker that preloaded a heavy module they import
        (:attr:`~gym_repost.sandbox.config.LocalSandboxConfig.preload_apart`); by default,
        this sandbox itself. The harness passes a task's ``metadata.external_packages``.
        """
        return self

    def ground_truth(self) -> Sandbox:
        """This sandbox for the runs that hold a ground truth: a task's reference runs, the
        playback of a candidate's values against the task's tests, the value plans and
        judges of an execution matrix, the batches of host-made candidates beside the
        ground truth. No candidate's run may share a process with them, nor descend from a
        process that held one (``DESIGN.md``, Trust domains).

        The local sandbox serves them from warm workers of their own. A backend whose
        every run is a fresh process that nothing of an earlier run survives (docker: one
        ``exec`` per run, its processes killed and its directories emptied after it) may
        return itself, the default.
        """
        return self

    def clock_ahead(self, seconds: float) -> Sandbox | None:
        """This sandbox with the wall clock of its runs ``seconds`` ahead of the real one
        (``time.time()``, ``datetime.now()``, ``date`` in a subprocess; not the monotonic
        clocks, not file times); None when the backend cannot shift it (the default).

        The harness makes a reference's second and third runs on a clock ahead, so that
        what a ground truth derives from the clock (a timestamp it prints or returns) is
        seen to change and is not compared: a correct candidate run later does not fail on
        it. A backend that returns None gets references as before (the clock compared
        like any other output).
        """
        return None


def limit_overrides(cpu_seconds: float | None = None, **more: float) -> dict[str, float]:
    """The limits one run has in place of the sandbox's (``SandboxLimits`` field -> value):
    ``cpu_seconds`` when given, and ``more``.

    Raises:
        ValueError: ``cpu_seconds`` is not a positive number.
    """
    if cpu_seconds is None:
        return dict(more)
    if isinstance(cpu_seconds, bool) or not isinstance(cpu_seconds, (int, float)) or not 0 < cpu_seconds < 1e9:
        raise ValueError(f"cpu_seconds must be a positive number of seconds, got {cpu_seconds!r}")
    return {**more, "cpu_seconds": float(cpu_seconds)}


def install_limits(limits: SandboxLimits, timeout: float) -> dict[str, float]:
    """The limits of an install run in place of the sandbox's: pip writes large wheels, and
    builds from source for as long as its timeout allows."""
    return limit_overrides(max(limits.cpu_seconds, timeout), max_file_size_mb=max(limits.max_file_size_mb, 4096))


def check_relative_path(path: str) -> str:
    """Normalise a file name given to :meth:`Sandbox.run`; reject escapes.

    Raises:
        ValueError: the path is empty, absolute, or climbs out of the directory.
    """
    if not path or path.startswith(("/", "\\")) or "\x00" in path:
        raise ValueError(f"sandbox file path must be relative and non-empty: {path!r}")
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise ValueError(f"sandbox file path climbs out of the working directory: {path!r}")
    return "/".join(parts)
