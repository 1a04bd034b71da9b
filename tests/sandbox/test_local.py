"""The local sandbox backend with real worker processes (no mocks)."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gym_repost.errors import SandboxError, SandboxUnavailableError
from gym_repost.sandbox import get_sandbox, isolation, local
from gym_repost.sandbox.base import MAX_TIMEOUT, Sandbox
from gym_repost.sandbox.config import LocalSandboxConfig
from gym_repost.sandbox.identity import host_identity, start_time
from gym_repost.sandbox.leftovers import cleanup_leftovers
from gym_repost.sandbox.local import LocalSandbox
from gym_repost.sandbox.local_worker import DIR_PREFIX, WorkerHandle, build_request
from gym_repost.sandbox.programs import run_program
from gym_repost.sandbox.worker import MARKER
from gym_repost.sandbox.worker_io import Capture, plan_command


def marked_processes(work_root: Path) -> list[int]:
    """Live worker processes (argv marker) of this test process's sandboxes in work_root."""
    needles = (MARKER.encode(), f"--host={os.getpid()}:".encode(), str(work_root).encode())
    return [pid for pid in _all_pids() if all(n in _cmdline(pid) for n in needles) and not _zombie(pid)]


def worker_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(DIR_PREFIX))


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True


# ---------------------------------------------------------------- python semantics

PRINT_SEED = "import os; print(os.environ['PYTHONHASHSEED'])"
PRINT_CWD = "import os; print(os.getcwd())"

SEMANTICS = {
    "traceback": ({"main.py": "def f():\n    raise KeyError('k')\nf()\n"}, ["main.py"]),
    "syntax_error": ({"main.py": "def f(:\n    pass\n"}, ["main.py"]),
    "exit_message": ({"main.py": "import sys\nsys.exit('bye')"}, ["main.py"]),
    "exit_300": ({"main.py": "import sys\nsys.exit(300)"}, ["main.py"]),
    "atexit_and_threads": (
        {
            "main.py": textwrap.dedent("""\
        import atexit, threading, time
        atexit.register(lambda: print('atexit ran'))
        def work():
            time.sleep(0.05)
            print('thread done', flush=True)
        threading.Thread(target=work).start()
        print('main done')""")
        },
        ["main.py"],
    ),
    "keyboard_interrupt": ({"main.py": "raise KeyboardInterrupt"}, ["main.py"]),
    "dash_c": ({}, ["-c", "import sys; print(sys.argv, repr(sys.path[0])); 1/0", "x"]),
    "dash_m": ({"mod.py": "import sys\nprint(__name__, sys.argv[1:])\n"}, ["-m", "mod", "a"]),
    "dash_m_missing": ({}, ["-m", "no_such_module"]),
    "missing_script": ({}, ["nope.py"]),
    "main_module": (
        {
            "main.py": textwrap.dedent("""\
        import pickle, sys, __main__
        class A: pass
        print(__name__, __package__, __spec__, sys.argv, __main__.__file__ == __file__)
        print(type(pickle.loads(pickle.dumps(A()))).__name__)""")
        },
        ["main.py", "arg"],
    ),
    "recursion_depth": ({"main.py": "def f(): f()\nf()"}, ["main.py"]),
    # os._exit tells PID 1 the status before the teardown: the same status, and what was
    # not flushed is lost; a forked child's os._exit is its own business.
    "os_exit": (
        {"main.py": "import os, sys\nprint('kept', flush=True)\nsys.stdout.write('lost')\nos._exit(7)"},
        ["main.py"],
    ),
    "os_exit_in_a_fork": (
        {
            "main.py": textwrap.dedent("""\
        import os
        pid = os.fork()
        if pid == 0:
            os._exit(3)
        print('child said', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
        os._exit(0)""")
        },
        ["main.py"],
    ),
}


def _run_real_python(files: dict[str, str], args: list[str], directory: Path) -> tuple[int, str, str]:
    for name, content in files.items():
        (directory / name).write_text(content)
    env = {
        "PATH": os.environ["PATH"],
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": str(directory),
        "TMPDIR": str(directory),
    }
    done = subprocess.run(
        [sys.executable, *args], cwd=directory, env=env, text=True, capture_output=True, timeout=60, check=False
    )
    here = str(directory)
    return done.returncode, done.stdout.replace(here, "<DIR>"), done.stderr.replace(here, "<DIR>")


@pytest.mark.parametrize("case", sorted(SEMANTICS))
def test_warm_python_behaves_like_a_fresh_interpreter(warm_sandbox: LocalSandbox, case: str, tmp_path: Path) -> None:
    files, args = SEMANTICS[case]
    result = warm_sandbox.run(files, ["python3", *args], timeout=30)
    run_dir = re.compile(r"/sandbox/run-\d+")
    mine = (result.returncode, run_dir.sub("<DIR>", result.stdout), run_dir.sub("<DIR>", result.stderr))
    assert result.extra["inprocess"] is True
    assert mine == _run_real_python(files, args, tmp_path)


def test_non_python_commands_are_executed(warm_sandbox: LocalSandbox) -> None:
    result = warm_sandbox.run({"run.sh": '#!/bin/sh\necho "$1-$HOME"\n'}, ["./run.sh", "x"], timeout=10)
    assert result.ok and re.fullmatch(r"x-/sandbox/run-\d+\n", result.stdout)
    assert result.extra["inprocess"] is False
    missing = warm_sandbox.run({}, ["no-such-program"], timeout=10)
    assert missing.returncode == 127 and "no-such-program" in missing.stderr


def test_interpreter_options_fall_back_to_exec(warm_sandbox: LocalSandbox) -> None:
    result = warm_sandbox.run({}, ["python3", "-I", "-c", "import sys; print(sys.flags.isolated)"])
    assert result.stdout == "1\n" and result.extra["inprocess"] is False
    seeded = warm_sandbox.run({}, ["python", "-c", PRINT_SEED], env={"PYTHONHASHSEED": "7"})
    assert seeded.stdout == "7\n" and seeded.extra["inprocess"] is False


ADDRESSES = "print(id(None), [x for x in {(None, 1), (2, 3), (None, 5), ('a', None)}])"


