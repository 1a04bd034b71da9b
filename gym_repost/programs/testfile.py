"""Run a test file against its focal file: outcomes, coverage and mutants (inside the sandbox).

Its configuration and a one-time token come through the protocol of
:mod:`gym_repost.programs`. Standard library, pytest and coverage.py only.

The rule: nothing that decides a reward is computed in a process that has run the test
file's code. A process that ran it is trusted only where lying gains nothing an honest
test could not get. Five kinds of process:

* the *monitor* (this program's first process) reads the configuration, makes itself
  non-dumpable (no process of the sandbox's user can ptrace it or open its descriptors
  through ``/proc``), starts the zygote, forks the session, and only then reads the token,
  so no other process ever holds it. It never runs test code. It reads the session's
  events, kills the session when it overruns (naming the test that was running), asks
  the zygote for the coverage and the verdicts, writes the focal file of each slot the
  zygote readies, and writes the report as its result, followed by the token's line.
* the *zygote*, a fresh interpreter (``execv``, not a fork of the monitor, whose memory
  holds the focal source) started before any test code runs: it imports pytest and
  coverage.py (never the focal module, never the test file) and keeps in memory a
  snapshot of the run directory as it was before the session started, without the focal
  file. It forks the replayer and the variant children below, one at a time, and reports
  what it observes of them (exit statuses, deadlines).
* the *session* runs pytest in-process on the test file, with an alarm per test and the
  repository's own pytest configuration ignored. It reports each test's outcome (a test
  may claim to pass: an honest test with no assertion passes anyway) and *records* every
  call from outside the focal file into a function of the focal file (a profile hook),
  with its arguments, ``self`` and closure values pickled at call time, tagged with the
  test running (``""`` while collecting). It measures nothing.
* the *replayer*, forked from the zygote, imports the focal module fresh from the
  snapshot and a copy of the focal file written for it alone (never from its place on
  disk, never the test file) under coverage.py with branch measurement, replays each
  recorded call (an alarm per call; exceptions are fine) with a coverage context per
  test, and reports line and branch coverage of the focal file over the tests that
  passed plus import time, and which test ran which line. Arguments are unpickled by a
  restricted unpickler: only plain values, classes and functions of the repository's
  own modules, and a few standard-library value types; anything else (a class of the
  test file, a lambda, a mock) makes the call *not replayable*, counted and reported,
  never guessed. A forged record is a call a test could have made.
* one *variant child* per mutant and per control, forked from the zygote, one at a time,
  in a slot directory rebuilt from the snapshot for every child, where the focal file ON
  DISK is the variant's source, written by the monitor: it imports the focal module and
  the test file fresh from disk and runs, through pytest, the tests selected for the
  variant (those that passed in the session and in the calibration run and that ran the
  variant's line in the replay; every one when the line ran at import time), stopping at
  the first failure. The verdict is its exit status, observed by the zygote: 0 survived,
  anything else killed, stopped at its limit a timeout. The limit counts CPU time (read
  by the zygote from ``/proc``, so a loaded machine does not change it): a multiple of
  the tests' CPU time in the session plus a floor of three times the calibration run's; a
  wall-clock guard far above it stops a child that waits without computing. The
  variants are anonymous spans of the focal source in an order the host shuffled: the
  mutants, each disguised by an equivalent edit beside the mutation, and the *decoys*
  (equivalent rewrites made by the host, which alone knows which is which; a test that
  fails on one detects code, not behaviour, and the host scores its mutation 0). The
  *calibration* child runs the unmutated source in the same setup first; a test that
  does not pass there does not count for mutants.

A variant child finds no copy of the original focal file, nor of another variant: none
is in its memory (the zygote never held one), and before the replay and before each child
every process the test code left is killed and the run directory (with ``/tmp`` and
``/dev/shm`` where the run has them to itself) is emptied; variant children cannot use
System V IPC, message queues or kernel keyrings. Variants run one at a time because two
alive together could pass each other their sources, and two mutants give the original
away.
"""

import json
import os
import select
import signal
import sys
import time

