"""The zygote of :mod:`testfile` (inside the sandbox): forked before any test code runs,
it keeps a snapshot of the run directory and forks the replayer and the variant
children (mutants, decoys, calibration), observing their exit statuses.
"""

import gc
import json
import os
import select
import shutil
import signal
import sys
import time

try:
    from . import protocol
    from .testfile_replay import MESSAGE_CHARS, replayer_main
    from .testfile_session import INI_NAME, longrepr_text, summary_line
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]
    from _gym_repost_testfile_replay import MESSAGE_CHARS, replayer_main  # type: ignore[no-redef,import-not-found]
    from _gym_repost_testfile_session import INI_NAME, longrepr_text, summary_line  # type: ignore[no-redef,import-not-found]

SLOTS = ".gym_repost_slots"
_CPU_POLL = 0.02
"""Seconds between two readings of a running child's CPU time."""


# --------------------------------------------------------------------------- zygote


def zygote_main(config, commands, replies):
    """Serve the monitor's questions; never import the focal module or the test file."""
    try:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        root = os.getcwd()
        import coverage  # noqa: F401 - imported before any test code can plant a module of that name
        import pytest  # noqa: F401

        _preimport_pytest_plugins()
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        snapshot = _snapshot(root, config)
        zygote = _ZygoteServer(config, root, snapshot, replies)
        zygote.pytest_config = _prepared_pytest_config(config)
        signal.signal(signal.SIGTERM, zygote.terminate)
        gc.collect()
        gc.freeze()  # children's collections then skip (and do not copy) the zygote's objects
        zygote.reply({"reply": "ready"})
        buffered = b""
        while True:
            chunk = os.read(commands, 1 << 20)
            if not chunk:
                break
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                command = decode_event(line)
                if command is not None:
                    zygote.serve(command)
    except BaseException:
        pass
    os._exit(0)


def _preimport_pytest_plugins():
    """Import pytest's own plugins once, so that every variant child does not."""
    import importlib

    import _pytest.config

    for name in getattr(_pytest.config, "default_plugins", ()):
        try:
            importlib.import_module("_pytest." + name)
        except ImportError:
            pass


def _snapshot(root, config):
    """Every file of the run directory before any test code ran, by relative path (bytes)."""
    files = {}
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", SLOTS)]
        for name in names:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, root)
            if relative.startswith("_gym_repost_") or name.startswith(".gym_repost"):
                continue
            try:
                with open(path, "rb") as fh:
                    files[relative] = fh.read()
            except OSError:
                continue
    return files


