"""Run directories: the episode records, the run's configuration, resuming after a kill.

Layout of ``RUN_DIR``: ``config.json`` (what the run is), ``episodes.jsonl`` (one line
per finished episode, appended, flushed and synced), ``trajectories.jsonl`` (each
episode's transcript: the task prompt, then per step what the policy said and did and what
the environment answered; :mod:`gym_repost.evaluate.transcript` gives the format),
``summary.json``, ``report/`` (the viewer,
:mod:`gym_repost.evaluate.viewer`; ``report.html`` leads there) and
``.lock``: one writer per run directory, held with ``flock`` (released by the kernel when
its holder dies, however it dies) and naming its holder ("pid N on HOST since TIME").
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gym_repost.errors import RunDirBusyError, RunDirError
from gym_repost.sandbox.config import DockerSandboxConfig, LocalSandboxConfig, SandboxConfig

logger = logging.getLogger(__name__)

EPISODES = "episodes.jsonl"
TRAJECTORIES = "trajectories.jsonl"
CONFIG = "config.json"
SUMMARY = "summary.json"
LOCK = ".lock"


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


def _lock_holder(fd: int) -> str:
    """What a lock file says about its holder; waits briefly for one that just took it."""
    for _ in range(50):
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        if text:
            return text
        time.sleep(0.01)
    return "a process that has not said who it is yet"


def _take_lock(path: Path) -> int:
    """Lock ``path`` for this process and write who holds it; the open descriptor.

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

    @contextlib.contextmanager
    def writer_lock(self) -> Iterator[None]:
        """Be the only writer of this directory while the block runs (re-entrant).

        ``RUN_DIR/.lock`` is locked with ``flock`` and names this process. The file is
        never deleted: a process that opened it before a deletion would lock a file nobody
        else sees.

        Raises:
            RunDirBusyError: another process (or another RunDir object) holds the lock.
        """
        if self._writer_depth == 0:
            self.path.mkdir(parents=True, exist_ok=True)
            self._writer_fd = _take_lock(self.path / LOCK)
        self._writer_depth += 1
        try:
            yield
        finally:
            self._writer_depth -= 1
            if self._writer_depth == 0 and self._writer_fd is not None:
                _release_lock(self._writer_fd)
                self._writer_fd = None

    def prepare(self, config: RunConfig) -> None:
        """Create the directory, or check an existing one belongs to ``config``.

        Raises:
            RunDirError: the directory holds a run with different settings.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        existing = self.read_config()
        if existing is not None:
            diff = [f for f in RunConfig.IDENTITY if getattr(existing, f) != getattr(config, f)]
            if diff:
                details = "; ".join(f"{f}: {getattr(existing, f)!r} there, {getattr(config, f)!r} now" for f in diff)
                raise RunDirError(
                    f"{self.path} holds a different run ({details}); choose another -o directory to start a new run"
                )
        (self.path / CONFIG).write_text(config.model_dump_json(indent=2), encoding="utf-8")
        for name in (EPISODES, TRAJECTORIES):
            _repair_tail(self.path / name)

    def read_config(self) -> RunConfig | None:
        """The stored configuration, or None for a new directory.

        Raises:
            RunDirError: ``config.json`` is damaged.
        """
        file = self.path / CONFIG
        if not file.exists():
            return None
        try:
            return RunConfig.model_validate_json(file.read_text(encoding="utf-8"))
        except ValidationError as exc:
            raise RunDirError(f"{file} is damaged: {exc.errors()[0]['msg']}") from None

    def episodes(self) -> list[Episode]:
        """Finished episodes; for a repeated key the last record wins."""
        file = self.path / EPISODES
        if not file.exists():
            return []
        latest: dict[tuple[str, int], Episode] = {}
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
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
        with open(file, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
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
