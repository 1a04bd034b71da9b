"""Run directories: the episode records, the run's configuration, resuming after a kill.

Layout of ``RUN_DIR``: ``config.json`` (what the run is), ``episodes.jsonl`` (one line
per finished episode, appended, flushed and synced), ``trajectories.jsonl`` (each
episode's transcript: the task prompt, then per step what the policy said and did and what
the environment answered; :mod:`gym_repost.evaluate.transcript` gives the format),
``summary.json``, ``report/`` (the viewer,
:mod:`gym_repost.evaluate.viewer`; ``report.html`` leads there) and
``.lock``: one writer per run directory, held with ``flock`` (released by the kernel when
its holder dies, however it dies) and naming its holder ("pid N on HOST since TIME").

A run that fails to start (a sandbox that cannot start, a refused resume, an interrupt
before the first episode is recorded) leaves nothing new behind: what its writer created
(the directory, ``.lock``, ``config.json``) is removed again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gym_repost.errors import RunDirBusyError, RunDirError
from gym_repost.policy.loader import PolicyFingerprint
from gym_repost.sandbox.config import DockerSandboxConfig, LocalSandboxConfig, SandboxConfig

logger = logging.getLogger(__name__)

EPISODES = "episodes.jsonl"
TRAJECTORIES = "trajectories.jsonl"
CONFIG = "config.json"
SUMMARY = "summary.json"
LOCK = ".lock"
RESULTS = (CONFIG, EPISODES, TRAJECTORIES, SUMMARY, "report", "report.html")
"""What a run writes about itself; ``--overwrite`` removes them (a response cache stays)."""


class RunConfig(BaseModel):
    """What a run is. Resuming requires the fields in :attr:`IDENTITY` to match."""

    model_config = ConfigDict(extra="forbid")

    tasks: str
    tasks_digest: str
    policy: str
    policy_options: dict[str, Any] = Field(default_factory=dict)
    n: int = Field(default=1, ge=1)
    repairs: int = Field(default=0, ge=0)
    max_steps: int = Field(default=30, ge=1)
    reward: Literal["binary", "shaped"] = "binary"
    seed: int = 0
    workers: int = Field(default=1, ge=1)
    sandbox: SandboxConfig = Field(default_factory=LocalSandboxConfig)
    """The sandbox the run's episodes ran in: its backend (``type``), limits and options."""
    versions: dict[str, str] = Field(default_factory=dict)
    """gym-repost, Python, Gymnasium and the platform of the run's last session (not part
    of its identity: a run can be continued after an upgrade); empty in older runs."""
    policy_fingerprint: PolicyFingerprint | None = None
    """The policy's spec, options and the SHA-256 of the files it is loaded from (a policy
    file, a script, a module's source): a run is resumed only with the same policy. None
    in runs made before it was recorded (their policy files are not checked)."""

    @model_validator(mode="before")
    @classmethod
    def _sandbox_of_older_runs(cls, data: Any) -> Any:
        """Runs made before the sandbox was typed wrote its backend's name and an options
        dict: read them as the backend's configuration (options it no longer has left out)."""
        if isinstance(data, dict) and (isinstance(data.get("sandbox"), str) or "sandbox_options" in data):
            data = dict(data)
            name, options = data.pop("sandbox", "local"), data.pop("sandbox_options", None) or {}
            fields = {"local": LocalSandboxConfig.model_fields, "docker": DockerSandboxConfig.model_fields}
            known = set(fields.get(name, {}))
            data["sandbox"] = {"type": name, **{k: v for k, v in options.items() if k in known}}
        return data

    IDENTITY: ClassVar[tuple[str, ...]] = (
        "tasks_digest",
        "policy",
        "policy_options",
        "n",
        "repairs",
        "max_steps",
        "reward",
        "seed",
    )


