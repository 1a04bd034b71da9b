"""Trust domains in the warm local sandbox: no run reaches what an earlier run held.

A warm worker's PID 1 reads every request and every run's output; its run children are
forked from a zygote that never did (``worker_zygote``), so a run finds nothing of an
earlier run in its memory, on its stack, in System V IPC or in a kernel keyring. Runs of
:meth:`Sandbox.ground_truth` go to workers that never serve another kind of run.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.config import LocalSandboxConfig
from gym_repost.sandbox.local import LocalSandbox

SECRET = "GROUND-TRUTH-SECRET-7f3a9c"
"""What an earlier run sends, reads and prints; the later run never holds it whole: it looks
for its two halves next to each other."""

MEMORY_SCAN = textwrap.dedent(
    """\
    import ctypes
    head, tail = bytes.fromhex(%r), bytes.fromhex(%r)
    hits = 0
    for line in open("/proc/self/maps").read().splitlines():
        parts = line.split()
        if "r" not in parts[1] or (len(parts) > 5 and parts[5][:1] == "/") or (len(parts) > 5 and parts[5][:2] == "[v"):
            continue
        low, high = (int(x, 16) for x in parts[0].split("-"))
        data = ctypes.string_at(low, high - low)
        at = data.find(head)
        while at >= 0:
            hits += data[at + len(head) : at + len(head) + len(tail)] == tail
            at = data.find(head, at + 1)
    print(hits)
    """
) % (SECRET[:12].encode().hex(), SECRET[12:].encode().hex())

FRAME_WALK = textwrap.dedent(
    """\
    import gc, sys
    head, tail = bytes.fromhex(%r).decode(), bytes.fromhex(%r).decode()
    def holds(value, depth=0):
        if isinstance(value, (str, bytes)):
            text = value if isinstance(value, str) else value.decode("latin-1")
            at = text.find(head)
            return at >= 0 and text[at + len(head):].startswith(tail)
        if depth < 6 and isinstance(value, dict):
            return any(holds(k, depth + 1) or holds(v, depth + 1) for k, v in list(value.items()))
        if depth < 6 and isinstance(value, (list, tuple)):
            return any(holds(v, depth + 1) for v in value)
        return False
    frame, found = sys._getframe(), []
    while frame is not None:
        found += [frame.f_code.co_name for value in list(frame.f_locals.values()) if holds(value)]
        frame = frame.f_back
    found += ["gc" for obj in gc.get_objects() if isinstance(obj, (dict, list, tuple)) and holds(obj)]
    print(len(found), found[:5])
    """
) % (SECRET[:12].encode().hex(), SECRET[12:].encode().hex())


def _earlier_run(sandbox: Sandbox) -> None:
    """A run whose request (a file, stdin) and output hold the secret."""
    result = sandbox.run(
        {"secret.txt": SECRET, "main.py": "import sys\nprint(open('secret.txt').read(), sys.stdin.read())\n"},
        ["python3", "main.py"],
        stdin=SECRET,
    )
    assert result.ok and result.stdout.count(SECRET) == 2, result.stderr


@pytest.mark.parametrize("probe", ["memory", "frames"])
def test_a_run_finds_nothing_of_an_earlier_run(warm_sandbox: LocalSandbox, probe: str) -> None:
    sandbox = LocalSandbox(warm_sandbox.config.model_copy(update={"workers": 1}))  # one worker: the same PID 1
    with sandbox:
        for _ in range(2):
            _earlier_run(sandbox)
            for _ in range(2):  # right after, and once the spare child waited for its job
                source = MEMORY_SCAN if probe == "memory" else FRAME_WALK
                result = sandbox.run({"probe.py": source}, ["python3", "probe.py"])
                assert result.ok, result.stderr
                assert result.stdout.split()[0] == "0", result.stdout


def test_the_memory_probe_finds_what_its_own_process_holds(warm_sandbox: LocalSandbox) -> None:
    """The probe works: the secret built in the probe's own process is found."""
    source = f"kept = {SECRET[:12]!r} + {SECRET[12:]!r}\n" + MEMORY_SCAN
    result = warm_sandbox.run({"probe.py": source}, ["python3", "probe.py"])
    assert result.ok and int(result.stdout) >= 1, result.stdout + result.stderr


SYSV_AND_KEYRING = textwrap.dedent(
    """\
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    if sys.argv[1] == "leave":
        shm = libc.shmget(0x6772, 4096, 0o1666)
        queue = libc.msgget(0x6772, 0o1666)
        key = libc.syscall(248, b"user", b"gym-repost-probe", b"left", 4, ctypes.c_int(-4))  # add_key, x86-64
        print(shm >= 0, queue >= 0, key, ctypes.get_errno())
    else:
        print(libc.shmget(0x6772, 0, 0), libc.msgget(0x6772, 0))
    """
)


