"""Run a test file against its focal file: outcomes, coverage and mutants (inside the sandbox).

Its configuration and a one-time token come through the protocol of
:mod:`gym_repost.programs`. Standard library, pytest and coverage.py only.

The rule: nothing that decides a reward is computed in a process that has run the test
file's code. A process that ran it is trusted only where lying gains nothing an honest
test could not get. Five kinds of process:

* the *monitor* (this program's first process) reads the configuration, makes itself
  non-dumpable (no process of the sandbox's user can ptrace it or open its descriptors
  through ``/proc``), forks the zygote, forks the session, and only then reads the token,
  so no other process ever holds it. It never runs test code. It reads the session's
  events, kills the session when it overruns (naming the test that was running), asks
  the zygote for the coverage and the verdicts, and writes the report as its result,
  followed by the token's line.
* the *zygote*, forked before any test code runs: it imports pytest and coverage.py (never
  the focal module, never the test file) and keeps in memory a snapshot of the run
  directory as it was before the session started. It forks the replayer and the variant
  children below, and reports what it observes of them (exit statuses, deadlines).
* the *session* runs pytest in-process on the test file, with an alarm per test and the
  repository's own pytest configuration ignored. It reports each test's outcome (a test
  may claim to pass: an honest test with no assertion passes anyway) and *records* every
  call from outside the focal file into a function of the focal file (a profile hook),
  with its arguments, ``self`` and closure values pickled at call time, tagged with the
  test running (``""`` while collecting). It measures nothing.
* the *replayer*, forked from the zygote, imports the focal module fresh from the
  snapshot (never from disk, never the test file) under coverage.py with branch
  measurement, replays each recorded call (an alarm per call; exceptions are fine) with a
  coverage context per test, and reports line and branch coverage of the focal file over
  the tests that passed plus import time, and which test ran which line. Arguments are
  unpickled by a restricted unpickler: only plain values, classes and functions of the
  repository's own modules, and a few standard-library value types; anything else (a
  class of the test file, a lambda, a mock) makes the call *not replayable*, counted and
  reported, never guessed. A forged record is a call a test could have made.
* one *variant child* per mutant and per control, forked from the zygote, in a slot
  directory (``jobs`` of them, rebuilt from the snapshot for every child) where the focal
  file ON DISK is the variant's source: it imports the focal module and the test file
  fresh from disk and runs, through pytest, the tests selected for the variant (those
  that passed in the session and in the calibration run and that ran the variant's line
  in the replay; every one when the line ran at import time), stopping at the first
  failure. The verdict is its exit status, observed by the zygote: 0 survived, anything
  else killed, killed at its deadline a timeout. The deadline is a multiple of the tests'
  time in the session plus a floor of three times the calibration run's wall time. The
  variants are anonymous spans of the focal source in an order the host shuffled: the
  mutants, each disguised by an equivalent edit beside the mutation, and the *decoys*
  (equivalent rewrites made by the host, which alone knows which is which; a test that
  fails on one detects code, not behaviour, and the host scores its mutation 0). The
  *calibration* child runs the unmutated source in the same setup first; a test that
  does not pass there does not count for mutants.
"""

import gc
import json
import os
import pickle
import re
import select
import shutil
import signal
import sys
import time
import types

try:
    from . import protocol
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef]

LOG_NAME = ".gym_repost_session.log"
INI_NAME = ".gym_repost_pytest.ini"
SLOTS = ".gym_repost_slots"
_LONGREPR = 2000
_MESSAGE = 300
_MAX_RECORD = 256 * 1024
"""Bytes of one pickled call; a larger one is not replayable."""
_MAX_CALLS_PER_TEST = 2000
_MAX_RECORDS_BYTES = 48 * 1024 * 1024
"""Bytes of recorded calls the monitor keeps; later ones are counted as not replayable."""
_GENERATOR_ITEMS = 100000
_READY_TIMEOUT = 60.0
_TIMEOUT_RETRIES = 2
"""A variant that overruns its deadline runs again with twice the time, this many times,
before it is a timeout: every variant alike (the zygote cannot tell a decoy, on which a
timeout means detection, from a mutant)."""


# --------------------------------------------------------------------------- monitor


def _missing_tools():
    """The monitor's own check that pytest and coverage exist, before any test code runs."""
    import importlib.util

    return [name for name in ("pytest", "coverage") if importlib.util.find_spec(name) is None]


