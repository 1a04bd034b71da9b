"""The session of :mod:`testfile` (inside the sandbox): runs pytest on the test file, reports
each test's outcome and records every call into a function of the focal file. It
measures nothing.
"""

import json
import os
import pickle
import sys
import time

try:
    from . import protocol
    from .testfile_replay import GENERATOR_FLAGS, MESSAGE_CHARS
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]
    from _gym_repost_testfile_replay import GENERATOR_FLAGS, MESSAGE_CHARS  # type: ignore[no-redef,import-not-found]

LOG_NAME = ".gym_repost_session.log"
INI_NAME = ".gym_repost_pytest.ini"
_LONGREPR = 2000
_MAX_RECORD = 256 * 1024
"""Bytes of one pickled call; a larger one is not replayable."""
_MAX_CALLS_PER_TEST = 2000


# --------------------------------------------------------------------------- session


class _Emitter:
    """Newline-delimited JSON events to the monitor."""

    def __init__(self, fd):
        self.fd = fd

    def __call__(self, event):
        protocol.write_all(self.fd, (json.dumps(event) + "\n").encode("utf-8", "surrogatepass"))


def session_main(config, fd):
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
            emit({"event": "error", "message": "%s: %s" % (type(exc).__name__, str(exc)[:MESSAGE_CHARS])})
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
    args += protocol.pytest_compat_args(pytest)
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
        if code.co_flags & GENERATOR_FLAGS and frame.f_lasti > self._start(code):
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
    raise _TestTimeout("the test took longer than its time limit (CPU seconds, or far longer waiting)")


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
        if report.skipped:
            # why a module was skipped (one it importorskips is missing), in the output the host
            # reads: pytest's own summary never prints, the session is stopped before it
            skip = report.longrepr  # (path, line, reason) for a skip
            reason = skip[2] if isinstance(skip, tuple) and len(skip) == 3 else summary_line(longrepr_text(skip))
            line = "SKIPPED %s: %s\n" % (report.nodeid, str(reason)[:MESSAGE_CHARS])
            protocol.write_all(2, line.encode("utf-8", "replace"))
        if report.failed:
            error = {
                "nodeid": report.nodeid or self.config["test_path"],
                "longrepr": longrepr_text(report.longrepr)[-_LONGREPR:],
            }
            error["message"] = summary_line(error["longrepr"])
            self.emit({"event": "collection_error", "error": error})

    def pytest_runtest_protocol(self, item, nextitem):
        self.emit({"event": "test_start", "nodeid": item.nodeid})
        self.recorder.switch(item.nodeid)
        limit = self.config["test_timeout"]
        protocol.set_alarms(limit, self.config["wall_factor"] * limit, _alarm)
        started, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            protocol.set_alarms(0, 0)
            duration, cpu = time.perf_counter() - started, time.process_time() - cpu
            self.recorder.switch("")
            outcome = self.outcomes.get(item.nodeid) or {
                "nodeid": item.nodeid,
                "outcome": "error",
                "message": "no report",
            }
            self.emit({"event": "test", "test": outcome, "duration": duration, "cpu": cpu})

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
            current["longrepr"] = longrepr_text(report.longrepr)[-_LONGREPR:]

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


def longrepr_text(longrepr):
    try:
        return str(longrepr)
    except BaseException:
        return "<unprintable report>"


def _exception_text(value):
    try:
        text = str(value)
    except BaseException:
        text = "<unprintable exception>"
    return " ".join(text.split())[:MESSAGE_CHARS]


def summary_line(longrepr):
    lines = [ln.strip() for ln in longrepr.splitlines() if ln.strip()]
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    return (errors[-1] if errors else lines[-1] if lines else "collection failed")[:MESSAGE_CHARS]