class Episode(BaseModel):
    """One finished episode, as a line of ``episodes.jsonl``."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    task_name: str
    sample: int
    seed: int
    policy: str
    status: Literal["passed", "failed", "infra_error"]
    submissions: list[bool] = Field(default_factory=list)
    test_runs: list[bool] | None = None
    """Whether each test run passed, ``run_tests`` and submissions in order (None in
    records written before it was kept)."""
    solved_at: int | None = None
    steps: int = 0
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    code: str | None = None
    final_report: dict[str, Any] | None = None
    infra_error: str | None = None
    """Set on ``infra_error`` episodes: what failed outside the policy (a sandbox, an LLM
    endpoint), as ``"Type: message"``. Such episodes are not scored and are rerun."""
    policy_error: dict[str, str] | None = None
    """Set when the policy itself raised (its constructor, ``reset`` or ``act``): the
    episode ends there and is a *failed* episode (pass@k counts it as a failure; the
    summary counts these apart as ``policy_errors``), not rerun. Keys: ``type`` (the
    exception's class name), ``message`` and ``traceback`` (the policy's traceback as
    text, with its ``File "...", line N`` frames)."""
    stats: dict[str, Any] = Field(default_factory=dict)
    started_at: str | None = None
    """When the episode started (UTC, ISO 8601); None in older records."""
    seconds: float | None = None
    """Wall-clock duration: shown in reports, never scored."""

    @property
    def key(self) -> tuple[str, int]:
        """``(task_id, sample)``: what makes an episode unique in a run."""
        return self.task_id, self.sample


class Trajectory(list[dict[str, Any]]):
    """An episode's steps, one dict per environment step (a list, as it always was), and
    beside them its step 0 (:attr:`reset`) and the step under way when the episode stopped
    (:attr:`interrupted`); :mod:`gym_repost.evaluate.transcript` gives the format."""

    def __init__(
        self,
        steps: Iterable[dict[str, Any]] = (),
        *,
        reset: dict[str, Any] | None = None,
        interrupted: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(steps)
        self.reset = reset
        """The reset's observation (the task prompt), what the policy's ``reset`` added to
        its transcript, and their seconds; None in runs recorded before it was kept."""
        self.interrupted = interrupted
        """What the policy said (and the action it chose, if it chose one) in a step that
        did not finish: ``act`` raised, or the infrastructure failed; None otherwise."""

    def record(self, task_id: str, sample: int) -> dict[str, Any]:
        """The line of ``trajectories.jsonl`` for this episode."""
        out: dict[str, Any] = {"task_id": task_id, "sample": sample}
        if self.reset is not None:
            out["reset"] = self.reset
        out["steps"] = list(self)
        if self.interrupted is not None:
            out["interrupted"] = self.interrupted
        return out

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Trajectory:
        """Inverse of :meth:`record` (older lines have only ``steps``).

        Raises:
            TypeError: the record is not one.
        """
        reset, interrupted = record.get("reset"), record.get("interrupted")
        if not isinstance(record["steps"], list) or not all(isinstance(s, dict) for s in record["steps"]):
            raise TypeError("steps must be a list of objects")
        return cls(
            record["steps"],
            reset=reset if isinstance(reset, dict) else None,
            interrupted=interrupted if isinstance(interrupted, dict) else None,
        )


def software_versions() -> dict[str, str]:
    """What the run ran on, for its report."""
    import platform

    import gymnasium

    from gym_repost import __version__

    return {
        "gym-repost": __version__,
        "python": platform.python_version(),
        "gymnasium": gymnasium.__version__,
        "platform": platform.platform(terse=True),
    }


def _repair_tail(path: Path) -> None:
    """Cut a partial last line (a kill mid-write) so appends start on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        data = path.read_bytes()
        cut = data.rfind(b"\n") + 1
        fh.truncate(cut)
        logger.warning("%s: dropped a partial last line (%d bytes) left by an interrupted run", path, len(data) - cut)


def _lines(file: Path) -> Iterator[tuple[int, str]]:
    """The numbered lines of a JSONL file of the run, decoded.

    Raises:
        RunDirError: a line is not UTF-8 text (the file was damaged outside gym-repost,
            which writes UTF-8 only), naming the file, the line and the byte.
    """
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise RunDirError(f"{file} cannot be read: {exc.strerror or exc}") from None
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RunDirError(
                f"{file}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                "the file was damaged: fix or delete that line (a deleted episode is run again)"
            ) from None


def _lock_holder(fd: int) -> str:
    """What a lock file says about its holder; waits briefly for one that just took it."""
    for _ in range(50):
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        if text:
            return text
        time.sleep(0.01)
    return "a process that has not said who it is yet"


