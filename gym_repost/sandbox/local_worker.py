"""The local backend's handle on one worker process, host side: spawning it, the request
and reply over its pipes, readiness, stopping it; requests built and replies read."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import py_compile
import queue
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from gym_repost.errors import SandboxError, SandboxUnavailableError
from gym_repost.sandbox import cgroups
from gym_repost.sandbox import worker_io as protocol
from gym_repost.sandbox.base import MAX_TIMEOUT, RunResult, check_relative_path
from gym_repost.sandbox.identity import UidPool
from gym_repost.sandbox.programs import program_file, program_source
from gym_repost.sandbox.worker_run import WORKER_MODULES

logger = logging.getLogger(__name__)

WORKER_DIR = os.path.dirname(os.path.abspath(__file__))
PROGRAMS_DIR = os.path.join(os.path.dirname(WORKER_DIR), "programs")
DIR_PREFIX = "gym-repost-sbx-"
"""Name prefix of worker directories: ``gym-repost-sbx-<host pid>-<host start>-<token>``."""
_UID_RANGE = (200_000, 999_999)


ADDR_NO_RANDOMIZE = 0x0040000
"""The personality flag that turns address-space randomization off for the programs a task
executes (``setarch -R``)."""


def fixed_addresses() -> bool:
    """Turn address-space randomization off for the programs this *thread* starts (a
    personality is a task's: the host's other threads, and the host itself, keep theirs).

    An object's default hash is its address, and in Python 3.11 so is ``None``'s: a set of
    tuples holding ``None`` (one repository's parametrized test cases) iterated in another
    order every run, so its tests ran in another order and the tracer recorded other calls.
    With fixed addresses the same run gives the same addresses. It weakens nothing the
    sandbox relies on: code in it runs Python (and ``ctypes``) in its own process anyway;
    the boundary is the namespaces, seccomp, limits and the protocol. False when the
    kernel refuses (a container's seccomp profile): runs then keep random addresses.
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        current = libc.personality(0xFFFFFFFF)
        return current >= 0 and libc.personality(current | ADDR_NO_RANDOMIZE) >= 0
    except (OSError, AttributeError):
        return False


class Spawner:
    """Starts worker processes from one long-lived daemon thread, with fixed addresses
    (:func:`fixed_addresses`).

    PR_SET_PDEATHSIG fires when the *thread* that forked a process exits, so workers
    forked from a short-lived runner thread would die with it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[tuple[list[str], dict[str, Any], Future[Any]]]
        self._requests = queue.SimpleQueue()
        self._owner = -1

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._owner != os.getpid():  # first use, or a forked copy of the host
                self._requests = queue.SimpleQueue()
                threading.Thread(
                    target=self._serve, args=(self._requests,), daemon=True, name="gym-repost-sandbox-spawner"
                ).start()
                self._owner = os.getpid()
            requests = self._requests
        future: Future[subprocess.Popen[bytes]] = Future()
        requests.put((argv, kwargs, future))
        return future.result()

    @staticmethod
    def _serve(requests: queue.SimpleQueue[tuple[list[str], dict[str, Any], Future[Any]]]) -> None:
        if not fixed_addresses():
            logger.info("address-space randomization stays on in sandbox workers: the kernel refused to turn it off")
        while True:
            argv, kwargs, future = requests.get()
            try:
                future.set_result(subprocess.Popen(argv, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)


UIDS = UidPool(_UID_RANGE)
SPAWNER = Spawner()


# ---------------------------------------------------------------- one worker, host side


POLL_SLICE = 3600.0
"""The longest one wait of :func:`_poll_wait` (seconds): ``poll`` takes at most about 24 days
in milliseconds, and a reply's deadline may be further (ten times a run's timeout)."""


def _poll_wait(fd: int, events: int, deadline: float) -> None:
    poller = select.poll()
    poller.register(fd, events)
    while not poller.poll(min(max(0.0, deadline - time.monotonic()), POLL_SLICE) * 1000):
        if time.monotonic() >= deadline:
            raise TimeoutError


class WorkerHandle:
    """A worker process as the host sees it: pipes, private directory, user."""

    def __init__(
        self, proc: subprocess.Popen[bytes], host_dir: str, uid: int | None, generation: int, cgroup: str | None = None
    ) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.host_dir = host_dir
        self.cgroup = cgroup
        self.uid = uid
        self.generation = generation
        self.info: dict[str, Any] = {}
        self.programs: dict[str, str] = {}
        """The programs this worker holds, the same as the host's: run-directory name -> text."""
        self._req_fd = proc.stdin.fileno()
        self._resp_fd = proc.stdout.fileno()
        self._pid1_fd: int | None = None
        self._stop_lock = threading.Lock()
        self.stopped = False
        os.set_blocking(self._req_fd, False)

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Wait for the worker's hello; raises SandboxUnavailableError if it failed."""
        if self.info:
            return self.info
        try:
            message = self._receive(time.monotonic() + timeout)
        except (EOFError, TimeoutError, OSError) as exc:
            raise SandboxUnavailableError(
                f"the sandbox worker failed to start ({self._failure(exc)}); its stderr says why"
            ) from None
        if not message.get("ready"):
            raise SandboxUnavailableError(str(message.get("error")))
        for warning in message.get("warnings", []):
            logger.warning("sandbox worker %d: %s", self.proc.pid, warning)
        preloaded = message.get("preload") or {}
        for name, why in (preloaded.get("failed") or {}).items():
            logger.warning("sandbox preload: cannot import %s (%s); runs import it themselves", name, why)
        for name, why in (preloaded.get("unfit") or {}).items():
            logger.warning("sandbox preload: %s %s; workers start without it", name, why)
        try:
            self._pid1_fd = os.pidfd_open(int(message["pid1"]))
        except (AttributeError, OSError):
            self._pid1_fd = None
        self.info = message
        self.programs = _held_programs(message.get("programs"))
        return message

    def leave_out_programs(self, request: dict[str, Any]) -> dict[str, Any]:
        """``request`` without the text of the programs this worker holds (it writes them itself)."""
        files = request["files"]
        held = [name for name, text in self.programs.items() if files.get(name) == text]
        if not held:
            return request
        return {**request, "files": {k: v for k, v in files.items() if k not in held}, "programs": held}

    def call(self, request: bytes, deadline: float) -> dict[str, Any]:
        """Send one framed request and wait for the reply until ``deadline``."""
        try:
            self._send(request, deadline)
            sent = time.monotonic()
            reply = self._receive(deadline)
            reply["_sent"] = sent
            return reply
        except (EOFError, TimeoutError, OSError, ValueError) as exc:
            raise SandboxError(f"sandbox worker {self.proc.pid} failed: {self._failure(exc)}") from None

    def _send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._req_fd, view) :]
            except BlockingIOError:
                _poll_wait(self._req_fd, select.POLLOUT, deadline)

    def _receive(self, deadline: float) -> dict[str, Any]:
        header = self._read_exact(protocol.HEADER.size, deadline)
        body = self._read_exact(protocol.HEADER.unpack(header)[0], deadline)
        received = time.monotonic()
        message: dict[str, Any] = json.loads(body)
        message["_received"] = received
        return message

    def _read_exact(self, size: int, deadline: float) -> bytearray:
        buffer = bytearray(size)
        view, done = memoryview(buffer), 0
        while done < size:
            _poll_wait(self._resp_fd, select.POLLIN, deadline)
            count = os.readv(self._resp_fd, [view[done:]])
            if count == 0:
                raise EOFError
            done += count
        return buffer

    def _failure(self, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return "it did not answer in time; killed"
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        what = "it died" if code is not None else "its pipe broke"
        return f"{what} (exit status {code}): {type(exc).__name__} {exc}".rstrip()

    def stop(self, graceful: bool = False) -> None:
        """Kill the worker and its namespace, then remove its directory. Idempotent; a
        second caller returns once the first has finished."""
        with self._stop_lock:
            if self.stopped:
                return
            self.stopped = True
            self._stop(graceful)

    def _stop(self, graceful: bool) -> None:
        exited = False
        if graceful:  # the worker cleans up and exits by itself
            with contextlib.suppress(OSError):
                os.write(self._req_fd, protocol.encode_message({"op": "exit"}))
            self._close_pipe(self.proc.stdin)
            try:
                self.proc.wait(timeout=2.0)
                exited = True
            except subprocess.TimeoutExpired:
                pass
        if not exited:
            signal_group(self.proc.pid)
            self.proc.wait()
        self._wait_namespace_gone()
        self._close_pipe(self.proc.stdin)
        self._close_pipe(self.proc.stdout)
        shutil.rmtree(self.host_dir, ignore_errors=True)
        if self.cgroup is not None:
            cgroups.remove(self.cgroup)
        UIDS.release(self.uid)

    def _wait_namespace_gone(self) -> None:
        # PID 1 exits only after the kernel has killed and reaped its whole namespace.
        if self._pid1_fd is None:
            return
        try:
            select.select([self._pid1_fd], [], [], 5.0)
        finally:
            os.close(self._pid1_fd)
            self._pid1_fd = None

    @staticmethod
    def _close_pipe(pipe: Any) -> None:
        try:
            pipe.close()
        except OSError:
            pass


def _held_programs(digests: object) -> dict[str, str]:
    """The host's programs whose text a worker holds too (it listed their SHA-256)."""
    if not isinstance(digests, dict):
        return {}
    held = {}
    for path in program_paths():
        name = os.path.basename(path)[:-3]
        text = program_source(name)
        if digests.get(program_file(name)) == hashlib.sha256(text.encode("utf-8")).hexdigest():
            held[program_file(name)] = text
    return held


def signal_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


# ---------------------------------------------------------------- requests and results


def build_request(
    files: Mapping[str, str | bytes],
    command: Sequence[str],
    timeout: float,
    stdin: str | None,
    env: Mapping[str, str] | None,
    limits: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Validate a run's arguments and turn them into a worker request; ``limits``: the
    run's own in place of the worker's (see :func:`~gym_repost.sandbox.base.limit_overrides`)."""
    if isinstance(command, (str, bytes)) or not command:
        raise ValueError("command must be a non-empty argv list, e.g. ['python3', 'main.py']")
    if not 0 < timeout <= MAX_TIMEOUT:
        raise ValueError(f"timeout must be in (0, {MAX_TIMEOUT}] seconds, got {timeout!r}")
    text: dict[str, str] = {}
    binary: dict[str, str] = {}
    for path, content in files.items():
        name = check_relative_path(path)
        if isinstance(content, bytes):
            binary[name] = base64.b64encode(content).decode("ascii")
        elif isinstance(content, str):
            text[name] = content
        else:
            raise TypeError(f"file {path!r}: content must be str or bytes")
    clean_env = {str(k): str(v) for k, v in (env or {}).items()}
    if any(not k or "=" in k or "\0" in k + v for k, v in clean_env.items()):
        raise ValueError("env names must be non-empty, without '=' or NUL")
    return {
        "op": "run",
        "argv": [os.fspath(a) for a in command],
        "files": text,
        "bfiles": binary,
        "stdin": stdin,
        "env": clean_env,
        "timeout": float(timeout),
        **({"limits": dict(limits)} if limits else {}),
    }


def to_result(reply: dict[str, Any]) -> RunResult:
    if not reply.get("ok"):
        raise SandboxError(f"the sandbox could not run the command: {reply.get('error')}")
    return RunResult(
        returncode=int(reply["returncode"]),
        stdout=reply["stdout"],
        stderr=reply["stderr"],
        timed_out=bool(reply["timed_out"]),
        duration=float(reply["duration"]),
        output_truncated=bool(reply["output_truncated"]),
        killed_for=reply["killed_for"],
        extra={"inprocess": bool(reply.get("inprocess"))},
    )


def program_paths() -> list[str]:
    """The host's programs (``gym_repost/programs``), which warm workers keep compiled."""
    return sorted(
        os.path.join(PROGRAMS_DIR, name)
        for name in os.listdir(PROGRAMS_DIR)
        if name.endswith(".py") and name != "__init__.py"
    )


def ensure_worker_bytecode() -> None:
    """Compile the worker's modules and the programs once, so that every worker starts from
    bytecode.

    Workers run with PYTHONDONTWRITEBYTECODE (like the runs), so they never write it.
    """
    worker_files = [f"{name}.py" for name in WORKER_MODULES]
    for source in [os.path.join(WORKER_DIR, n) for n in worker_files] + program_paths():
        cached = importlib.util.cache_from_source(source)
        try:
            if not os.path.exists(cached) or os.stat(cached).st_mtime < os.stat(source).st_mtime:
                py_compile.compile(source, cfile=cached, doraise=True)
        except (OSError, py_compile.PyCompileError) as exc:  # a read-only install: no matter
            logger.debug("cannot cache the bytecode of %s: %s", source, exc)


def check_platform() -> None:
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailableError(
            f"the local sandbox needs Linux (namespaces, /proc, prctl); this is "
            f"{sys.platform}. Use the docker backend: get_sandbox('docker')."
        )