try:
    from . import protocol
    from . import testfile_zygote as zygote_module
    from .testfile_session import LOG_NAME, session_main
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]
    import _gym_repost_testfile_zygote as zygote_module  # type: ignore[no-redef,import-not-found]
    from _gym_repost_testfile_session import LOG_NAME, session_main  # type: ignore[no-redef,import-not-found]

SLOTS = zygote_module.SLOTS
clean_run, decode_event, kill_group = zygote_module.clean_run, zygote_module.decode_event, zygote_module.kill_group
undumpable = zygote_module.undumpable

_MAX_RECORDS_BYTES = 48 * 1024 * 1024
"""Bytes of recorded calls the monitor keeps; later ones are counted as not replayable."""
_READY_TIMEOUT = 60.0
_CPU_POLL = 0.05
"""Seconds between two readings of the session's CPU time while it is silent."""
_SILENCE = 3.0
"""Seconds beyond its longest variant's wall-clock guard the zygote may go without a reply
(it only cleans the run, builds a slot, forks and reads pipes between two)."""


# --------------------------------------------------------------------------- monitor


def _missing_tools():
    """The monitor's own check that pytest and coverage exist, before any test code runs."""
    import importlib.util

    return [name for name in ("pytest", "coverage") if importlib.util.find_spec(name) is None]


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
    undumpable()
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
        session_main(config, write_fd)
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
    session = {"records": [], "bytes": 0, "durations": {}, "cpu": {}, "unpicklable": 0}
    started = time.monotonic()
    _watch_session(pid, fd, config, state, session)
    session["wall_total"] = time.monotonic() - started
    session["cpu_total"] = _reap(pid, state)
    kill_group(pid)  # whatever the session left running
    state["session_output"] = _log_tail()
    if state["status"] != "completed":
        return state
    # nothing the test code left (a process, a copy of the focal file) waits for what follows
    clean_run(os.getcwd(), config["private"], keep=[zygote.pid])
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
    """Read the session's events until it is done; stop it past ``timeout`` seconds of its
    CPU time (read from ``/proc``: a loaded machine does not change it) or, waiting,
    ``wall_factor`` times as long on the wall clock (a guard that stretches while the
    session computes: :class:`protocol.WallGuard`)."""
    limit = config["timeout"]
    guard = protocol.WallGuard(config["wall_factor"] * limit, pid)
    buffered = b""
    while True:
        over = protocol.over_limit(pid, limit, guard)
        if over is not None:
            kill_group(pid)
            if state["status"] is None:
                state["status"] = "timeout"
                state["message"] = "the test file did not finish within its time limit (%g CPU seconds%s)" % (
                    limit,
                    ", or %g s waiting" % (config["wall_factor"] * limit) if over == "wall" else "",
                )
                if state["running"]:
                    state["message"] += " (%s was running)" % state["running"]
            return
        left = guard.left()
        ready, _, _ = select.select([fd], [], [], min(left, _CPU_POLL) if left > 0 else _CPU_POLL)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            event = decode_event(line)
            if event is not None and _apply_event(state, session, event) == "done":
                # What is left (pytest's session finish) cannot change the results.
                kill_group(pid)
                return