def _undumpable():
    """Make this process (and what it forks) non-dumpable: no ptrace, no /proc/PID/fd by peers."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError, ImportError):
        pass


def main():
    config = protocol.read_config(token=True)
    missing = _missing_tools()
    if missing:
        report = {
            "status": "error",
            "infrastructure": True,
            "message": "the sandbox's Python lacks pytest or coverage: no %s" % ", ".join(missing),
        }
        protocol.write_result(report, protocol.read_token())
        os._exit(0)
    _undumpable()
    zygote = _Zygote.start(config)
    if zygote.pid is None:  # before any test code ran: the sandbox's fault, not the test file's
        report = {
            "status": "error",
            "infrastructure": True,
            "message": "the process that runs the mutants and the coverage replay did not start",
        }
        protocol.write_result(report, protocol.read_token())
        os._exit(0)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        protocol.drop_token()
        zygote.forget()
        os.close(read_fd)
        _session_main(config, write_fd)
    os.close(write_fd)
    token = protocol.read_token()
    report = _monitor(pid, read_fd, config, zygote)
    zygote.stop()
    protocol.write_result(report, token, compress=True)
    os._exit(0)


def _new_state():
    return {
        "status": None,
        "message": "",
        "tests": [],
        "collection_errors": [],
        "running": None,
        "coverage": None,
        "mutants": [],
        "mutation_status": "not run",
        "mutation_message": "",
        "pytest_exit": None,
        "infrastructure": False,
        "calls": {"recorded": 0, "replayed": 0, "not_replayable": 0, "raised": 0},
        "calibration": None,
    }


def _monitor(pid, fd, config, zygote):
    state = _new_state()
    session = {"records": [], "bytes": 0, "durations": {}, "unpicklable": 0}
    _watch_session(pid, fd, config, state, session)
    _reap(pid, state)
    _kill_group(pid)  # whatever the session left running
    state["session_output"] = _log_tail()
    if state["status"] != "completed":
        return state
    passing = [t["nodeid"] for t in state["tests"] if t.get("outcome") == "passed"]
    contexts = _replay(zygote, config, state, session, passing)
    if config["variants"] and passing:
        if contexts is None:  # no test can be given its mutants: none is run, none survives by it
            state["mutation_status"] = "crashed"
            state["mutation_message"] = "the coverage replay failed, so no mutant was run"
        else:
            _mutation_phase(zygote, config, state, session, passing, contexts)
    return state


def _watch_session(pid, fd, config, state, session):
    deadline = time.monotonic() + config["timeout"]
    buffered = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _kill_group(pid)
            if state["status"] is None:
                state["status"] = "timeout"
                state["message"] = "the test file did not finish within %g s" % config["timeout"]
                if state["running"]:
                    state["message"] += " (%s was running)" % state["running"]
            return
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            event = _decode(line)
            if event is not None and _apply_event(state, session, event) == "done":
                # What is left (pytest's session finish) cannot change the results.
                _kill_group(pid)
                return


def _decode(line):
    try:
        event = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _apply_event(state, session, event):
    kind = event.get("event")
    if kind == "test_start":
        state["running"] = _str(event.get("nodeid"))
    elif kind == "test" and isinstance(event.get("test"), dict):
        test = event["test"]
        state["tests"].append(test)
        state["running"] = None
        duration = event.get("duration")
        if isinstance(duration, (int, float)) and isinstance(test.get("nodeid"), str):
            session["durations"][test["nodeid"]] = max(0.0, min(float(duration), 1e6))
    elif kind == "calls":
        _keep_calls(session, event)
    elif kind == "collection_error":
        state["collection_errors"].append(event.get("error"))
    elif kind == "baseline":
        state["pytest_exit"] = event.get("pytest_exit")
        state["status"] = "completed"
    elif kind == "done":
        return "done"
    elif kind == "error" and state["status"] is None:
        state["status"] = "error"
        state["message"] = _str(event.get("message"))
        # Never "infrastructure": the session runs the test code, which can write any event;
        # the monitor checks the sandbox's Python itself (main) before the session starts.
    return None


def _str(value):
    return value if isinstance(value, str) else ""


def _keep_calls(session, event):
    nodeid, calls = event.get("nodeid"), event.get("calls")
    lost = event.get("unpicklable")
    if isinstance(lost, int) and 0 <= lost < 1 << 40:
        session["unpicklable"] += lost
    if not isinstance(nodeid, str) or not isinstance(calls, list):
        return
    for call in calls:
        if not (
            isinstance(call, list)
            and len(call) == 3
            and isinstance(call[0], str)
            and type(call[1]) is int
            and isinstance(call[2], str)
        ):
            continue
        size = len(call[0]) + len(call[2])
        if session["bytes"] + size > _MAX_RECORDS_BYTES:
            session["unpicklable"] += 1
            continue
        session["bytes"] += size
        session["records"].append([nodeid] + call)


def _reap(pid, state):
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return
    if state["status"] is None:
        state["status"] = "crashed"
        if os.WIFSIGNALED(status):
            how = "was killed by signal %d" % os.WTERMSIG(status)
        else:
            how = "ended early (exit status %d)" % os.WEXITSTATUS(status)
        where = " while %s ran" % state["running"] if state["running"] else ""
        state["message"] = "the test run %s%s" % (how, where)


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _log_tail():
    try:
        with open(LOG_NAME, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 3000))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _replay(zygote, config, state, session, passing):
    """Coverage from the replayer; the lines each test ran (None when it failed)."""
    reply = zygote.ask({"cmd": "replay", "records": session["records"], "passing": passing}, config["timeout"])
    calls = state["calls"]
    calls["recorded"] = len(session["records"]) + session["unpicklable"]
    calls["not_replayable"] = session["unpicklable"]
    if not isinstance(reply, dict) or "coverage" not in reply:
        why = reply.get("error") if isinstance(reply, dict) else None
        state["coverage"] = {"error": "the coverage replay failed: %s" % (why or "it ended without a report")}
        return None
    state["coverage"] = reply["coverage"]
    for key in ("replayed", "raised"):
        calls[key] = reply.get(key, 0)
    calls["not_replayable"] += reply.get("not_replayable", 0)
    return {int(line): set(names) for line, names in reply.get("contexts", {}).items()}


def _mutation_phase(zygote, config, state, session, passing, contexts):
    deadline = time.monotonic() + config["mutation_timeout"]
    state["mutation_status"] = "running"
    calibration = zygote.ask({"cmd": "calibrate", "nodeids": passing}, config["mutation_timeout"])
    if not isinstance(calibration, dict) or "passed" not in calibration:
        state["mutation_status"] = "crashed"
        state["mutation_message"] = "the calibration run did not report"
        return
    counted = set(calibration["passed"]) & set(passing)
    state["calibration"] = {"failed": [n for n in passing if n not in counted], "seconds": calibration.get("seconds")}
    floor = max(config["timeout_floor"], 3 * float(calibration.get("seconds") or 0.0))
    order = [n for n in passing if n in counted]
    plan = []
    for variant in config["variants"]:
        nodeids = _selected(variant, contexts, order)
        if not nodeids:
            state["mutants"].append({"id": variant["id"], "status": "uncovered", "killed_by": None, "tests": 0})
            continue
        seconds = config["timeout_factor"] * sum(session["durations"].get(n, 0.0) for n in nodeids) + floor
        plan.append({"id": variant["id"], "nodeids": nodeids, "seconds": seconds})
    if plan:
        _run_plan(zygote, plan, config, state, deadline)
    if state["mutation_status"] == "running":
        state["mutation_status"] = "completed"


def _selected(variant, contexts, order):
    names = set(contexts.get(variant["line"], ()))
    at_import = any("" in contexts.get(line, ()) for line in [variant["line"], *variant.get("holders", [])])
    return [n for n in order if at_import or n in names]


def _run_plan(zygote, plan, config, state, deadline):
    zygote.send({"cmd": "variants", "plan": plan, "jobs": max(1, int(config["jobs"]))})
    expected = len(plan)
    while expected:
        reply = zygote.receive(deadline - time.monotonic())
        if reply is None:
            state["mutation_status"] = "timeout" if time.monotonic() >= deadline else "crashed"
            return
        if reply.get("reply") == "variant" and isinstance(reply.get("verdict"), dict):
            state["mutants"].append(reply["verdict"])
            expected -= 1


class _Zygote:
    """The monitor's handle on the zygote: a process and two pipes of JSON lines."""

    def __init__(self, pid, commands, replies):
        self.pid, self.commands, self.replies = pid, commands, replies
        self.buffered = b""

    @classmethod
    def start(cls, config):
        command_r, command_w = os.pipe()
        reply_r, reply_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            protocol.drop_token()
            os.close(command_w)
            os.close(reply_r)
            _zygote_main(config, command_r, reply_w)
        os.close(command_r)
        os.close(reply_w)
        zygote = cls(pid, command_w, reply_r)
        ready = zygote.receive(_READY_TIMEOUT)
        if not ready or ready.get("reply") != "ready":
            _kill_group(pid)
            os.waitpid(pid, 0)
            zygote.pid = None
        return zygote

    def forget(self):
        """In the session: close the pipes to the zygote before any test code runs."""
        for fd in (self.commands, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass

    def send(self, message):
        if self.pid is None:
            return False
        try:
            protocol.write_all(self.commands, (json.dumps(message) + "\n").encode("utf-8", "surrogatepass"))
        except OSError:
            return False
        return True

    def receive(self, timeout):
        end = time.monotonic() + max(0.0, timeout)
        while b"\n" not in self.buffered:
            remaining = end - time.monotonic()
            if remaining <= 0 or self.pid is None:
                return None
            ready, _, _ = select.select([self.replies], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.replies, 1 << 20)
            if not chunk:
                self.pid = None
                return None
            self.buffered += chunk
        line, self.buffered = self.buffered.split(b"\n", 1)
        return _decode(line)

    def ask(self, message, timeout):
        return self.receive(timeout) if self.send(message) else None

    def stop(self):
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)  # it kills its children, then exits
        except OSError:
            pass
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            if done:
                return
            time.sleep(0.01)
        _kill_group(self.pid)
        os.waitpid(self.pid, 0)