def test_runs_see_the_same_addresses_in_every_sandbox(work_root: Path) -> None:
    """Python 3.11 hashes None (and any object without __hash__) by its address: with
    random addresses a set of test cases holding None iterates in another order every
    run, and a build traces other calls. Workers start with randomization off."""
    seen = []
    for name in ("first", "second"):
        root = work_root / name
        root.mkdir()
        config = LocalSandboxConfig(workers=1, work_root=str(root), packages_dir=str(root / "packages"))
        with LocalSandbox(config) as sandbox:
            runs = [sandbox.run({}, ["python3", "-c", ADDRESSES], timeout=30) for _ in range(2)]
        assert all(r.ok for r in runs), runs[0].stderr
        seen += [r.stdout for r in runs]
    assert len(set(seen)) == 1, seen
    host = subprocess.run([sys.executable, "-c", ADDRESSES], capture_output=True, text=True, check=True)
    again = subprocess.run([sys.executable, "-c", ADDRESSES], capture_output=True, text=True, check=True)
    assert host.stdout != again.stdout, "the host's own programs keep random addresses"


def test_runs_do_not_see_the_worker_modules(warm_sandbox: LocalSandbox) -> None:
    probe = textwrap.dedent("""\
        import importlib.util, sys
        print([m for m in ("isolation", "worker") if importlib.util.find_spec(m)])
        print([p for p in sys.path if p.endswith("sandbox")], "isolation" in sys.modules)""")
    result = warm_sandbox.run({}, ["python3", "-c", probe])
    assert result.stdout == "[]\n[] False\n", result.stderr


def test_another_interpreter_runs_the_worker_and_the_commands(work_root: Path) -> None:
    others = [
        p
        for p in ("/usr/bin/python3", "/usr/local/bin/python3")
        if os.path.exists(p) and os.path.realpath(p) != os.path.realpath(sys.executable)
    ]
    if not others:
        pytest.skip("no second Python interpreter on this machine")
    probe = "import sys\nprint(sys.executable)\nimport gym_repost"
    for warm in (True, False):
        config = LocalSandboxConfig(python=others[0], warm=warm, work_root=str(work_root))
        sandbox = LocalSandbox(config)
        with sandbox:
            result = sandbox.run({"main.py": probe}, ["python3", "main.py"])
        assert result.stdout == f"{others[0]}\n"
        assert "No module named 'gym_repost'" in result.stderr


def test_caller_pythonpath_comes_before_the_package_cache(warm_sandbox: LocalSandbox) -> None:
    source = "import sys, os\nprint(sys.path[1], os.environ['PYTHONPATH'])"
    result = warm_sandbox.run({"main.py": source, "lib/x.py": ""}, ["python3", "main.py"], env={"PYTHONPATH": "lib"})
    first, pythonpath = result.stdout.split()
    assert first.endswith("/lib")
    assert pythonpath == f"lib:{warm_sandbox.packages_dir}"


def test_undecodable_output_is_replaced(warm_sandbox: LocalSandbox) -> None:
    result = warm_sandbox.run({}, ["python3", "-c", "import os; os.write(1, b'a\\xffb')"])
    assert result.stdout == "a\ufffdb"


# ---------------------------------------------------------------- isolation details


def test_scratch_space_is_private_and_emptied_between_runs(warm_sandbox: LocalSandbox) -> None:
    name = f"gym-repost-test-{os.getpid()}"
    writer = f"open('/tmp/{name}', 'w').write('x')\nopen('/dev/shm/{name}', 'w').write('x')"
    first = warm_sandbox.run({}, ["python3", "-c", writer])
    assert first.ok, first.stderr
    assert not os.path.exists(f"/tmp/{name}") and not os.path.exists(f"/dev/shm/{name}")
    reader = textwrap.dedent(f"""\
        import os, sys
        for path in ('/tmp/{name}', '/dev/shm/{name}'):
            print(path, os.path.exists(path))""")
    for _ in range(2):  # both workers of the pool
        second = warm_sandbox.run({"main.py": reader}, ["python3", "main.py"])
        assert second.ok and " True" not in second.stdout, second.stdout


def test_runs_are_unprivileged_and_cannot_remount(warm_sandbox: LocalSandbox) -> None:
    probe = textwrap.dedent("""\
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print(os.getuid(), os.getgid(), os.getgroups(), os.getpid() != 1)
        print(libc.mount(None, b"/", None, 0x20 | 0x1000, None), ctypes.get_errno())
        print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])
        print(len([p for p in os.listdir('/proc') if p.isdigit()]))""")
    result = warm_sandbox.run({}, ["python3", "-c", probe])
    ids, remount, caps, processes = result.stdout.splitlines()
    uid, gid, groups, not_init = ids.split(" ", 3)
    assert int(uid) >= 200_000 and uid == gid and groups == "[]" and not_init == "True"
    assert remount == "-1 1"  # EPERM
    assert int(caps, 16) == 0
    assert int(processes) == 3  # PID 1, the zygote and the run itself: a private PID namespace


def test_previous_run_directory_is_out_of_reach(warm_sandbox: LocalSandbox) -> None:
    first = warm_sandbox.run({"secret.txt": "s"}, ["python3", "-c", PRINT_CWD])
    old = first.stdout.strip()
    for _ in range(2):
        probe = f"import os\ntry:\n    print(os.listdir({old!r}))\nexcept OSError:\n    print('refused')"
        result = warm_sandbox.run({}, ["python3", "-c", probe])
        assert result.stdout in ("refused\n", "[]\n"), result.stdout


# ---------------------------------------------------------------- the pool