def test_system_v_ipc_and_keyrings_do_not_outlive_a_run(warm_sandbox: LocalSandbox) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("the probe calls add_key by its x86-64 number")
    left = warm_sandbox.run({"p.py": SYSV_AND_KEYRING}, ["python3", "p.py", "leave"])
    shm, queue, key, errno = left.stdout.split()
    assert (shm, queue) == ("True", "True"), left.stdout  # a run may use them...
    assert (key, errno) == ("-1", "1"), left.stdout  # ... but not the kernel's keyrings (EPERM)
    for _ in range(3):  # ... and the next runs, whichever worker serves them, find nothing
        found = warm_sandbox.run({"p.py": SYSV_AND_KEYRING}, ["python3", "p.py", "find"])
        assert found.stdout.split() == ["-1", "-1"], found.stdout


IDENTITY = "import os\nprint(os.getuid(), open('/proc/1/stat').read().split()[21])\n"


def test_ground_truth_runs_have_workers_of_their_own(warm_sandbox: LocalSandbox) -> None:
    """Candidate runs and ground-truth runs never share a worker (nor its uid)."""
    truth = warm_sandbox.ground_truth()
    candidates = {warm_sandbox.run({"i.py": IDENTITY}, ["python3", "i.py"]).stdout for _ in range(4)}
    truths = {truth.run({"i.py": IDENTITY}, ["python3", "i.py"]).stdout for _ in range(4)}
    assert candidates and truths and not candidates & truths
    uids = {line.split()[0] for line in candidates | truths}
    if os.geteuid() == 0:
        assert len(uids) == len(candidates | truths)  # a uid per worker
    # a ground-truth view keeps its domain through the other views
    ahead = truth.clock_ahead(60.0)
    assert ahead is not None and ahead.run({"i.py": IDENTITY}, ["python3", "i.py"]).stdout in truths
    assert truth.for_imports(["json"]).run({"i.py": IDENTITY}, ["python3", "i.py"]).stdout in truths


def _zygote_of(sandbox: LocalSandbox) -> int:
    """Host pid of the zygote of the sandbox's only worker, idle: the only child of its PID 1
    (a spare run child is the zygote's)."""
    (outer,) = sandbox.worker_pids()
    (pid1,) = _children(outer)
    (zygote,) = _children(pid1)
    return zygote


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(name))
    return found


def test_a_worker_whose_zygote_is_gone_execs_its_runs_and_is_replaced(work_root: Path) -> None:
    config = LocalSandboxConfig(workers=1, work_root=str(work_root), packages_dir=str(work_root / "packages"))
    with LocalSandbox(config) as sandbox:
        assert sandbox.run({"m.py": "print(1)"}, ["python3", "m.py"]).stdout == "1\n"
        (worker,) = sandbox.worker_pids()
        zygote = _zygote_of(sandbox)
        # what a run in a user namespace could do; stopped first, so that no spare it is
        # forking at this moment escapes the list of its children
        os.kill(zygote, signal.SIGSTOP)
        while Path(f"/proc/{zygote}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
            time.sleep(0.001)
        for pid in [*_children(zygote), zygote]:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        source = "import sys\nprint('ok', 'gym_repost' in sys.modules)\n"
        result = sandbox.run({"m.py": source}, ["python3", "m.py"])
        assert result.stdout == "ok False\n", result.stderr
        assert result.extra["inprocess"] is False  # a fresh interpreter, not a fork of PID 1
        assert sandbox.worker_pids() != [worker]  # the host replaced the worker
        again = sandbox.run({"m.py": "print(2)"}, ["python3", "m.py"])
        assert again.stdout == "2\n" and again.extra["inprocess"] is True
        assert _zygote_of(sandbox) != zygote


def test_a_run_cannot_signal_the_zygote(warm_sandbox: LocalSandbox) -> None:
    if os.geteuid() != 0:
        pytest.skip("in a user namespace a run can kill the zygote (see the test above)")
    probe = textwrap.dedent(
        """\
        import os
        def parent(pid):
            return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        zygote = parent(os.getpid())
        try:
            os.kill(zygote, 9)
            print("killed", zygote)
        except PermissionError:
            print("denied", zygote)
        """
    )
    for _ in range(2):
        result = warm_sandbox.run({"p.py": probe}, ["python3", "p.py"])
        assert result.stdout.split()[0] == "denied" and result.stdout.split()[1] != "1", result.stdout
        assert result.extra["inprocess"] is True  # and the worker keeps forking runs from it