class _ZygoteServer:
    def __init__(self, config, root, snapshot, replies):
        self.config, self.root, self.snapshot, self.replies = config, root, snapshot, replies
        self.focal_source = config["focal_source"]
        self.children = {}
        self.pytest_config = None

    def reply(self, message):
        protocol.write_all(self.replies, (json.dumps(message) + "\n").encode("utf-8", "surrogatepass"))

    def terminate(self, signum, frame):
        for pid in list(self.children):
            kill_group(pid)
        os._exit(0)

    def serve(self, command):
        kind = command.get("cmd")
        if kind == "replay":
            self.reply(self._replay(command))
        elif kind == "calibrate":
            self.reply(self._calibrate(command))
        elif kind == "variants":
            self._variants(command)

    # ---- replay

    def _replay(self, command):
        pid, fd = _fork(lambda write_fd: replayer_main(self, command, write_fd))
        limit = self.config["timeout"]
        data, status, _ = self._collect(pid, fd, {"cpu": limit, "wall": self.config["wall_factor"] * limit})
        try:
            reply = json.loads(data.decode("utf-8"))
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            return {"error": "the replay %s" % _ended(status)}
        return reply

    # ---- variant children

    def _calibrate(self, command):
        started = time.monotonic()
        pid, fd = _fork(lambda write_fd: _variant_main(self, 0, self.focal_source, command["nodeids"], False, write_fd))
        data, status, cpu = self._collect(pid, fd, command, stretch=True)
        seconds = time.monotonic() - started
        try:
            reply = json.loads(data.decode("utf-8"))
        except ValueError:
            reply = None
        passed = reply.get("passed") if isinstance(reply, dict) else None
        if not isinstance(passed, list):
            detail = "the calibration run %s" % _ended(status)
            return {"passed": [], "seconds": seconds, "cpu": cpu, "detail": detail}
        return {"passed": [n for n in passed if isinstance(n, str)], "seconds": seconds, "cpu": cpu}

    def _variants(self, command):
        """Run the plan's variants, ``jobs`` at a time; each is stopped at its CPU limit
        (``cpu``) or its wall-clock guard (``wall``), whichever comes first: a timeout."""
        by_id = {v["id"]: v for v in self.config["variants"]}
        pending = list(command["plan"])
        free = list(range(command["jobs"]))
        running = {}
        while pending or running:
            while pending and free:
                item = pending.pop(0)
                slot = free.pop(0)
                source = _apply_span(self.focal_source, by_id[item["id"]])
                pid, fd = _fork(
                    lambda write_fd, s=slot, src=source, ids=item["nodeids"]: _variant_main(
                        self, s, src, ids, True, write_fd
                    )
                )
                running[fd] = {
                    "pid": pid,
                    "item": item,
                    "slot": slot,
                    "data": b"",
                    "deadline": time.monotonic() + item["wall"],
                }
            self._wait(running, free)

    def _wait(self, running, free):
        wait = min(entry["deadline"] for entry in running.values()) - time.monotonic()
        ready, _, _ = select.select(list(running), [], [], _poll_wait(wait))
        ended = []
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                running[fd]["data"] += chunk
            else:
                ended.append((fd, False))
        for fd, entry in running.items():
            over = (
                None
                if (fd, False) in ended
                else _over_limit(entry["pid"], entry["item"], entry["deadline"], stretch=True)
            )
            if over is not None:
                ended.append((fd, over))
        for fd, over in ended:
            entry = running.pop(fd)
            kill_group(entry["pid"])
            os.close(fd)
            _, status, usage = os.wait4(entry["pid"], 0)
            self.children.pop(entry["pid"], None)
            free.append(entry["slot"])
            item = entry["item"]
            if over:
                verdict = {"id": item["id"], "status": "timeout", "killed_by": None, "tests": len(item["nodeids"])}
                verdict["detail"] = over
            else:
                verdict = _verdict(entry, status)
            self.reply({"reply": "variant", "verdict": verdict, "cpu": usage.ru_utime + usage.ru_stime})

    def _collect(self, pid, fd, limits, stretch=False):
        """Read a child's pipe to its end, then reap it; stopped at its limits (``cpu``
        seconds of CPU time, ``wall`` seconds of the wall clock), checked at every wake-up,
        however much it writes. (data, exit status or None when stopped, CPU seconds)."""
        self.children[pid] = True
        deadline = time.monotonic() + limits["wall"]
        data, stopped = b"", False
        while True:
            ready, _, _ = select.select([fd], [], [], _poll_wait(deadline - time.monotonic()))
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                data += chunk
            if _over_limit(pid, limits, deadline, stretch) is not None:
                stopped = True
                break
        kill_group(pid)
        os.close(fd)
        _, status, usage = os.wait4(pid, 0)
        self.children.pop(pid, None)
        return data, (None if stopped else status), usage.ru_utime + usage.ru_stime


def _poll_wait(remaining):
    """Seconds to wait for a child's output: to its deadline, at most :data:`_CPU_POLL`; once
    past it (a stretched guard), :data:`_CPU_POLL`, not a busy loop."""
    return min(remaining, _CPU_POLL) if remaining > 0 else _CPU_POLL