def test_concurrent_runs_on_a_two_worker_pool(warm_sandbox: LocalSandbox) -> None:
    source = "import sys\nprint(sys.argv[1], sys.stdin.read(), sum(range(int(sys.argv[2]))))"
    failures: list[str] = []

    def client(thread: int) -> None:
        for i in range(20):
            token = f"t{thread}-r{i}"
            result = warm_sandbox.run(
                {"main.py": source}, ["python3", "main.py", token, str(i)], timeout=20, stdin=token.upper()
            )
            expected = f"{token} {token.upper()} {sum(range(i))}\n"
            if result.stdout != expected or result.returncode != 0:
                failures.append(f"{token}: {result}")

    threads = [threading.Thread(target=client, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_killed_worker_is_an_infrastructure_error_and_is_replaced(work_root: Path) -> None:
    sandbox = LocalSandbox(LocalSandboxConfig(work_root=str(work_root)))
    with sandbox:
        (victim,) = sandbox.worker_pids()
        threading.Timer(0.5, os.kill, (victim, signal.SIGKILL)).start()
        started = time.monotonic()
        with pytest.raises(SandboxError, match="failed"):
            sandbox.run({}, ["python3", "-c", "import time; time.sleep(30)"], timeout=60)
        assert time.monotonic() - started < 10
        result = sandbox.run({}, ["python3", "-c", "print('recovered')"])
        assert result.stdout == "recovered\n"
        assert sandbox.worker_pids() != [victim]


def test_a_hung_worker_times_out_on_the_host(work_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "REPLY_GRACE", 1.0)
    sandbox = LocalSandbox(LocalSandboxConfig(work_root=str(work_root)))
    with sandbox:
        (victim,) = sandbox.worker_pids()
        threading.Timer(0.2, os.killpg, (victim, signal.SIGSTOP)).start()
        with pytest.raises(SandboxError, match="did not answer"):
            sandbox.run({}, ["python3", "-c", "import time; time.sleep(0.5)"], timeout=0.5)
        assert sandbox.run({}, ["python3", "-c", "print(1)"]).stdout == "1\n"
    assert marked_processes(work_root) == []


def test_a_run_may_have_the_longest_timeout_though_poll_cannot_wait_that_long_at_once(
    warm_sandbox: LocalSandbox,
) -> None:
    # the host waits for the reply up to ten times the timeout: beyond poll's 24 days
    result = warm_sandbox.run({}, ["python3", "-c", "print(1)"], timeout=MAX_TIMEOUT)
    assert result.stdout == "1\n"
    assert run_program(warm_sandbox, "protocol", {}, {}, timeout=100 * MAX_TIMEOUT).result.returncode == 0


def test_a_run_that_fails_on_the_host_for_any_reason_gives_its_worker_s_slot_back(
    work_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = LocalSandbox(LocalSandboxConfig(workers=1, work_root=str(work_root)))
    with sandbox:
        (first,) = sandbox.worker_pids()
        calls = {"n": 0}
        real = WorkerHandle.call

        def bug_once(self: WorkerHandle, request: bytes, deadline: float) -> dict[str, object]:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("a bug on the host, not a sandbox failure")
            return real(self, request, deadline)

        monkeypatch.setattr(WorkerHandle, "call", bug_once)
        with pytest.raises(RuntimeError, match="a bug"):
            sandbox.run({}, ["python3", "-c", "print(1)"])
        results: list[str] = []  # a lost slot made every later run wait forever
        later = threading.Thread(target=lambda: results.append(sandbox.run({}, ["python3", "-c", "print(2)"]).stdout))
        later.start()
        later.join(300)
        assert results == ["2\n"]
        assert sandbox.worker_pids() != [first]  # its state was unknown: replaced, not reused
    assert marked_processes(work_root) == []


def test_close_leaves_no_process_and_no_directory(work_root: Path) -> None:
    sandbox = LocalSandbox(LocalSandboxConfig(workers=3, work_root=str(work_root)))
    sandbox.start()
    pids = sandbox.worker_pids()
    assert len(pids) == 3 and len(worker_dirs(work_root)) == 3
    sandbox.run({}, ["python3", "-c", "import subprocess; subprocess.Popen(['sleep', '60'])"])
    sandbox.close()
    sandbox.close()  # idempotent
    assert marked_processes(work_root) == []
    assert worker_dirs(work_root) == []
    result = sandbox.run({}, ["python3", "-c", "print('restarted')"])  # starts again on demand
    assert result.stdout == "restarted\n"
    sandbox.close()
    assert marked_processes(work_root) == []


def test_an_unclosed_sandbox_is_cleaned_up_when_dropped(work_root: Path) -> None:
    sandbox = LocalSandbox(LocalSandboxConfig(workers=2, work_root=str(work_root)))
    assert sandbox.run({}, ["python3", "-c", "print(4)"]).stdout == "4\n"
    assert len(marked_processes(work_root)) >= 4  # per worker: outer, PID 1, spare child
    del sandbox
    gc.collect()
    assert marked_processes(work_root) == [] and worker_dirs(work_root) == []


def test_warm_false_starts_a_fresh_interpreter_per_run(work_root: Path) -> None:
    sandbox = LocalSandbox(LocalSandboxConfig(warm=False, work_root=str(work_root)))
    with sandbox:
        first = sandbox.run({}, ["python3", "-c", "import os; print(os.getpid())"])
        second = sandbox.run({}, ["python3", "-c", "import os; print(os.getpid())"])
        assert first.ok and second.ok and first.extra["inprocess"] is False
    # Each run's worker is stopped after the reply, by a thread; close() waits for it.
    assert sandbox.worker_pids() == [] and marked_processes(work_root) == []
    assert worker_dirs(work_root) == []


def test_isolation_none_runs_and_kills_the_tree(work_root: Path) -> None:
    config = LocalSandboxConfig(isolation="none", work_root=str(work_root))
    sandbox = LocalSandbox(config)
    with sandbox:
        result = sandbox.run({}, ["python3", "-c", "import os; print(os.getuid())"])
        assert result.stdout == f"{os.getuid()}\n"
        spawner = "import subprocess\nsubprocess.Popen(['sleep', '61'], start_new_session=True)\nwhile True: pass"
        result = sandbox.run({}, ["python3", "-c", spawner], timeout=1.0)
        assert result.timed_out
    assert not any(b"sleep\x0061" in _cmdline(pid) for pid in _all_pids())
    assert describe_is_json(LocalSandbox(config))


def describe_is_json(sandbox: LocalSandbox) -> bool:
    described = sandbox.describe()
    json.dumps(described)
    return {"backend", "isolation", "mode", "limits", "python"} <= set(described)


def test_a_forked_copy_cannot_use_or_close_the_pool(warm_sandbox: LocalSandbox) -> None:
    pid = os.fork()
    if pid == 0:  # the child must neither run nor kill the parent's workers
        code = 3
        try:
            warm_sandbox.run({}, ["python3", "-c", "pass"])
        except SandboxError:
            warm_sandbox.close()
            code = 0
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert warm_sandbox.run({}, ["python3", "-c", "print(3)"]).stdout == "3\n"


def test_describe_reports_backend_limits_and_interpreter(warm_sandbox: LocalSandbox) -> None:
    described = warm_sandbox.describe()
    assert described["backend"] == "local" and described["isolation"] == "namespaces"
    assert described["mode"] == "warm" and described["namespaces"] in ("root", "userns")
    assert described["limits"]["memory_mb"] == 4096  # type: ignore[index]
    assert described["python"] == sys.executable and described["python_version"]


def test_get_sandbox_builds_a_local_sandbox() -> None:
    sandbox = get_sandbox("local", workers=2, warm=False)
    assert isinstance(sandbox, LocalSandbox) and sandbox.config.workers == 2


def test_invalid_arguments_are_rejected(warm_sandbox: LocalSandbox) -> None:
    with pytest.raises(ValueError):
        warm_sandbox.run({"../x.py": ""}, ["python3", "x.py"])
    with pytest.raises(ValueError):
        warm_sandbox.run({}, "python3 main.py")
    with pytest.raises(ValueError):
        warm_sandbox.run({}, ["python3"], timeout=0)
    with pytest.raises(ValueError):
        warm_sandbox.run({}, ["python3"], env={"A=B": "c"})
    for bad in (0, -1.0, float("nan"), float("inf"), "60", True):
        with pytest.raises(ValueError, match="cpu_seconds must be a positive number"):
            warm_sandbox.run({}, ["python3", "-c", "pass"], cpu_seconds=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- leftovers after a crash

CRASHING_HOST = """
import sys, time
from gym_repost.sandbox.config import LocalSandboxConfig
from gym_repost.sandbox.identity import start_time
from gym_repost.sandbox.local import LocalSandbox
sandbox = LocalSandbox(LocalSandboxConfig(workers=2, work_root=sys.argv[1]))
sandbox.start()
print(*sandbox.worker_pids(), flush=True)
time.sleep(60)
"""


def test_workers_clean_up_after_a_host_crash(work_root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(local.__file__).parents[2])}
    host = subprocess.Popen(
        [sys.executable, "-c", CRASHING_HOST, str(work_root)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert host.stdout is not None
    workers = [int(p) for p in host.stdout.readline().split()]
    assert len(workers) == 2 and len(worker_dirs(work_root)) == 2
    host.kill()
    host.wait()
    deadline = time.monotonic() + 120  # a bound only: on a loaded machine the workers take longer
    while (worker_dirs(work_root) or not all(map(_zombie, workers))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker_dirs(work_root) == [] and all(map(_zombie, workers))
    assert cleanup_leftovers(str(work_root)).killed_pids == []


SECOND_NOTICE = """
import os, signal, sys, threading, time, types
from gym_repost.sandbox import worker

real = signal.signal


def signal_after_another_sigterm(signum, handler):  # the first thing the clean-up calls
    os.kill(os.getpid(), signal.SIGTERM)  # a second notice while the first is handled
    return real(signum, handler)


worker.signal = types.SimpleNamespace(**{k: getattr(signal, k) for k in dir(signal) if not k.startswith("__")})
worker.signal.signal = signal_after_another_sigterm
real(signal.SIGTERM, worker._raise_host_gone)
server = os.fork()
if server == 0:  # PID 1 of the worker: killed by the clean-up
    os.dup2(os.open(os.devnull, os.O_RDWR), 1)
    os.dup2(1, 2)
    time.sleep(30)
    os._exit(0)
wake_r, _ = os.pipe()
trash = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()  # the host's death signal
print(worker._outlive_server(server, trash, wake_r) == worker.EXIT_HOST_GONE)
"""


def test_a_second_sigterm_while_the_worker_cleans_up_behind_its_host_changes_nothing(tmp_path: Path) -> None:
    """The host's death may bring more than one SIGTERM; Python runs the handler between any
    two instructions, and a second ``_HostGone`` inside the first one's ``except`` left a
    worker's directory behind (CI: test_workers_clean_up_after_a_host_crash)."""
    env = {**os.environ, "PYTHONPATH": str(Path(local.__file__).parents[2])}
    result = subprocess.run(
        [sys.executable, "-c", SECOND_NOTICE, str(tmp_path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout == "True\n", result.stderr[-2000:]


def test_cleanup_leftovers_removes_what_a_killed_worker_left(work_root: Path) -> None:
    dead_host = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_host.wait()
    identity = f"{dead_host.pid}:1"
    dead = f"{DIR_PREFIX}{dead_host.pid}-1-abcd0123"
    live = f"{DIR_PREFIX}{os.getpid()}-{start_time(os.getpid())}-live0000"
    (work_root / dead / "run-0").mkdir(parents=True)
    (work_root / live).mkdir()
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", MARKER, f"--host={identity}"], start_new_session=True
    )
    while MARKER.encode() not in _cmdline(orphan.pid):  # execve() may still be under way
        time.sleep(0.01)
    report = cleanup_leftovers(str(work_root))
    orphan.wait(timeout=5)
    assert orphan.pid in report.killed_pids
    assert [Path(d).name for d in report.removed_dirs] == [dead]
    assert worker_dirs(work_root) == [live]
    again = cleanup_leftovers(str(work_root))
    assert again.killed_pids == [] and again.removed_dirs == []


def test_cleanup_leftovers_spares_live_sandboxes(warm_sandbox: LocalSandbox) -> None:
    before = warm_sandbox.worker_pids()
    report = cleanup_leftovers(str(Path(warm_sandbox.work_root)))
    assert not set(before) & set(report.killed_pids)
    assert warm_sandbox.run({}, ["python3", "-c", "print(2)"]).stdout == "2\n"


# ---------------------------------------------------------------- package installs


@pytest.mark.network
def test_install_makes_a_package_importable(work_root: Path, packages_dir: Path) -> None:
    config = LocalSandboxConfig(work_root=str(work_root), packages_dir=str(packages_dir))
    sandbox = LocalSandbox(config)
    with sandbox:
        installed = sandbox.install(["six==1.16.0"], timeout=300)
        assert installed.ok, installed.stderr
        probe = "import six; print(six.__version__, six.__file__)"
        result = sandbox.run({}, ["python3", "-c", probe])
        assert result.stdout.split()[0] == "1.16.0", result.stderr
        assert result.stdout.split()[1].startswith(str(packages_dir))
        blocked = sandbox.run({}, ["python3", "-c", f"open({str(packages_dir / 'x')!r}, 'w')"])
        assert blocked.returncode == 1 and "Errno" in blocked.stderr
    owners = {p.stat().st_uid for p in packages_dir.rglob("*")}
    assert owners == {os.getuid()}
    assert not any(p.stat().st_mode & 0o6000 for p in packages_dir.rglob("*"))


PROBE_OPTIONAL = (
    "import sys\nfor name in ('optional_mod', 'six'):\n    try:\n        m = __import__(name)\n"
    "        print(name, m.__file__)\n    except ImportError:\n        print(name, '-')\n"
)


def _seen(sandbox: Sandbox) -> dict[str, str]:
    result = sandbox.run({"m.py": PROBE_OPTIONAL}, ["python3", "m.py"])
    assert result.ok, result.stderr
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def test_a_package_set_shows_its_runs_what_was_installed_into_it_and_nothing_else(
    work_root: Path, packages_dir: Path
) -> None:
    """A build's runs see its own set in place of the package cache: what other builds
    installed there is not on their path, in any view of the set (ground truth, clock)."""
    config = LocalSandboxConfig(work_root=str(work_root), packages_dir=str(packages_dir), workers=1)
    with LocalSandbox(config) as sandbox:
        (packages_dir / "optional_mod.py").write_text("X = 1\n")
        assert _seen(sandbox)["optional_mod"] == str(packages_dir / "optional_mod.py")
        own = sandbox.package_set("b1-build")
        ahead = own.clock_ahead(3600)
        assert ahead is not None
        for view in (own, own.ground_truth(), ahead, own.for_imports(["six"])):
            assert _seen(view) == {"optional_mod": "-", "six": "-"}
        own_dir = packages_dir / ".sets" / "b1-build"
        for target in (own_dir / "six.py", own_dir.parent / "b1-build.owner", packages_dir / "optional_mod.py"):
            write = own.run({}, ["python3", "-c", f"open({str(target)!r}, 'w').write('X = 3')"])
            assert write.returncode == 1 and "Errno" in write.stderr, write  # the code under test cannot plant one
        (packages_dir / ".sets" / "b1-build" / "six.py").write_text("X = 2\n")  # as an install leaves it
        assert _seen(own)["six"] == str(packages_dir / ".sets" / "b1-build" / "six.py")
        assert _seen(own.ground_truth())["six"].endswith("/.sets/b1-build/six.py")
        assert _seen(sandbox) == {"optional_mod": str(packages_dir / "optional_mod.py"), "six": "-"}
        assert sandbox.package_set("b1-build") is not None  # made again: empty
        assert _seen(own)["six"] == "-"
        assert (packages_dir / ".sets" / "b1-build.owner").read_text() == host_identity()
        sandbox.remove_package_set("b1-build")
        assert sorted(p.name for p in (packages_dir / ".sets").iterdir()) == []
        with pytest.raises(SandboxError, match="was removed"):
            own.install(["six==1.16.0"], timeout=60)
        for bad in ("", "../up", ".hidden", "A", "x/y", "a" * 65):
            with pytest.raises(ValueError, match="package set"):
                sandbox.package_set(bad)


@pytest.mark.network
def test_an_install_into_a_package_set_stays_in_it(work_root: Path, packages_dir: Path) -> None:
    config = LocalSandboxConfig(work_root=str(work_root), packages_dir=str(packages_dir), workers=1)
    with LocalSandbox(config) as sandbox:
        own = sandbox.package_set("b2-build")
        installed = own.install(["six==1.16.0"], timeout=300)
        assert installed.ok, installed.stderr
        assert _seen(own)["six"] == str(packages_dir / ".sets" / "b2-build" / "six.py")
        assert _seen(sandbox)["six"] == "-"
        assert not (packages_dir / "six.py").exists()
        sandbox.remove_package_set("b2-build")


def test_cleanup_removes_the_package_sets_of_builds_that_were_killed(work_root: Path, packages_dir: Path) -> None:
    sets = packages_dir / ".sets"
    config = LocalSandboxConfig(work_root=str(work_root), packages_dir=str(packages_dir), workers=1)
    LocalSandbox(config).package_set("live")
    (sets / "dead").mkdir()
    (sets / "dead" / "six.py").write_text("")
    (sets / "dead.owner").write_text("999999999:1")
    report = cleanup_leftovers(str(work_root), str(packages_dir))
    assert report.removed_package_sets == [str(sets / "dead")]
    assert sorted(p.name for p in sets.iterdir()) == ["live", "live.owner"]


# ---------------------------------------------------------------- without root


def _python_for_nobody(*paths: str) -> str | None:
    """An interpreter that user 'nobody' can run and that can read ``paths``."""
    probe = "import sys\nfor p in sys.argv[1:]:\n    open(p, 'rb').close()"
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            done = subprocess.run(
                [python, "-c", probe, *paths],
                user=65534,
                group=65534,
                extra_groups=[],
                capture_output=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return python
    return None


NOBODY_DRIVER = """
import json, os, subprocess, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import worker, worker_io
host_dir = sys.argv[2]
config = {"isolation": "namespaces", "network": False, "warm": True, "once": False,
          "uid": None, "host_dir": host_dir, "packages_dir": None, "preload": [],
          "limits": {"cpu_seconds": 10, "memory_mb": 2048, "max_processes": 32,
                     "max_file_size_mb": 16, "max_output_bytes": 10000}}
proc = subprocess.Popen([sys.executable, sys.argv[1], worker.MARKER, f"--host={os.getpid()}:0",
                         json.dumps(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        start_new_session=True, env={"LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
                        "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"})
ready = worker.read_message(proc.stdout.fileno())
print(json.dumps(ready))
if ready.get("ready"):
    probe = ("import ctypes, os, socket\\nlibc = ctypes.CDLL(None, use_errno=True)\\n"
             "print(libc.mount(None, b'/', None, 0x1020, None), ctypes.get_errno())\\n"
             "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\\n"
             "try:\\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\\n"
             "except OSError:\\n    print('no network')")
    request = {"op": "run", "argv": ["python3", "-c", probe], "files": {}, "bfiles": {},
               "stdin": None, "env": {}, "timeout": 10.0}
    os.write(proc.stdin.fileno(), worker_io.encode_message(request))
    print(json.dumps(worker_io.read_message(proc.stdout.fileno())))
proc.stdin.close()
proc.wait()
"""


def test_unprivileged_user_gets_user_namespaces_or_a_clear_error() -> None:
    worker_path = str(Path(local.__file__).with_name("worker.py"))
    python = _python_for_nobody(worker_path, str(Path(worker_path).with_name("isolation.py")))
    if python is None:
        pytest.skip("no interpreter and source tree readable by user 'nobody'")
    base = Path(tempfile.mkdtemp())
    try:
        base.chmod(0o755)
        (base / "host").mkdir()
        os.chown(base / "host", 65534, 65534)
        (base / "driver.py").write_text(NOBODY_DRIVER)
        done = subprocess.run(
            [python, str(base / "driver.py"), worker_path, str(base / "host")],
            user=65534,
            group=65534,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=base,
            check=False,
        )
    finally:
        shutil.rmtree(base)
    lines = done.stdout.splitlines()
    assert lines, done.stderr
    ready = json.loads(lines[0])
    if not ready["ready"]:  # user namespaces disabled here: the message must say what to do
        assert 'isolation="none"' in ready["error"] and "unprivileged_userns" in ready["error"]
        return
    assert ready["mode"] == "userns"
    assert json.loads(lines[1])["stdout"].splitlines() == ["-1 1", "0000000000000000", "no network"]


def test_isolation_error_message_says_what_to_do() -> None:
    for needle in ("root", "kernel.unprivileged_userns_clone=1", 'isolation="none"', "docker"):
        assert needle in isolation.ADVICE


def test_non_linux_platform_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(SandboxUnavailableError, match="docker"):
        LocalSandbox(LocalSandboxConfig()).start()


def test_missing_interpreter_is_unavailable(work_root: Path) -> None:
    sandbox = LocalSandbox(LocalSandboxConfig(python="/nonexistent/python3", work_root=str(work_root)))
    with pytest.raises(SandboxUnavailableError, match="interpreter"):
        sandbox.start()


# ---------------------------------------------------------------- units


def test_capture_keeps_head_and_tail() -> None:
    capture = Capture(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop" * 100_000, b"XYZ12"):
        capture.feed(chunk)
    assert capture.truncated
    text = capture.text()
    assert text.startswith("abcde\n[... ") and text.endswith("...]\nXYZ12")
    small = Capture(10)
    small.feed(b"0123456789")
    assert small.text() == "0123456789" and not small.truncated


@pytest.mark.parametrize(
    ("argv", "env", "warm", "kind"),
    [
        (["python3", "main.py", "a"], {}, True, "script"),
        (["python", "-c", "pass"], {}, True, "code"),
        (["python3", "-m", "pytest"], {}, True, "module"),
        (["python3", "-u", "main.py"], {}, True, "exec"),
        (["python3", "main.py"], {"PYTHONIOENCODING": "latin-1:gym-repost"}, True, "exec"),
        (["python3", "main.py"], {}, False, "exec"),
        (["sh", "-c", "true"], {}, True, "exec"),
    ],
)
def test_plan_command(argv: list[str], env: dict[str, str], warm: bool, kind: str) -> None:
    assert plan_command(argv, env, warm)[0] == kind


def test_parse_mountinfo_unescapes_and_keeps_flags() -> None:
    text = (
        "36 35 98:0 /mnt1 /a\\040b rw,nosuid,noatime master:1 - ext3 /dev/root rw\n"
        "37 35 0:5 / /proc ro,nodev,relatime - proc proc rw\n"
    )
    first, second = isolation.parse_mountinfo(text)
    assert first.mount_point == "/a b" and not first.read_only
    assert first.kept_flags == isolation.MS_NOSUID | isolation.MS_NOATIME
    assert second.read_only and second.kept_flags == isolation.MS_NODEV | isolation.MS_RELATIME
    assert (first.fstype, second.fstype) == ("ext3", "proc")


def test_workdir_alias_is_the_run_directory_and_fresh_per_run() -> None:
    """RepoST's scripts write to /home/user/tmp: each run finds its own directory there."""
    script = (
        "import os\n"
        "print(sorted(os.listdir('/home/user/tmp')))\n"
        "open('/home/user/tmp/made.txt', 'w').write('x')\n"
        "print(sorted(os.listdir('.')))\n"
        "print(sorted(os.listdir('/home')))\n"
    )
    expected = ["['main.py']", "['made.txt', 'main.py']", "['user']"]
    with LocalSandbox(LocalSandboxConfig(workers=1)) as sb:
        for _ in range(2):
            result = sb.run({"main.py": script}, ["python3", "main.py"], timeout=10)
            assert result.returncode == 0, result.stderr
            assert result.stdout.split("\n")[:3] == expected
        # The worker binds the next run's directory ahead, while idle. A run that fails, and
        # one whose scratch space is mounted anew (a disk quota of its own), still find
        # their own directory there, and so does the run after them.
        assert sb.run({"main.py": script + "raise SystemExit(3)\n"}, ["python3", "main.py"]).returncode == 3
        request = build_request({"main.py": script}, ["python3", "main.py"], 10.0, None, None, {"disk_mb": 7})
        reply = sb._call_warm_worker(request, 20.0)
        assert reply["returncode"] == 0 and reply["stdout"].split("\n")[:3] == expected, reply
        quota = "import os\ns = os.statvfs('/home/user/tmp')\nprint(s.f_blocks * s.f_frsize // 2**20)\n"
        reply = sb._call_warm_worker(
            build_request({"q.py": quota}, ["python3", "q.py"], 10.0, None, None, {"disk_mb": 7}), 20.0
        )
        assert reply["stdout"].strip() == "7", reply
        result = sb.run({"main.py": script}, ["python3", "main.py"], timeout=10)
        assert result.returncode == 0 and result.stdout.split("\n")[:3] == expected, result.stderr
    assert not os.path.exists("/home/user/tmp/made.txt")


def test_workdir_aliases_are_validated() -> None:
    import pydantic

    for bad in ("relative/x", "/home", "/usr/local/x", "/home/../etc/x"):
        with pytest.raises(pydantic.ValidationError):
            LocalSandboxConfig(workdir_aliases=[bad])


# ---------------------------------------------------------------- the warm run path


def test_programs_run_from_their_bytecode_as_if_compiled_where_they_lie(warm_sandbox: LocalSandbox) -> None:
    # The harness, shipped verbatim, runs from the worker's precompiled code: its frames
    # (and the protocol module's, imported) must name the run's own files and lines.
    from gym_repost.harness import harness_files

    for plain_run_before in (False, False, True):
        # The second run's programs were relocated ahead, in the spare child; so were the
        # third's, though a run of a plain command (shipping no program) came in between.
        if plain_run_before:
            assert warm_sandbox.run({"main.py": "print(1)\n"}, ["python3", "main.py"]).stdout == "1\n"
        result = warm_sandbox.run(harness_files(), ["python3", "_gym_repost_harness.py"])
        assert result.returncode == 1 and result.extra["inprocess"] is True
        frames = re.findall(r'File "([^"]+)", line \d+, in (\w+)\n +(.+)', result.stderr)
        files = {os.path.basename(path): path for path, _, _ in frames}
        assert set(files) == {"_gym_repost_harness.py", "_gym_repost_protocol.py"}, result.stderr
        assert len({os.path.dirname(path) for path in files.values()}) == 1
        assert ("read_config", 'raise EOFError("standard input holds no configuration")') in [
            (function, line) for _, function, line in frames
        ]
        assert "EOFError: standard input holds no configuration" in result.stderr


_AHEAD_PROBE = """\
import os, sys
run = os.getcwd()
for name in ("_gym_repost_protocol", "_gym_repost_values"):
    module = sys.modules[name]
    spec = module.__spec__
    seen = [module.__name__, module.__file__, module.__cached__, module.__package__, type(module.__loader__).__name__,
            module.__loader__.path, spec.name, spec.origin, spec.cached, spec.has_location, spec.parent,
            spec.submodule_search_locations, sorted(k for k in vars(module) if k.startswith("__"))]
    print(repr(seen).replace(run, "RUN"))
print("finder", run in sys.path_importer_cache)
"""


def test_program_modules_imported_ahead_are_those_the_runs_import_makes() -> None:
    """A spare child imports the protocol and values modules ahead, for the next run, when the
    last run shipped them. A run of the host's program that ships them gets exactly the
    modules its own import makes; any other run forgets them and imports what it finds."""
    from gym_repost.harness import harness_files
    from gym_repost.sandbox.programs import program_stdin

    config = {"script": "probe.py", "start": 1, "end": 1, "mode": "driver", "inputs": None}
    stdin = program_stdin(config, "0" * 32)
    shipped = {**harness_files(), "probe.py": _AHEAD_PROBE}
    with LocalSandbox(LocalSandboxConfig(workers=1)) as sb:
        runs = [sb.run(shipped, ["python3", "_gym_repost_harness.py"], stdin=stdin)]
        while len(runs) < 10 and "finder False" not in runs[-1].stdout:
            time.sleep(0.2)  # the worker prepares the next run while idle (a request waiting skips that)
            runs.append(sb.run(shipped, ["python3", "_gym_repost_harness.py"], stdin=stdin))
        # after a harness run (and a pause: its modules are imported ahead), a plain run, one
        # shipping a protocol module of its own, and a harness run with a values module changed
        time.sleep(0.3)
        plain = sb.run({"m.py": "import sys\nprint([m for m in sys.modules if 'gym' in m])\n"}, ["python3", "m.py"])
        sb.run(shipped, ["python3", "_gym_repost_harness.py"], stdin=stdin)
        time.sleep(0.3)
        own = {"_gym_repost_protocol.py": "MINE = 1\n", "m.py": "import _gym_repost_protocol as p\nprint(p.MINE)\n"}
        mine = sb.run(own, ["python3", "m.py"])
        sb.run(shipped, ["python3", "_gym_repost_harness.py"], stdin=stdin)
        time.sleep(0.3)
        changed = {**shipped, "_gym_repost_values.py": harness_files()["_gym_repost_values.py"] + "CHANGED = 1\n"}
        probe = "import _gym_repost_values as v\nprint('changed', getattr(v, 'CHANGED', None))\n"
        altered = sb.run({**changed, "probe.py": probe}, ["python3", "_gym_repost_harness.py"], stdin=stdin)
    seen = [[line for line in r.stdout.split("@@gym-repost@@")[0].splitlines() if line] for r in runs]
    assert all(r.extra["inprocess"] for r in runs) and len(seen[0]) == 3, runs[0].stderr
    assert all(s[:2] == seen[0][:2] for s in seen), seen
    assert "'RUN/_gym_repost_protocol.py'" in seen[0][0]
    # the first run imported them itself (a finder for its directory), a later one got them ahead
    assert seen[0][2] == "finder True" and seen[-1][2] == "finder False", seen
    assert plain.stdout == "[]\n" and mine.stdout == "1\n", (plain.stderr, mine.stderr)
    assert altered.stdout.startswith("changed 1\n"), altered.stderr


def test_a_run_cannot_patch_the_modules_the_next_run_gets_ahead() -> None:
    """Attack: code under test in a harness run (driver mode: the tests share its process)
    patches the protocol module and appends to its file. The next run's modules, imported
    ahead in a spare child forked from PID 1, are the host's, untouched."""
    from gym_repost.harness import harness_files
    from gym_repost.programs.protocol import MARK
    from gym_repost.sandbox.programs import program_stdin

    config = {"script": "probe.py", "start": 1, "end": 1, "mode": "driver", "inputs": None}
    stdin = program_stdin(config, "0" * 32)
    attack = (
        "import os, sys\n"
        "p = sys.modules['_gym_repost_protocol']\n"
        "p.MARK = 'forged'\n"
        "open(p.__file__, 'a').write('\\nMARK = \"forged\"\\n')\n"
        "print('attacked', p.MARK)\n"
    )
    probe = (
        "import os, sys\n"
        f"same = sys.modules['_gym_repost_protocol'].MARK == {MARK!r}\n"
        "print('mark', 'host' if same else 'forged', os.getcwd() in sys.path_importer_cache)\n"
    )
    with LocalSandbox(LocalSandboxConfig(workers=1)) as sb:
        marks = []
        for _ in range(10):
            attacked = sb.run(
                {**harness_files(), "probe.py": attack}, ["python3", "_gym_repost_harness.py"], stdin=stdin
            )
            assert "attacked forged" in attacked.stdout, attacked.stderr
            time.sleep(0.2)  # the next run's modules are imported ahead, while idle
            result = sb.run({**harness_files(), "probe.py": probe}, ["python3", "_gym_repost_harness.py"], stdin=stdin)
            marks.append(next(line.split() for line in result.stdout.splitlines() if line.startswith("mark ")))
            if marks[-1][-1] == "False":  # got them ahead (no finder for its directory)
                break
    assert marks[-1] == ["mark", "host", "False"] and all(m[1] == "host" for m in marks), marks


def test_only_the_run_process_of_a_program_run_tells_pid_1_its_exit_early() -> None:
    """A harness run whose modules were imported ahead is told where PID 1 waits for its exit
    status (``protocol.exit_pipe``; a run that imports the module itself is not). The code
    under test (driver mode: it shares the harness's process) forks a child that calls
    ``protocol.exit(0)``: that tells PID 1 nothing, and the run goes on to complete."""
    from gym_repost.harness import harness_files
    from gym_repost.sandbox.programs import program_stdin, read_program_output

    config = {"script": "probe.py", "start": 1, "end": 1, "mode": "driver", "inputs": None}
    probe = (
        "import os, sys, time\n"
        "p = sys.modules['_gym_repost_protocol']\n"
        "print('pipe', p.exit_pipe is not None and p.exit_pipe[:2] == (os.getpid(), 4))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    p.exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "time.sleep(0.2)  # were the run ended, PID 1 would have killed this process by now\n"
        "print('after the child')\n"
    )
    seen = []
    with LocalSandbox(LocalSandboxConfig(workers=1)) as sb:
        for _ in range(10):
            result = sb.run(
                {**harness_files(), "probe.py": probe},
                ["python3", "_gym_repost_harness.py"],
                stdin=program_stdin(config, "0" * 32),
            )
            run = read_program_output(result, "0" * 32)
            assert run.completed and "after the child" in result.stdout, (run.problem, result.stdout, result.stderr)
            seen.append(result.stdout.split("\n", 1)[0])
            if seen[-1] == "pipe True":
                break
            time.sleep(0.2)  # the next run's modules are imported ahead, while idle
    assert seen[0] == "pipe False" and seen[-1] == "pipe True", seen


def test_programs_the_worker_holds_are_written_from_its_copy(warm_sandbox: LocalSandbox) -> None:
    # Their text is not sent per run; the run directory holds exactly the text given.
    from gym_repost.harness import harness_files

    files = harness_files()
    worker = warm_sandbox._pool.members()[0]
    request = worker.leave_out_programs({"files": dict(files)})
    assert request["files"] == {} and sorted(request["programs"]) == sorted(files)
    changed = {**files, "_gym_repost_harness.py": files["_gym_repost_harness.py"] + "# changed\n"}
    request = worker.leave_out_programs({"files": dict(changed)})
    assert list(request["files"]) == ["_gym_repost_harness.py"]
    assert sorted(request["programs"]) == ["_gym_repost_protocol.py", "_gym_repost_values.py"]
    probe = "import hashlib, sys\nfor n in sys.argv[1:]:\n    print(hashlib.sha256(open(n, 'rb').read()).hexdigest())"
    for shipped in (files, changed):
        result = warm_sandbox.run({**shipped, "probe.py": probe}, ["python3", "probe.py", *sorted(shipped)])
        assert result.stdout.split() == [hashlib.sha256(shipped[n].encode()).hexdigest() for n in sorted(shipped)]


def test_profile_mode_stamps_each_phase_in_order(work_root: Path) -> None:
    config = LocalSandboxConfig(profile=True, work_root=str(work_root))
    with LocalSandbox(config) as sandbox:
        sandbox.run({"m.py": "print(1)"}, ["python3", "m.py"])
        phases = sandbox.run({"m.py": "print(2)"}, ["python3", "m.py"]).extra["phases"]
    assert isinstance(phases, dict)
    order = [
        "host_called",
        "received",
        "dispatching",
        "dispatched",
        "exited",
        "replied",
        "host_received",
        "host_returned",
    ]
    assert [phases[k] for k in order] == sorted(phases[k] for k in order)
    child = ["dispatching", "child_job", "child_files", "child_start", "child_end", "exited"]
    assert [phases[k] for k in child] == sorted(phases[k] for k in child)
    assert phases["host_called"] <= phases["host_sent"] and phases["previous_ready"] <= phases["received"]
    assert 0 < phases["child_job_faults"] <= phases["child_start_faults"] <= phases["child_end_faults"]


def test_a_run_reaches_none_of_the_workers_modules(warm_sandbox: LocalSandbox) -> None:
    """A warm run is forked from PID 1, which holds the worker's modules (the server, the held
    programs' bytecode, the profile stamps). The run must not reach them through sys.modules,
    and a module of the same name that the run ships is the one it imports."""
    probe = (
        "import sys\n"
        "names = ('worker', 'worker_io', 'worker_run', 'worker_startup', 'isolation')\n"
        "print(sorted(n for n in sys.modules if n.split('.')[-1] in names))\n"
        "import worker_run\n"
        "print(worker_run.MINE)\n"
    )
    for _ in range(2):  # the second run's child found their names while idle (own_module_names)
        result = warm_sandbox.run(
            {"main.py": probe, "worker_run.py": "MINE = 'the run own module'\n"}, ["python3", "main.py"], timeout=30
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split("\n")[:2] == ["[]", "the run own module"]
        time.sleep(0.3)


def test_rehearsing_the_recording_paths_changes_no_module() -> None:
    """A spare child walks the paths a harness run records through (pickle, base64, JSON,
    SHA-1) while idle: what a run then sees of those modules is what a fresh import made."""
    import base64
    import pickle
    import threading

    from gym_repost.sandbox import worker_run

    modules = (base64, hashlib, json, pickle, threading)
    before = (set(sys.modules), [dict(vars(m)) for m in modules])
    worker_run.rehearse_recording()
    assert (set(sys.modules), [dict(vars(m)) for m in modules]) == before


def test_only_runs_without_network_are_told_they_are_offline(warm_sandbox: LocalSandbox) -> None:
    from gym_repost.sandbox.base import OFFLINE_ENV

    show = "import json, os\nprint(json.dumps({k: os.environ.get(k) for k in %r}))" % sorted(OFFLINE_ENV)
    offline = warm_sandbox.run({"m.py": show}, ["python3", "m.py"])
    online = warm_sandbox.run({"m.py": show}, ["python3", "m.py"], network=True)
    assert json.loads(offline.stdout) == OFFLINE_ENV
    assert json.loads(online.stdout) == dict.fromkeys(OFFLINE_ENV)  # an install run may download