# --------------------------------------------------------------------------- zygote


def _zygote_main(config, commands, replies):
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
                command = _decode(line)
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
            _kill_group(pid)
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
        pid, fd = _fork(lambda write_fd: _replayer_main(self, command, write_fd))
        data, status, _ = self._collect(pid, fd, time.monotonic() + self.config["timeout"])
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
        data, status, _ = self._collect(pid, fd, started + self.config["mutation_timeout"])
        seconds = time.monotonic() - started
        try:
            reply = json.loads(data.decode("utf-8"))
        except ValueError:
            reply = None
        passed = reply.get("passed") if isinstance(reply, dict) else None
        if not isinstance(passed, list):
            return {"passed": [], "seconds": seconds, "detail": "the calibration run %s" % _ended(status)}
        return {"passed": [n for n in passed if isinstance(n, str)], "seconds": seconds}

    def _variants(self, command):
        by_id = {v["id"]: v for v in self.config["variants"]}
        pending = list(command["plan"])
        jobs = command["jobs"]
        free = list(range(jobs))
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
                    "deadline": time.monotonic() + item["seconds"],
                }
            self._wait(running, free, pending)

    def _wait(self, running, free, pending):
        wait = max(0.0, min(entry["deadline"] for entry in running.values()) - time.monotonic())
        ready, _, _ = select.select(list(running), [], [], wait)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                running[fd]["data"] += chunk
                continue
            entry = running.pop(fd)
            os.close(fd)
            _kill_group(entry["pid"])
            _, status = os.waitpid(entry["pid"], 0)
            self.children.pop(entry["pid"], None)
            free.append(entry["slot"])
            self.reply({"reply": "variant", "verdict": _verdict(entry, status)})
        now = time.monotonic()
        for fd in [fd for fd, entry in running.items() if entry["deadline"] <= now]:
            entry = running.pop(fd)
            _kill_group(entry["pid"])
            os.close(fd)
            os.waitpid(entry["pid"], 0)
            self.children.pop(entry["pid"], None)
            free.append(entry["slot"])
            item = entry["item"]
            attempt = item.get("attempt", 0)
            if attempt < _TIMEOUT_RETRIES:  # a load spike is not a timeout: again, twice the time
                pending.insert(0, dict(item, attempt=attempt + 1, seconds=2 * item["seconds"]))
                continue
            self.reply(
                {
                    "reply": "variant",
                    "verdict": {
                        "id": item["id"],
                        "status": "timeout",
                        "killed_by": None,
                        "tests": len(item["nodeids"]),
                    },
                }
            )

    def _collect(self, pid, fd, deadline):
        """Read a child's pipe to its end (or the deadline), then reap it."""
        self.children[pid] = True
        data, timed_out = b"", False
        while True:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                timed_out = True
                break
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            data += chunk
        _kill_group(pid)
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        self.children.pop(pid, None)
        return data, (None if timed_out else status), timed_out


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
        result["killed_by"] = said["failed"][:_MESSAGE]
        if isinstance(said.get("detail"), str):
            result["detail"] = said["detail"][:_MESSAGE]
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
            self.detail = "collecting the tests failed: " + _summary_line(_text(report.longrepr))

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