def _over_limit(pid, limits, deadline, stretch=False):
    """Why a running child is to be stopped (past ``limits["cpu"]`` seconds of its CPU
    time, or its wall-clock ``deadline``), None while it is within both.

    ``stretch``: past the deadline, a child that is runnable (computing, or starved of CPU
    on a loaded machine) goes on, up to ``protocol.WALL_STRETCH`` times its guard: its CPU
    limit stops it if it computes forever, so the load does not turn a slow mutant's verdict
    into a timeout. A child that waits (sleeps, blocks) is stopped at the deadline."""
    if protocol.cpu_seconds(pid) > limits["cpu"]:
        return "stopped at its CPU limit (%.2f s)" % limits["cpu"]
    now = time.monotonic()
    if now >= deadline:
        stretched = deadline + (protocol.WALL_STRETCH - 1) * limits["wall"]
        if stretch and now < stretched and protocol.runnable(pid):
            return None
        return "stopped by its wall-clock guard (%.1f s) while waiting" % limits["wall"]
    return None


def _ended(status):
    if status is None:
        return "overran its time"
    if os.WIFSIGNALED(status):
        return "was killed by signal %d" % os.WTERMSIG(status)
    return "ended without a report (exit status %d)" % os.WEXITSTATUS(status)


def _verdict(entry, status):
    """The zygote's verdict: the child's exit status; its own words only name the test."""
    item = entry["item"]
    result = {"id": item["id"], "status": "killed", "killed_by": None, "tests": len(item["nodeids"])}
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        result["status"] = "survived"
        return result
    try:
        said = json.loads(entry["data"].decode("utf-8"))
    except ValueError:
        said = None
    if isinstance(said, dict) and isinstance(said.get("failed"), str):
        result["killed_by"] = said["failed"][:MESSAGE_CHARS]
        if isinstance(said.get("detail"), str):
            result["detail"] = said["detail"][:MESSAGE_CHARS]
    elif os.WIFSIGNALED(status):
        result["detail"] = "the run was killed by signal %d" % os.WTERMSIG(status)
    else:
        result["detail"] = "the run ended with exit status %d" % os.WEXITSTATUS(status)
    return result


def _apply_span(source, variant):
    return source[: variant["start"]] + variant["replacement"] + source[variant["end"] :]


def _fork(body):
    """Fork a child that runs ``body(write_fd)`` in its own process group; (pid, read_fd)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            os.setpgid(0, 0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            body(write_fd)
        finally:
            os._exit(70)
    os.close(write_fd)
    return pid, read_fd


# --------------------------------------------------------------------------- variant child


def _variant_main(server, slot, source, nodeids, stop_first, write_fd):
    """Run the selected tests with ``source`` as the focal file on disk; exit 0 when all pass."""
    gc.disable()  # a short life: collecting would only copy pages shared with the zygote
    config = server.config
    directory = _build_slot(server, slot, source)
    os.chdir(directory)
    _set_path(server.root, directory, config["python_path"])
    sys.dont_write_bytecode = True
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    with open(INI_NAME, "w", encoding="utf-8") as fh:
        fh.write("[pytest]\n")
    plugin = _Selection(nodeids)
    args = [
        os.path.join(directory, config["test_path"]),
        "-q",
        "-c",
        os.path.join(directory, INI_NAME),
        "--rootdir",
        directory,
        "--tb=short",
        *_pytest_plugin_args(config),
    ] + (["-x"] if stop_first else [])
    code = 1
    try:
        code = _run_pytest(server.pytest_config, args, plugin)
    finally:
        said = {
            "passed": [n for n in nodeids if plugin.outcomes.get(n) == "passed"],
            "failed": plugin.failed,
            "detail": plugin.detail,
        }
        try:
            protocol.write_all(write_fd, json.dumps(said).encode("utf-8", "surrogatepass"))
        except (OSError, ValueError, TypeError):
            pass
        os._exit(0 if code == 0 and plugin.ran and plugin.failed is None else 1)


def _build_slot(server, slot, source):
    """The slot's directory, rebuilt from the snapshot, the focal file holding ``source``."""
    base = os.path.join(server.root, SLOTS)
    directory = os.path.join(base, str(slot))
    if os.path.lexists(directory):
        shutil.rmtree(directory, onerror=_force_remove)
    if os.path.lexists(directory):  # a test made it unremovable: another name, same form
        directory = os.path.join(base, "%d-%d" % (slot, os.getpid()))
    focal = server.config["focal_file"]
    for relative, data in server.snapshot.items():
        if relative != focal:
            _write(os.path.join(directory, relative), data)
    _write(os.path.join(directory, focal), source.encode("utf-8", "surrogatepass"))
    return directory