def _is_open_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (a run that failed to start
    removes the lock file it created, while holding it)."""
    try:
        named, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _take_lock(path: Path) -> int | None:
    """Lock ``path`` for this process and write who holds it; the open descriptor, or None
    when the file was removed before this process locked it (take it again).

    Raises:
        RunDirBusyError: another process holds it.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirBusyError(
                f"{path.parent} is in use: {_lock_holder(fd)} is writing to it "
                f"(see {path}); wait for it to finish or stop it, or choose "
                "another -o directory"
            ) from None
        if not _is_open_file(fd, path):
            os.close(fd)
            return None
        stale = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        if stale:  # its holder died without releasing it (kill -9, power loss)
            logger.warning("%s: taking over the lock of %s, which is no longer running", path.parent, stale)
        since = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {since}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _release_lock(fd: int) -> None:
    os.ftruncate(fd, 0)  # an empty lock file names nobody; the file stays (see writer_lock)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


class RunDir:
    """A run directory; thread-safe appends of finished episodes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._writer_fd: int | None = None
        self._writer_depth = 0
        self._recorded = False

    @contextlib.contextmanager
    def writer_lock(self) -> Iterator[None]:
        """Be the only writer of this directory while the block runs (re-entrant).

        ``RUN_DIR/.lock`` is locked with ``flock`` and names this process. A lock file
        that was there stays (an empty one names nobody); one this writer created is
        removed again, while still held, if the block fails before an episode was recorded
        (with the directory, its missing parents and ``config.json`` when this writer made
        them): a run that failed to start leaves nothing new behind. A process that locked
        a file removed under it sees so and takes the lock again.

        Raises:
            RunDirError: the path is a file, or the directory cannot be created.
            RunDirBusyError: another process (or another RunDir object) holds the lock.
        """
        created: list[Path] = []
        if self._writer_depth == 0:
            created = self._take_writer_lock()
        self._writer_depth += 1
        try:
            yield
        except BaseException:
            if self._writer_depth == 1 and not self._recorded:
                self._remove_created(created)
            raise
        finally:
            self._writer_depth -= 1
            if self._writer_depth == 0 and self._writer_fd is not None:
                _release_lock(self._writer_fd)
                self._writer_fd = None

    def _take_writer_lock(self) -> list[Path]:
        """Lock the directory (created as needed); what this made that was not there."""
        self.check_path()
        missing = [p for p in (self.path, *self.path.parents) if not p.exists()]
        names = set(os.listdir(self.path)) if self.path.is_dir() else set()
        for _ in range(10):  # the file can be removed by a run that failed to start meanwhile
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RunDirError(f"cannot create the run directory {self.path}: {exc.strerror or exc}") from None
            self._writer_fd = _take_lock(self.path / LOCK)
            if self._writer_fd is not None:
                break
        else:
            raise RunDirBusyError(f"{self.path}: its lock file keeps being removed; is another run starting there?")
        self._recorded = False
        new = [self.path / n for n in (LOCK, CONFIG, EPISODES, TRAJECTORIES, SUMMARY) if n not in names]
        return new + missing

    def _remove_created(self, created: list[Path]) -> None:
        """Remove what a run that recorded nothing created (the lock file while held)."""
        for path in created:
            try:
                if path.is_dir():
                    path.rmdir()  # only if empty: never what someone else put there
                else:
                    path.unlink(missing_ok=True)
            except OSError:
                pass

    def check_path(self) -> None:
        """Check the path can be a run directory (it is one, or nothing yet).

        Raises:
            RunDirError: it is a file.
        """
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"{self.path} is a file, not a run directory: give -o a directory (new or a run's)")

    def check(self, config: RunConfig) -> None:
        """Check, writing nothing, that a run of ``config`` can start or continue here: the
        path is a directory or nothing, and a run already there has the same identity
        (:attr:`RunConfig.IDENTITY` and the policy's files) and readable records.

        Raises:
            RunDirError: a file is in the way, the directory holds another run (what
                differs, and ``--overwrite``), or its records are damaged.
        """
        self.check_path()
        existing = self.read_config()
        if existing is not None:
            changes = [
                "the tasks: another set than the run's (the task file, --task or --limit changed)"
                if f == "tasks_digest"
                else f"{f}: {getattr(existing, f)!r} there, {getattr(config, f)!r} now"
                for f in RunConfig.IDENTITY
                if getattr(existing, f) != getattr(config, f)
            ]
            if existing.policy_fingerprint is not None and config.policy_fingerprint is not None:
                changes += existing.policy_fingerprint.file_changes(config.policy_fingerprint)
            if changes:
                raise RunDirError(
                    f"{self.path} holds a different run ({'; '.join(changes)}); pass --overwrite to start it "
                    "afresh, or choose another -o directory"
                )
        self.episodes()

    def prepare(self, config: RunConfig, *, overwrite: bool = False) -> None:
        """Create the directory, or check an existing one belongs to ``config`` (see
        :meth:`check`); with ``overwrite``, first remove the run there (its config,
        records, summary and report; a response cache stays).

        Raises:
            RunDirError: the directory holds a run with different settings, or damaged records.
        """
        if overwrite:
            self.clear()
        self.check(config)
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / CONFIG).write_text(config.model_dump_json(indent=2), encoding="utf-8")
        for name in (EPISODES, TRAJECTORIES):
            _repair_tail(self.path / name)

    def clear(self) -> None:
        """Remove the run's own files (:data:`RESULTS`); others (a response cache) stay."""
        for name in RESULTS:
            path = self.path / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def read_config(self) -> RunConfig | None:
        """The stored configuration, or None for a new directory.

        Raises:
            RunDirError: ``config.json`` is damaged.
        """
        file = self.path / CONFIG
        if not file.exists():
            return None
        try:
            return RunConfig.model_validate_json(file.read_bytes().decode("utf-8"))
        except ValidationError as exc:
            raise RunDirError(f"{file} is damaged: {exc.errors()[0]['msg']}") from None
        except UnicodeDecodeError as exc:
            raise RunDirError(f"{file} is damaged: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except OSError as exc:
            raise RunDirError(f"{file} cannot be read: {exc.strerror or exc}") from None

    def episodes(self) -> list[Episode]:
        """Finished episodes; for a repeated key the last record wins."""
        file = self.path / EPISODES
        if not file.exists():
            return []
        latest: dict[tuple[str, int], Episode] = {}
        for number, line in _lines(file):
            if not line.strip():
                continue
            try:
                ep = Episode.model_validate_json(line)
            except ValidationError:
                logger.warning("%s:%d: skipping an unreadable episode record", file, number)
                continue
            latest[ep.key] = ep
        return list(latest.values())

    def trajectories(self) -> dict[tuple[str, int], Trajectory]:
        """The trajectory of each recorded episode, by key; for a repeated key the last
        line wins; an unreadable line is skipped (and logged)."""
        file = self.path / TRAJECTORIES
        out: dict[tuple[str, int], Trajectory] = {}
        if not file.exists():
            return out
        for number, line in _lines(file):
            try:
                record = json.loads(line)
                out[(str(record["task_id"]), int(record["sample"]))] = Trajectory.from_record(record)
            except (ValueError, KeyError, TypeError, AttributeError):
                if line.strip():
                    logger.warning("%s:%d: skipping an unreadable trajectory record", file, number)
        return out

    def finished(self) -> set[tuple[str, int]]:
        """Keys of episodes that need no rerun (infrastructure errors are rerun)."""
        return {ep.key for ep in self.episodes() if ep.status != "infra_error"}

    def append(self, episode: Episode, trajectory: list[dict[str, Any]]) -> None:
        """Record a finished episode (trajectory first, so an episode line implies both);
        ``trajectory``: a :class:`Trajectory`, or a plain list of steps."""
        if not isinstance(trajectory, Trajectory):
            trajectory = Trajectory(trajectory)
        traj = json.dumps(trajectory.record(episode.task_id, episode.sample), ensure_ascii=False)
        line = episode.model_dump_json()
        with self._lock:
            self._recorded = True
            for name, text in ((TRAJECTORIES, traj), (EPISODES, line)):
                with open(self.path / name, "a", encoding="utf-8") as fh:
                    fh.write(text + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())

    def write_summary(self, summary: dict[str, Any]) -> Path:
        """Write ``summary.json``."""
        out = self.path / SUMMARY
        out.write_text(json.dumps(summary, indent=2), encoding="utf-8")
        return out