# --------------------------------------------------------------------------- replayer


class _NotReplayable(Exception):
    """The recorded call cannot be rebuilt here (an object of the test file, a lambda...)."""


_SAFE_GLOBALS = {
    "builtins": {
        "int",
        "float",
        "complex",
        "str",
        "bytes",
        "bytearray",
        "list",
        "dict",
        "set",
        "frozenset",
        "tuple",
        "bool",
        "slice",
        "range",
        "object",
        "type",
        "NoneType",
        "Ellipsis",
        "NotImplemented",
    },
    "copyreg": {"_reconstructor"},
    "collections": {"OrderedDict", "defaultdict", "deque", "Counter"},
    "datetime": {"date", "time", "datetime", "timedelta", "timezone"},
    "decimal": {"Decimal"},
    "fractions": {"Fraction"},
    "uuid": {"UUID"},
    "pathlib": {"Path", "PosixPath", "PurePath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    "re": {"_compile"},
    "enum": set(),
    "types": {"SimpleNamespace"},
}


class _Unpickler(pickle.Unpickler):
    """Only plain values, a few standard value types, and what the repository defines."""

    def __init__(self, data, repository_modules):
        import io

        super().__init__(io.BytesIO(data))
        self.repository_modules = repository_modules

    def find_class(self, module, name):
        if name in _SAFE_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        if module in self.repository_modules:
            value = sys.modules.get(module)
            for part in name.split("."):
                value = getattr(value, part, None)
            if (
                isinstance(value, (type, types.FunctionType))
                and getattr(value, "__module__", None) in self.repository_modules
            ):
                return value
        raise _NotReplayable("%s.%s" % (module, name))

    def persistent_load(self, pid):
        raise _NotReplayable("a persistent id")


class _SnapshotFinder:
    """Imports the repository's modules from the snapshot (never from disk)."""

    def __init__(self, root, snapshot, roots, exclude):
        self.root = root
        self.sources = {}
        for relative, data in snapshot.items():
            if relative.endswith(".py") and relative not in exclude:
                self.sources[relative] = data
        self.roots = roots
        self.packages = set()
        for relative in self.sources:
            parts = relative.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                self.packages.add("/".join(parts[:i]))
        self.modules = set()

    def find_spec(self, name, path=None, target=None):
        import importlib.util

        base = name.replace(".", "/")
        for entry in self.roots:
            prefix = (entry.strip("/") + "/") if entry.strip("/.") else ""
            for relative, package in ((prefix + base + "/__init__.py", True), (prefix + base + ".py", False)):
                if relative in self.sources:
                    self.modules.add(name)
                    full = os.path.join(self.root, relative)
                    spec = importlib.util.spec_from_loader(
                        name, _SnapshotLoader(self.sources[relative], full), origin=full, is_package=package
                    )
                    spec.has_location = True
                    if package:
                        spec.submodule_search_locations = [os.path.dirname(full)]
                    return spec
            if prefix + base in self.packages:  # a namespace package of the repository
                import importlib.machinery

                self.modules.add(name)
                spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
                spec.submodule_search_locations = [os.path.join(self.root, prefix + base)]
                return spec
        return None


class _SnapshotLoader:
    def __init__(self, data, path):
        self.data, self.path = data, path

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        code = compile(self.data, self.path, "exec", dont_inherit=True)
        exec(code, module.__dict__)

    def get_source(self, name):
        return self.data.decode("utf-8", "replace")


class _ReplayTimeout(BaseException):
    """Raised in a replayed call that overran its time (by the alarm)."""


def _replay_alarm(signum, frame):
    raise _ReplayTimeout()


def _replayer_main(server, command, write_fd):
    """Measure the coverage of the recorded calls in a process that never ran test code."""
    config, root = server.config, server.root
    os.chdir(root)
    focal = os.path.join(root, config["focal_file"])
    sys.path[:] = [p for p in sys.path if p and not os.path.realpath(p).startswith(root)]
    finder = _SnapshotFinder(root, server.snapshot, config["python_path"], {config["test_path"]})
    sys.meta_path.insert(0, finder)
    sys.dont_write_bytecode = True
    import coverage

    _quiet_coverage_start(coverage)
    cov = coverage.Coverage(branch=True, data_file=None, include=[focal], config_file=False)
    counts = {"replayed": 0, "not_replayable": 0, "raised": 0}
    codes = _code_index(config["focal_source"], focal)
    real_exit = os._exit
    os._exit = _no_exit
    signal.signal(signal.SIGALRM, _replay_alarm)
    cov.start()
    try:
        try:
            module = __import__(config["focal_module"], fromlist=["_"])
        except BaseException:
            module = None
        for nodeid, qualname, firstline, blob in command["records"]:
            cov.switch_context(nodeid)
            counts[_replay_call(module, codes, qualname, firstline, blob, finder.modules, config)] += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        cov.stop()
        os._exit = real_exit
    reply = {
        "coverage": _analysis(cov, focal, config["focal_source"], command["passing"]),
        "contexts": _contexts(cov, focal),
        **counts,
    }
    protocol.write_all(write_fd, json.dumps(reply).encode("utf-8", "surrogatepass"))
    os._exit(0)


def _no_exit(status=0):
    raise SystemExit(status)


def _code_index(source, filename):
    """Every function code object of the focal source, by (qualified name, first line)."""
    index = {}
    try:
        stack = [compile(source, filename, "exec", dont_inherit=True)]
    except (SyntaxError, ValueError):
        return index
    while stack:
        code = stack.pop()
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                index[(getattr(const, "co_qualname", const.co_name), const.co_firstlineno)] = const
                stack.append(const)
    return index


def _replay_call(module, codes, qualname, firstline, blob, repository_modules, config):
    code = codes.get((qualname, firstline))
    if module is None or code is None:
        return "not_replayable"
    try:
        import base64

        args, kwargs, free = _Unpickler(base64.b64decode(blob), repository_modules).load()
        cells = tuple(types.CellType(free[name]) if name in free else types.CellType() for name in code.co_freevars)
        function = types.FunctionType(code, vars(module), code.co_name, None, cells or None)
    except BaseException:
        return "not_replayable"
    signal.setitimer(signal.ITIMER_REAL, config["test_timeout"])
    try:
        result = function(*args, **kwargs)
        _drain(result, code)
    except BaseException:
        return "raised"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return "replayed"


_GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async generator


def _drain(result, code):
    if not code.co_flags & _GENERATOR_FLAGS:
        return
    if code.co_flags & 0x20:
        for index, _ in enumerate(result):
            if index >= _GENERATOR_ITEMS:
                break
    elif hasattr(result, "send"):
        for _ in range(_GENERATOR_ITEMS):
            result.send(None)


def _quiet_coverage_start(coverage):
    """Skip the call-stack snapshot coverage.py takes for its debug output at start.

    It reads the source of every frame on the stack (~40 ms), for a message we never show.
    """
    try:
        import coverage.collector

        coverage.collector.short_stack = lambda *args, **kwargs: ""
    except (ImportError, AttributeError):
        pass


def _analysis(cov, focal, source, passing):
    """Lines and branches of the focal file run by the passing tests or at import time.

    The focal file is analysed from its text in memory (the file on disk may have been
    changed by the test code).
    """
    try:
        from coverage.parser import PythonParser
        from coverage.python import PythonFileReporter

        data = cov.get_data()
        data.set_query_contexts(["^$"] + ["^%s$" % re.escape(nodeid) for nodeid in passing])
        reporter = PythonFileReporter(focal, cov)
        reporter._source = source
        reporter._parser = PythonParser(text=source, filename=focal, exclude=cov._exclude_regex("exclude"))
        reporter._parser.parse_source()
        if focal not in data.measured_files():
            data.touch_file(focal)
        analysis = cov._analyze(focal, file_reporter=reporter)
        executed = sorted(analysis.executed)
        missing = sorted(analysis.missing)
        return {
            "executed_lines": executed,
            "missing_lines": missing,
            "executed_branches": _pairs(analysis.executed_branch_arcs()),
            "missing_branches": _pairs(analysis.missing_branch_arcs()),
        }
    except BaseException as exc:
        return {"error": "%s: %s" % (type(exc).__name__, str(exc)[:_MESSAGE])}


def _pairs(arcs):
    return sorted([a, b] for a, ends in arcs.items() for b in ends)


def _contexts(cov, focal):
    data = cov.get_data()
    data.set_query_contexts(None)
    try:
        by_line = data.contexts_by_lineno(focal)
    except BaseException:
        return {}
    return {str(line): sorted(names) for line, names in by_line.items()}


# --------------------------------------------------------------------------- session


class _Emitter:
    """Newline-delimited JSON events to the monitor."""

    def __init__(self, fd):
        self.fd = fd

    def __call__(self, event):
        protocol.write_all(self.fd, (json.dumps(event) + "\n").encode("utf-8", "surrogatepass"))


def _session_main(config, fd):
    emit = _Emitter(fd)
    try:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        _session(config, emit)
    except BaseException as exc:
        try:
            emit({"event": "error", "message": "%s: %s" % (type(exc).__name__, str(exc)[:_MESSAGE])})
        except BaseException:
            pass
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(0)


def _session(config, emit):
    root = os.getcwd()
    for entry in reversed(config["python_path"]):
        sys.path.insert(0, os.path.normpath(os.path.join(root, entry)))
    import pytest

    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    with open(INI_NAME, "w", encoding="utf-8") as fh:
        fh.write("[pytest]\n")
    recorder = _Recorder(os.path.realpath(os.path.join(root, config["focal_file"])), emit)
    plugin = _Plugin(config, emit, recorder, pytest)
    args = [config["test_path"], "-q", "--tb=short", "-c", INI_NAME, "--rootdir", root, "-p", "no:cacheprovider"]
    for name in config.get("plugins", []):
        args += ["-p", name]
    recorder.start()
    try:
        code = pytest.main(args, plugins=[plugin])
    finally:
        recorder.stop()
    if not plugin.reported:
        recorder.flush()
        emit({"event": "baseline", "pytest_exit": int(code)})
        emit({"event": "done"})


class _Recorder:
    """Records the calls into the focal file's functions from outside it (a profile hook)."""

    def __init__(self, focal, emit):
        self.focal = focal
        self.emit = emit
        self.nodeid = ""
        self.calls = []
        self.seen = set()
        self.unpicklable = 0
        self.focal_codes = {}
        self.starts = {}

    def start(self):
        import threading

        sys.setprofile(self.profile)
        threading.setprofile(self.profile)

    def stop(self):
        import threading

        sys.setprofile(None)
        threading.setprofile(None)

    def _is_focal(self, code):
        known = self.focal_codes.get(code)
        if known is None:
            try:
                known = os.path.realpath(code.co_filename) == self.focal
            except (TypeError, ValueError):
                known = False
            self.focal_codes[code] = known
        return known

    def profile(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if not self._is_focal(code) or code.co_name == "<module>":
            return
        caller = frame.f_back
        if caller is not None and self._is_focal(caller.f_code):
            return
        if code.co_flags & _GENERATOR_FLAGS and frame.f_lasti > self._start(code):
            return  # a generator resumed, not called
        self._record(frame, code)

    def _start(self, code):
        start = self.starts.get(code)
        if start is None:
            import dis

            start = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
            self.starts[code] = start
        return start

    def _record(self, frame, code):
        if len(self.calls) >= _MAX_CALLS_PER_TEST:
            self.unpicklable += 1
            return
        names = code.co_varnames
        local = frame.f_locals
        positional = code.co_argcount
        kwonly = code.co_kwonlyargcount
        try:
            args = [local[n] for n in names[:positional]]
            kwargs = {n: local[n] for n in names[positional : positional + kwonly]}
            at = positional + kwonly
            if code.co_flags & 0x04:  # *args
                args.extend(local[names[at]])
                at += 1
            if code.co_flags & 0x08:  # **kwargs
                kwargs.update(local[names[at]])
            free = {n: local[n] for n in code.co_freevars if n in local}
            blob = pickle.dumps((tuple(args), kwargs, free), protocol=4)
        except BaseException:
            self.unpicklable += 1
            return
        if len(blob) > _MAX_RECORD:
            self.unpicklable += 1
            return
        key = (getattr(code, "co_qualname", code.co_name), code.co_firstlineno, blob)
        if key in self.seen:
            return
        self.seen.add(key)
        import base64

        self.calls.append([key[0], key[1], base64.b64encode(blob).decode("ascii")])

    def switch(self, nodeid):
        self.flush()
        self.nodeid = nodeid

    def flush(self):
        if self.calls or self.unpicklable:
            self.emit({"event": "calls", "nodeid": self.nodeid, "calls": self.calls, "unpicklable": self.unpicklable})
        self.calls, self.seen, self.unpicklable = [], set(), 0


class _TestTimeout(Exception):
    """Raised in a test that overran its time (by the alarm)."""


def _alarm(signum, frame):
    raise _TestTimeout("the test took longer than its time limit")


class _Plugin:
    """The session's pytest plugin: alarms, outcomes and the recorder's test of the moment."""

    def __init__(self, config, emit, recorder, pytest):
        self.config = config
        self.emit = emit
        self.recorder = recorder
        self.pytest = pytest
        self.outcomes = {}
        self.reported = False

    def pytest_collectreport(self, report):
        if report.failed:
            error = {
                "nodeid": report.nodeid or self.config["test_path"],
                "longrepr": _text(report.longrepr)[-_LONGREPR:],
            }
            error["message"] = _summary_line(error["longrepr"])
            self.emit({"event": "collection_error", "error": error})

    def pytest_runtest_protocol(self, item, nextitem):
        self.emit({"event": "test_start", "nodeid": item.nodeid})
        self.recorder.switch(item.nodeid)
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, self.config["test_timeout"])
        started = time.perf_counter()
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            duration = time.perf_counter() - started
            self.recorder.switch("")
            outcome = self.outcomes.get(item.nodeid) or {
                "nodeid": item.nodeid,
                "outcome": "error",
                "message": "no report",
            }
            self.emit({"event": "test", "test": outcome, "duration": duration})

    def pytest_runtest_makereport(self, item, call):
        report = yield
        self._record(item.nodeid, call, report)
        return report

    def _record(self, nodeid, call, report):
        if nodeid not in self.outcomes:
            self.outcomes[nodeid] = {
                "nodeid": nodeid,
                "outcome": "passed",
                "phase": None,
                "exception": None,
                "message": "",
                "longrepr": "",
            }
        current = self.outcomes[nodeid]
        kind = _classify(call, report, self.pytest)
        if _RANK[kind] <= _RANK[current["outcome"]]:
            return
        current.update(outcome=kind, phase=report.when)
        if call.excinfo is not None:
            current["exception"] = call.excinfo.type.__name__
            current["message"] = _exception_text(call.excinfo.value)
        if report.failed:
            current["longrepr"] = _text(report.longrepr)[-_LONGREPR:]

    def pytest_runtestloop(self, session):
        try:
            return (yield)
        finally:
            self.recorder.stop()
            self.recorder.flush()
            if not self.reported:
                self.reported = True
                self.emit({"event": "baseline", "pytest_exit": None})
                self.emit({"event": "done"})


# Hook wrappers (new style) without importing pytest at module level.
for _name in ("pytest_runtest_protocol", "pytest_runtest_makereport", "pytest_runtestloop"):
    getattr(_Plugin, _name).pytest_impl = {"wrapper": True}
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3, "timeout": 4}


def _classify(call, report, pytest):
    if report.passed:
        return "passed"
    if report.skipped:
        return "skipped"
    excinfo = call.excinfo
    if excinfo is not None and excinfo.errisinstance(_TestTimeout):
        return "timeout"
    if report.when != "call":
        return "error"
    if excinfo is None or excinfo.errisinstance((AssertionError, pytest.fail.Exception)):
        return "failed"
    return "error"


def _text(longrepr):
    try:
        return str(longrepr)
    except BaseException:
        return "<unprintable report>"


def _exception_text(value):
    try:
        text = str(value)
    except BaseException:
        text = "<unprintable exception>"
    return " ".join(text.split())[:_MESSAGE]


def _summary_line(longrepr):
    lines = [ln.strip() for ln in longrepr.splitlines() if ln.strip()]
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    return (errors[-1] if errors else lines[-1] if lines else "collection failed")[:_MESSAGE]


if __name__ == "__main__":
    main()
