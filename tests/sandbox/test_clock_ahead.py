"""A wall clock ahead for some runs (``Sandbox.clock_ahead``): what moves, what does not,
and which workers serve those runs."""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import time
from pathlib import Path

import pytest

from gym_repost.sandbox import clock, environments
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.config import LocalSandboxConfig
from gym_repost.sandbox.local import LocalSandbox, _merge_tree

AHEAD = 3 * 86400 + 3661.5

CLOCKS = """\
import datetime, os, subprocess, sys, threading, time
start = time.monotonic()
time.sleep(0.05)
threading.Event().wait(0.05)
slept = time.monotonic() - start
open("f", "w").close()
print(time.time(), time.time_ns() / 1e9, datetime.datetime.now().timestamp(), datetime.date.today().toordinal())
print(subprocess.run(["date", "+%s"], capture_output=True, text=True).stdout.strip())
child = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], capture_output=True, text=True)
print(child.stdout.strip())
print(time.monotonic(), os.stat("f").st_mtime, slept)
"""


def _clocks(sandbox: Sandbox) -> tuple[list[float], float]:
    """What a run read (wall clocks, ``date``, a child interpreter, monotonic, a file's
    mtime, the time two 50 ms waits took), and the host's time when it answered."""
    result = sandbox.run({"main.py": CLOCKS}, ["python3", "main.py"], timeout=20)
    assert result.returncode == 0 and not result.stderr, result
    return [float(v) for v in result.stdout.split()], time.time()


def _check_ahead(sandbox: Sandbox, ahead: float) -> None:
    (wall, wall_ns, now, day, date, child, monotonic, mtime, slept), host = _clocks(sandbox)
    for read in (wall, wall_ns, now, date, child):  # 30 s: room for a loaded machine
        assert ahead - 30 < read - host < ahead + 1, (read, host)
    assert day in {datetime.date.fromtimestamp(host + ahead - s).toordinal() for s in (0, 30)}
    assert abs(monotonic - time.monotonic()) < 30  # timeouts and durations are as they are
    assert abs(mtime - host) < 30  # file times too
    assert 0.09 < slept < 10  # sleeps and waits last what they should


def test_a_run_on_a_clock_ahead_reads_the_wall_clock_ahead_and_nothing_else(warm_sandbox: LocalSandbox) -> None:
    ahead = warm_sandbox.clock_ahead(AHEAD)
    assert ahead is not None and warm_sandbox.describe()["clock_ahead"] is True
    _check_ahead(ahead, AHEAD)
    _check_ahead(ahead.for_imports(["numpy"]), AHEAD)  # stays on that clock
    _check_ahead(warm_sandbox, 0.0)  # the other runs: the real clock
    _check_ahead(warm_sandbox.clock_ahead(86400), 86400)


def test_a_cold_sandbox_puts_the_clock_of_a_run_ahead(work_root: Path, packages_dir: Path) -> None:
    config = LocalSandboxConfig(warm=False, work_root=str(work_root), packages_dir=str(packages_dir))
    with LocalSandbox(config) as sandbox:
        ahead = sandbox.clock_ahead(AHEAD)
        assert ahead is not None
        _check_ahead(ahead, AHEAD)
        _check_ahead(sandbox, 0.0)


def test_the_clock_of_one_run_is_not_the_next_runs(tmp_path: Path) -> None:
    """One worker serves runs on the clock ahead and runs on the real one, in turns and at
    once (each run sets its own clock, in its own process): each reads its own; the
    workers, a worker of its own preloading apart included, are the same ones."""
    config = LocalSandboxConfig(workers=1, work_root=str(tmp_path / "work"), packages_dir=str(tmp_path / "p"))
    code = "import time\ntime.sleep(0.05)\nprint(time.time())\n"
    with LocalSandbox(config) as sandbox:
        ahead = sandbox.clock_ahead(AHEAD)
        assert ahead is not None
        workers = sandbox.worker_pids()
        order = [ahead, sandbox, sandbox, ahead, ahead, sandbox] * 2
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            read = list(pool.map(lambda where: float(where.run({"m.py": code}, ["python3", "m.py"]).stdout), order))
        host = time.time()
        shifts = [round((value - host) / AHEAD) for value in read]
        assert shifts == [1 if where is ahead else 0 for where in order], (shifts, read)
        assert sandbox.worker_pids() == workers
        late = ahead.run({"m.py": "import time\ntime.sleep(60)\n"}, ["python3", "m.py"], timeout=1)
        assert late.timed_out  # a timeout is as long as it is