def _force_remove(function, path, excinfo):
    try:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        function(path)
    except OSError:
        pass


def _write(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def _set_path(root, directory, python_path):
    """``sys.path`` without the run directory, with the slot's entries in front."""

    def inside(entry):
        full = os.path.realpath(entry or ".")
        return full == root or full.startswith(root + os.sep)

    sys.path[:] = [p for p in sys.path if not inside(p)]
    for entry in reversed(python_path):
        sys.path.insert(0, os.path.normpath(os.path.join(directory, entry)))


_QUIET_PLUGINS = (
    "-p",
    "no:cacheprovider",
    "-p",
    "no:faulthandler",
    "-p",
    "no:unraisableexception",
    "-p",
    "no:threadexception",
    "-p",
    "no:junitxml",
    "-p",
    "no:pastebin",
    "-p",
    "no:stepwise",
)
"""Plugins a variant child does without: they report, they do not change outcomes (the
unraisable-exception one runs five full collections of the heap per session)."""


def _pytest_plugin_args(config):
    args = list(_QUIET_PLUGINS)
    for name in config.get("plugins", []):
        args += ["-p", name]
    return args


def _prepared_pytest_config(config):
    """pytest's configuration object with its plugins registered, made once in the zygote.

    Registering pytest's thirty plugins is half of what a variant child would spend
    before its first test; made here, before any repository or test code is imported
    (nothing in it depends on them: the arguments are parsed, the ini file and the
    conftest files read, in each child). None when pytest's internals differ.
    """
    try:
        from _pytest.config import get_config

        prepared = get_config(_pytest_plugin_args(config))
        hook = prepared.pluginmanager.hook
        return prepared if hasattr(hook, "pytest_cmdline_parse") and hasattr(hook, "pytest_cmdline_main") else None
    except Exception:
        return None


def _run_pytest(prepared, args, plugin):
    """Run pytest with ``args`` and ``plugin`` in this child: its exit code."""
    if prepared is None:
        import pytest

        return pytest.main(args, plugins=[plugin])
    manager = prepared.pluginmanager
    manager.register(plugin, "gym_repost_selection")
    config = manager.hook.pytest_cmdline_parse(pluginmanager=manager, args=args)
    try:
        return config.hook.pytest_cmdline_main(config=config)
    finally:
        config._ensure_unconfigure()


class _Selection:
    """Runs only the selected tests, in their order; notes outcomes and the first failure."""

    def __init__(self, nodeids):
        self.nodeids = list(nodeids)
        self.wanted = set(nodeids)
        self.outcomes = {}
        self.failed = None
        self.detail = None
        self.ran = False

    def pytest_collection_modifyitems(self, session, config, items):
        chosen = [item for item in items if item.nodeid in self.wanted]
        dropped = [item for item in items if item.nodeid not in self.wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = chosen
        self.ran = len(chosen) == len(self.wanted)
        if not self.ran and self.failed is None:
            missing = sorted(self.wanted - {item.nodeid for item in chosen})
            self.failed = missing[0]
            self.detail = "the test was not collected"

    def pytest_collectreport(self, report):
        if report.failed and self.failed is None:
            self.failed = report.nodeid or "the test file"
            self.detail = "collecting the tests failed: " + summary_line(longrepr_text(report.longrepr))

    def pytest_runtest_logreport(self, report):
        previous = self.outcomes.get(report.nodeid, "passed")
        if report.failed:
            self.outcomes[report.nodeid] = "failed"
            if self.failed is None:
                self.failed = report.nodeid
        elif report.skipped and previous == "passed":
            self.outcomes[report.nodeid] = "skipped"
        else:
            self.outcomes.setdefault(report.nodeid, "passed")


def decode_event(line):
    try:
        event = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