def _apply_event(state, session, event):
    kind = event.get("event")
    if kind == "test_start":
        state["running"] = _str(event.get("nodeid"))
    elif kind == "test" and isinstance(event.get("test"), dict):
        test = event["test"]
        state["tests"].append(test)
        state["running"] = None
        if isinstance(test.get("nodeid"), str):
            session["durations"][test["nodeid"]] = _seconds(event.get("duration"))
            session["cpu"][test["nodeid"]] = _seconds(event.get("cpu"))
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
    """Wait for the session; the CPU seconds it used (pytest's start and collection included)."""
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return 0.0
    cpu = usage.ru_utime + usage.ru_stime
    if state["status"] is None:
        state["status"] = "crashed"
        if os.WIFSIGNALED(status):
            how = "was killed by signal %d" % os.WTERMSIG(status)
        else:
            how = "ended early (exit status %d)" % os.WEXITSTATUS(status)
        where = " while %s ran" % state["running"] if state["running"] else ""
        state["message"] = "the test run %s%s" % (how, where)
    return cpu


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
    """Coverage from the replayer; the lines each test ran (None when it failed). The replayer
    reads the focal file from a copy written for it alone, removed once it has answered."""
    original = os.path.join(os.getcwd(), SLOTS, "original.py")
    _write_file(original, config["focal_source"])
    ask = {"cmd": "replay", "records": session["records"], "passing": passing, "original": original}
    try:
        reply = zygote.ask(ask, config["wall_factor"] * config["timeout"] + _SILENCE)
    finally:
        os.unlink(original)
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
    """Calibrate, then run every variant its covering tests select, within the budget.

    Limits count CPU seconds, which a loaded machine does not change: each variant's
    (``timeout_factor`` times its tests' CPU time in the session, plus a floor of three
    calibration runs), and the phase's (``mutation_timeout``, every variant process's CPU
    together). Wall-clock guards only stop what waits without computing: a variant's at
    :func:`_wall_guard`, the zygote's silence past the longest of them, and the phase's at
    ``mutation_wall`` seconds.
    """
    budget = config["mutation_timeout"]
    deadline = time.monotonic() + config["mutation_wall"]
    state["mutation_status"] = "running"
    # The calibration does what the session did, without its recording: three times the
    # session's CPU (pytest's start, collection, the tests) is room enough.
    floor = config["timeout_floor"]
    cpu = min(budget, 3 * session["cpu_total"] + floor)
    guard = _wall_guard(cpu, 3 * session["wall_total"] + floor)
    ask = {"cmd": "calibrate", "nodeids": passing, "cpu": cpu, "wall": guard}
    # a runnable child's guard stretches (see testfile_zygote._over_limit): so does the silence
    calibration = zygote.ask(ask, min(protocol.WALL_STRETCH * guard + _SILENCE, deadline - time.monotonic()))
    if not isinstance(calibration, dict) or "passed" not in calibration:
        state["mutation_status"] = "crashed"
        state["mutation_message"] = "the calibration run did not report"
        return
    counted = set(calibration["passed"]) & set(passing)
    state["calibration"] = {"failed": [n for n in passing if n not in counted], "seconds": calibration.get("seconds")}
    cpu_floor = max(floor, 3 * _seconds(calibration.get("cpu")))
    wall_floor = max(floor, 3 * _seconds(calibration.get("seconds")))
    order = [n for n in passing if n in counted]
    plan = []
    for variant in config["variants"]:
        nodeids = _selected(variant, contexts, order)
        if not nodeids:
            state["mutants"].append({"id": variant["id"], "status": "uncovered", "killed_by": None, "tests": 0})
            continue
        cpu = config["timeout_factor"] * sum(session["cpu"].get(n, 0.0) for n in nodeids) + cpu_floor
        wall = config["timeout_factor"] * sum(session["durations"].get(n, 0.0) for n in nodeids) + wall_floor
        plan.append({"id": variant["id"], "nodeids": nodeids, "cpu": cpu, "wall": _wall_guard(cpu, wall)})
    if plan:
        _run_plan(zygote, plan, config, state, budget - _seconds(calibration.get("cpu")), deadline)
    if state["mutation_status"] == "running":
        state["mutation_status"] = "completed"


def _wall_guard(cpu, wall):
    """Wall-clock seconds a variant may take: far above its CPU limit and its tests' own
    wall-clock time, so that only a run that waits (sleeps, blocks) meets it."""
    return max(4 * cpu, 2 * wall) + 1.0


def _seconds(value):
    return max(0.0, min(float(value), 1e6)) if isinstance(value, (int, float)) else 0.0


def _selected(variant, contexts, order):
    names = set(contexts.get(variant["line"], ()))
    at_import = any("" in contexts.get(line, ()) for line in [variant["line"], *variant.get("holders", [])])
    return [n for n in order if at_import or n in names]