def test_seconds_must_be_a_positive_number(warm_sandbox: LocalSandbox) -> None:
    for bad in (0, -1, True, "1", float("nan"), 1e12):
        with pytest.raises(ValueError, match="clock_ahead"):
            warm_sandbox.clock_ahead(bad)  # type: ignore[arg-type]


def test_without_a_c_compiler_there_is_no_clock_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    assert clock.clock_library(str(tmp_path / "packages")) is None
    built = clock.clock_library.__wrapped__  # the library is built once per directory and kept
    monkeypatch.undo()
    library = built(str(tmp_path / "other"))
    assert library is not None and Path(library).is_file() and built(str(tmp_path / "other")) == library


def test_other_backends_have_no_clock_ahead() -> None:
    class Plain(Sandbox):
        name = "plain"

        def start(self) -> None: ...

        def close(self) -> None: ...

        def run(self, files, command, timeout=10.0, **kwargs):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def install(self, requirements, timeout=900.0):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    assert Plain().clock_ahead(5.0) is None


def test_a_library_planted_in_the_package_cache_is_not_preloaded(tmp_path: Path) -> None:
    """The workers preload the library on the host, before isolating themselves: a file
    of that name that gym-repost did not build (an installed package's, say) is built over,
    and ``install`` never copies that directory into the package cache."""
    build = clock.clock_library.__wrapped__
    library = build(str(tmp_path / "cache"))
    assert library is not None
    Path(library).write_bytes(b"planted")
    assert build(str(tmp_path / "cache")) == library and Path(library).read_bytes().startswith(b"\x7fELF")
    source = tmp_path / "pip-target"
    (source / clock.DIRECTORY).mkdir(parents=True)
    (source / clock.DIRECTORY / Path(library).name).write_bytes(b"planted")
    (source / "somepkg").mkdir()
    (source / "somepkg" / "__init__.py").write_text("")
    _merge_tree(str(source), str(tmp_path / "cache"))
    assert (tmp_path / "cache" / "somepkg" / "__init__.py").is_file()
    assert Path(library).read_bytes().startswith(b"\x7fELF")


ATTACK = """\
import ctypes, hashlib, os, sys, time
library, record = sys.argv[1], sys.argv[2]
offset = ctypes.c_longlong.in_dll(ctypes.CDLL(None), "gym_repost_clock_ahead_ns")
offset.value = 10 * 86400 * 10**9  # its own clock, ten days ahead
print("own", round((time.time() - float(sys.argv[3])) / 86400))
for path in (library, os.path.join(os.path.dirname(library), "planted.so")):
    try:
        with open(path, "ab") as handle:
            handle.write(b"planted")
        print("wrote", path)
    except OSError:
        print("refused")
print("record seen", os.path.exists(record))
"""


def test_a_run_cannot_move_another_runs_clock_or_touch_the_library(tmp_path: Path) -> None:
    """A candidate's run that sets the preloaded library's offset moves only its own clock;
    it cannot write the library (or beside it), nor see the hash that vouches for it; the
    next runs of its worker, on the real clock or ahead, read what they should."""
    config = LocalSandboxConfig(workers=1, work_root=str(tmp_path / "work"), packages_dir=str(tmp_path / "p"))
    with LocalSandbox(config) as sandbox:
        library = clock.clock_library(sandbox.packages_dir)
        assert library is not None
        before = Path(library).read_bytes()
        digest = hashlib.sha256(before).hexdigest()
        record = next(p for p in (environments.home() / "clock").iterdir() if p.read_text().strip() == digest)
        workers = sandbox.worker_pids()
        attack = sandbox.run(
            {"main.py": ATTACK}, ["python3", "main.py", library, str(record), str(time.time())], timeout=20
        )
        assert attack.stdout.split("\n")[:4] == ["own 10", "refused", "refused", "record seen False"], attack
        _check_ahead(sandbox, 0.0)
        ahead = sandbox.clock_ahead(AHEAD)
        assert ahead is not None
        _check_ahead(ahead, AHEAD)
        assert sandbox.worker_pids() == workers and Path(library).read_bytes() == before