def _run_plan(zygote, plan, config, state, budget, deadline):
    zygote.send({"cmd": "variants", "plan": plan})
    silence = protocol.WALL_STRETCH * max(item["wall"] for item in plan) + _SILENCE
    expected, spent = len(plan), 0.0
    while expected:
        reply = zygote.receive(min(silence, deadline - time.monotonic()))
        if reply is None:
            if zygote.pid is None:
                state["mutation_status"] = "crashed"
                state["mutation_message"] = "the process that runs the mutants ended early"
            else:
                state["mutation_status"] = "timeout"
                state["mutation_message"] = (
                    "the process that runs the mutants stopped answering"
                    if time.monotonic() < deadline
                    else "the mutants did not finish within %g s" % config["mutation_wall"]
                )
            return
        if reply.get("reply") == "variant" and isinstance(reply.get("verdict"), dict):
            state["mutants"].append(reply["verdict"])
            expected -= 1
            spent += _seconds(reply.get("cpu"))
            if expected and spent >= budget:
                state["mutation_status"] = "timeout"
                state["mutation_message"] = "the mutation budget (%g CPU seconds) ran out with %d mutant(s) to run" % (
                    config["mutation_timeout"],
                    expected,
                )
                return


_ZYGOTE_KEYS = (
    "focal_file",
    "focal_module",
    "test_path",
    "python_path",
    "plugins",
    "timeout",
    "test_timeout",
    "wall_factor",
    "private",
)
"""What the zygote is told: never the focal source, nor the variants."""


class _Zygote:
    """The monitor's handle on the zygote: a process and two pipes of JSON lines. It writes
    the focal file of each slot the zygote makes ready (see ``testfile_zygote``)."""

    def __init__(self, pid, commands, replies, config):
        self.pid, self.commands, self.replies = pid, commands, replies
        self.buffered = b""
        self.config = config
        self.variants = {variant["id"]: variant for variant in config["variants"]}

    @classmethod
    def start(cls, config):
        """Start the zygote: a fresh interpreter (``execv``), whose memory never held the
        focal source this process holds."""
        command_r, command_w = os.pipe()
        reply_r, reply_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                protocol.drop_token()
                os.close(command_w)
                os.close(reply_r)
                os.set_inheritable(command_r, True)
                os.set_inheritable(reply_w, True)
                path = os.path.abspath(zygote_module.__file__)
                os.execv(sys.executable, [sys.executable, path, str(command_r), str(reply_w)])
            finally:
                os._exit(70)
        os.close(command_r)
        os.close(reply_w)
        zygote = cls(pid, command_w, reply_r, config)
        zygote.send({"cmd": "config", **{key: config[key] for key in _ZYGOTE_KEYS}})
        ready = zygote.receive(_READY_TIMEOUT)
        if not ready or ready.get("reply") != "ready":
            kill_group(pid)
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
        """The zygote's next reply, within ``timeout`` seconds; it asks for slots' focal files
        meanwhile, which are written here."""
        end = time.monotonic() + max(0.0, timeout)
        while True:
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
            reply = decode_event(line)
            if not isinstance(reply, dict) or reply.get("reply") != "slot":
                return reply
            if not self._write_slot(reply):
                return None

    def _write_slot(self, request):
        """Write the focal file of a slot the zygote made: the original (``id`` None) or a
        variant's source."""
        slots = os.path.realpath(os.path.join(os.getcwd(), SLOTS))
        directory = request.get("directory")
        variant = self.variants.get(request.get("id"))
        if not isinstance(directory, str) or os.path.dirname(os.path.realpath(directory)) != slots:
            return False
        if request.get("id") is not None and variant is None:
            return False
        source = self.config["focal_source"]
        if variant is not None:
            source = source[: variant["start"]] + variant["replacement"] + source[variant["end"] :]
        _write_file(os.path.join(directory, self.config["focal_file"]), source)
        return self.send({"cmd": "slot_ready"})

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
        kill_group(self.pid)
        os.waitpid(self.pid, 0)


def _write_file(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        protocol.write_all(fd, text.encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
