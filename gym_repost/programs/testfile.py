"""Run a test file against its focal file: outcomes, coverage and mutants (inside the sandbox).

Its configuration and a one-time token come through the protocol of
:mod:`gym_repost.programs`. Standard library, pytest and coverage.py only. Three kinds of
process:

* the *monitor* (this program's first process) reads the configuration, forks the
  session, and only then reads the token, so the code under test never holds it (the
  session closes its copy of the token's descriptor unread). It never imports pytest and
  never runs test code: it reads the session's events from a pipe, kills the session
  when a phase overruns its deadline (naming the test that was running), and writes the
  report as its result, followed by the token's line. A test file that exits early,
  crashes the interpreter or prints a fake report cannot produce the token's line.
* the *session* runs pytest in-process on the test file under coverage.py, with branch
  measurement and one dynamic context per test, an alarm per test, and the repository's
  own pytest configuration ignored. It reports each test's outcome, then the coverage
  of the focal file counted over the tests that passed (plus the lines run at import
  time), then the mutants.
* one *mutant child* per mutant, forked from the session (``jobs`` at a time, after
  ``gc.freeze()``). The session compiles the mutant's source from memory just before
  forking (nothing is written to disk, so no bytecode can be stale); the child executes
  it into a fresh module object, loads that module's code into the already-imported
  focal module (below) and runs only the tests that passed and that executed the
  mutated line, stopping at the first failure. When the mutated line, or the making of
  a closure holding it, ran at import time, the test module's top level runs again
  first (what it built from the focal module is rebuilt with the mutant, as a fresh
  pytest run would). Tests run through pytest's fixture machinery without its
  reporting hooks (only pass or fail matters; pytest's ``runtestprotocol`` when its
  internals differ). The session kills the child at its deadline: a multiple of the
  baseline time of those tests, plus a floor that is at least three times the wall
  time of a calibration child (every passing test on the unmutated module), so that a
  loaded machine does not turn slow children into timeouts.

Loading a mutant: the fresh module's functions give their code objects to the focal
module's functions (``f.__code__ = g.__code__``), recursively through classes,
``staticmethod``/``classmethod``/``property`` and ``functools.wraps``/``lru_cache``
wrappers (whose caches are cleared) and the functions closures hold; module and class
attributes holding plain data (numbers, strings, containers of them, compiled patterns)
are replaced when they differ, and names the mutant no longer binds are deleted. Every
object the tests hold (classes, exception types, instances built at collection time,
parametrized arguments, wrappers) therefore stays the same object while its behaviour is
the mutant's. A mutant whose change cannot be loaded this way (an instance built at
import time, a closure whose variables change) is reported as ``unapplied`` and left
out of the score.
"""

import gc
import json
import os
import re
import select
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
COVERAGE_JSON = ".gym_repost_coverage.json"
_LONGREPR = 2000
_MESSAGE = 300


# --------------------------------------------------------------------------- monitor

def _missing_tools():
    """The monitor's own check that pytest and coverage exist, before any test code runs."""
    import importlib.util

    return [name for name in ("pytest", "coverage") if importlib.util.find_spec(name) is None]


def main():
    config = protocol.read_config(token=True)
    missing = _missing_tools()
    if missing:
        report = {"status": "error", "infrastructure": True,
                  "message": "the sandbox's Python lacks pytest or coverage: no %s" % ", ".join(missing)}
        protocol.write_result(report, protocol.read_token())
        os._exit(0)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        protocol.drop_token()
        os.close(read_fd)
        _session_main(config, write_fd)
    os.close(write_fd)
    token = protocol.read_token()
    report = _monitor(pid, read_fd, config)
    protocol.write_result(report, token)
    os._exit(0)


def _monitor(pid, fd, config):
    state = {"status": None, "message": "", "tests": [], "collection_errors": [], "running": None,
             "coverage": None, "mutants": [], "mutation_status": "not run", "mutation_message": "",
             "pytest_exit": None, "infrastructure": False}
    deadline = time.monotonic() + config["timeout"]
    buffered = b""
    done = False
    while not done:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _kill_group(pid)
            _overran(state, config)
            break
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            event = _decode(line)
            step = _apply_event(state, event) if event is not None else None
            if step == "mutants":
                deadline = time.monotonic() + config["mutation_timeout"]
            elif step == "done":
                # What is left (pytest's session finish) cannot change the results.
                _kill_group(pid)
                done = True
                break
    _reap(pid, state)
    state["session_output"] = _log_tail()
    return state


def _overran(state, config):
    if state["status"] is None:
        state["status"] = "timeout"
        state["message"] = "the test file did not finish within %g s" % config["timeout"]
        if state["running"]:
            state["message"] += " (%s was running)" % state["running"]
    elif state["mutation_status"] == "running":
        state["mutation_status"] = "timeout"


def _decode(line):
    try:
        event = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _apply_event(state, event):
    kind = event.get("event")
    if kind == "test_start":
        state["running"] = event.get("nodeid")
    elif kind == "test":
        state["tests"].append(event["test"])
        state["running"] = None
    elif kind == "collection_error":
        state["collection_errors"].append(event["error"])
    elif kind == "baseline":
        state["coverage"] = event.get("coverage")
        state["pytest_exit"] = event.get("pytest_exit")
        state["status"] = "completed"
        if event.get("mutants"):
            state["mutation_status"] = "running"
            return "mutants"
    elif kind == "mutant":
        state["mutants"].append(event["mutant"])
    elif kind == "done":
        if state["mutation_status"] == "running":
            state["mutation_status"] = "completed"
        return "done"
    elif kind == "mutation_error" or (kind == "error" and state["status"] == "completed"):
        state["mutation_status"] = "error"
        state["mutation_message"] = event.get("message", "")
    elif kind == "error":
        state["status"] = "error"
        state["message"] = event.get("message", "")
        # Never "infrastructure": the session runs the test code, which can write any event;
        # the monitor checks the sandbox's Python itself (main) before the session starts.
    return None


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


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
    if state["mutation_status"] == "running":
        state["mutation_status"] = "crashed"


def _log_tail():
    try:
        with open(LOG_NAME, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 3000))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


# --------------------------------------------------------------------------- session

class _Emitter:
    """Newline-delimited JSON events to the monitor; silent in mutant children."""

    def __init__(self, fd):
        self.fd = fd
        self.enabled = True

    def __call__(self, event):
        if not self.enabled:
            return
        data = (json.dumps(event) + "\n").encode()
        while data:
            written = os.write(self.fd, data)
            data = data[written:]


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
    except BaseException as exc:  # noqa: BLE001 - whatever happens, the monitor is told
        try:
            emit({"event": "error", "message": "%s: %s" % (type(exc).__name__, str(exc)[:_MESSAGE])})
        except BaseException:  # noqa: BLE001
            pass
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - a test may have closed the streams
        pass
    os._exit(0)


def _session(config, emit):
    root = os.getcwd()
    for entry in reversed(config["python_path"]):
        sys.path.insert(0, os.path.normpath(os.path.join(root, entry)))
    try:
        import coverage
        import pytest
    except ImportError as exc:
        emit({"event": "error", "infrastructure": True,
              "message": "the sandbox's Python lacks pytest or coverage: %s" % exc})
        return
    focal = os.path.join(root, config["focal_file"])
    _quiet_coverage_start(coverage)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    with open(INI_NAME, "w", encoding="utf-8") as fh:
        fh.write("[pytest]\n")
    cov = coverage.Coverage(branch=True, data_file=None, include=[focal], config_file=False)
    plugin = _Plugin(config, emit, cov, focal, pytest)
    args = [config["test_path"], "-q", "--tb=short", "-c", INI_NAME, "--rootdir", root,
            "-p", "no:cacheprovider"]
    for name in config.get("plugins", []):
        args += ["-p", name]
    cov.start()
    try:
        code = pytest.main(args, plugins=[plugin])
    finally:
        cov.stop()
    if not plugin.reported:
        plugin.report_baseline(int(code))
        emit({"event": "done"})


def _quiet_coverage_start(coverage):
    """Skip the call-stack snapshot coverage.py takes for its debug output at start.

    It reads the source of every frame on the stack (~40 ms), for a message we never show.
    """
    try:
        import coverage.collector

        coverage.collector.short_stack = lambda *args, **kwargs: ""
    except (ImportError, AttributeError):
        pass


class _TestTimeout(Exception):
    """Raised in a test that overran its time (by the alarm)."""


def _alarm(signum, frame):
    raise _TestTimeout("the test took longer than its time limit")


class _Plugin:
    """The session's pytest plugin: contexts, alarms, outcomes, then the mutants."""

    def __init__(self, config, emit, cov, focal, pytest):
        self.config = config
        self.emit = emit
        self.cov = cov
        self.focal = focal
        self.pytest = pytest
        self.items = []
        self.outcomes = {}
        self.order = []
        self.durations = {}
        self.reported = False
        self.root = os.getcwd()
        self.passing = set()
        self.test_file = os.path.join(self.root, config["test_path"])
        self.test_code = _compile(_read(self.test_file), self.test_file)

    # ---- collection and the baseline run

    def pytest_collectreport(self, report):
        if report.failed:
            error = {"nodeid": report.nodeid or self.config["test_path"],
                     "longrepr": _text(report.longrepr)[-_LONGREPR:]}
            error["message"] = _summary_line(error["longrepr"])
            self.emit({"event": "collection_error", "error": error})

    def pytest_collection_finish(self, session):
        self.items = list(session.items)

    def pytest_runtest_protocol(self, item, nextitem):
        self.emit({"event": "test_start", "nodeid": item.nodeid})
        self.cov.switch_context(item.nodeid)
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, self.config["test_timeout"])
        started = time.perf_counter()
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.durations[item.nodeid] = time.perf_counter() - started
            self.cov.switch_context("")
            outcome = self.outcomes.get(item.nodeid) or {"nodeid": item.nodeid, "outcome": "error",
                                                         "message": "no report"}
            self.emit({"event": "test", "test": outcome})

    def pytest_runtest_makereport(self, item, call):
        report = yield
        self._record(item.nodeid, call, report)
        return report

    def _record(self, nodeid, call, report):
        if nodeid not in self.outcomes:
            self.outcomes[nodeid] = {"nodeid": nodeid, "outcome": "passed", "phase": None,
                                     "exception": None, "message": "", "longrepr": ""}
            self.order.append(nodeid)
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
            self.cov.stop()
            if not self.reported:
                self.report_baseline(None)
                try:
                    self._mutation_phase()
                except BaseException as exc:  # noqa: BLE001 - the baseline results still count
                    self.emit({"event": "mutation_error", "message": "%s: %s" % (
                        type(exc).__name__, _exception_text(exc))})
                self.emit({"event": "done"})

    # ---- after the baseline

    def report_baseline(self, exit_code):
        self.reported = True
        os.chdir(self.root)
        passing = [n for n in self.order if self.outcomes[n]["outcome"] == "passed"]
        coverage_data = _measure_coverage(self.cov, self.focal, self.config["focal_source"], passing)
        self.passing = set(passing)
        self.emit({"event": "baseline", "coverage": coverage_data, "pytest_exit": exit_code,
                   "mutants": bool(self.config["mutants"]) and bool(passing)})

    def _mutation_phase(self):
        if not self.config["mutants"] or not self.passing:
            return
        module = sys.modules.get(self.config["focal_module"])
        data = self.cov.get_data()
        data.set_query_contexts(None)
        contexts = data.contexts_by_lineno(self.focal)
        plan = [(m, self._covering_items(m, contexts, module), _ran_at_import(m, contexts))
                for m in self.config["mutants"]]
        _run_mutants(plan, module, self)

    def _covering_items(self, mutant, contexts, module):
        if module is None:
            return []
        names = set(contexts.get(mutant["line"], ()))
        everyone = "" in names
        return [item for item in self.items if item.nodeid in self.passing and (everyone or item.nodeid in names)
                and item.get_closest_marker("xfail") is None]


def _ran_at_import(mutant, contexts):
    """The mutated line, or the making of a closure holding it, ran at import time."""
    return any("" in contexts.get(line, ()) for line in [mutant["line"], *mutant.get("holders", [])])


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
    except BaseException:  # noqa: BLE001 - a broken repr must not hide the outcome
        return "<unprintable report>"


def _exception_text(value):
    try:
        text = str(value)
    except BaseException:  # noqa: BLE001
        text = "<unprintable exception>"
    return " ".join(text.split())[:_MESSAGE]


def _summary_line(longrepr):
    lines = [ln.strip() for ln in longrepr.splitlines() if ln.strip()]
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    return (errors[-1] if errors else lines[-1] if lines else "collection failed")[:_MESSAGE]


def _compile(source, filename):
    if source is None:
        return None
    try:
        return compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None


def _read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def _restore(path, source):
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == source:
                return
    except (OSError, UnicodeDecodeError):
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source)


def _measure_coverage(cov, focal, source, passing):
    """Lines and branches of the focal file run by the passing tests or at import time."""
    try:
        _restore(focal, source)  # the tests may have changed or deleted it
        data = cov.get_data()
        if focal not in data.measured_files():
            data.touch_file(focal)
        contexts = ["^$"] + ["^%s$" % re.escape(nodeid) for nodeid in passing]
        cov.json_report(outfile=COVERAGE_JSON, contexts=contexts)
        with open(COVERAGE_JSON, encoding="utf-8") as fh:
            files = json.load(fh)["files"]
    except BaseException as exc:  # noqa: BLE001 - reported, the outcomes still count
        return {"error": "%s: %s" % (type(exc).__name__, str(exc)[:_MESSAGE])}
    entry = next(iter(files.values()), {})
    return {key: entry.get(key, []) for key in
            ("executed_lines", "missing_lines", "executed_branches", "missing_branches")}


# --------------------------------------------------------------------------- mutants

def _run_mutants(plan, module, plugin):
    jobs = max(1, int(plugin.config["jobs"]))
    plugin.item_runner = _item_runner(plugin.pytest, plugin.config.get("lean_runner", True))
    pending = []
    for mutant, items, at_import in plan:
        if not items:
            plugin.emit({"event": "mutant", "mutant": {"id": mutant["id"], "status": "uncovered",
                                                       "killed_by": None, "tests": 0}})
        else:
            pending.append((mutant, _compile_mutant(mutant, plugin), items, at_import))
    # Everything is compiled before the first fork: after it, each page the session
    # writes while children live is copied, and the children allocate far less.
    gc.freeze()  # children's collections then skip (and do not copy) the session's objects
    plugin.floor = _calibrate(module, plugin) if pending else plugin.config["timeout_floor"]
    running = {}
    while pending or running:
        while pending and len(running) < jobs:
            mutant, code, items, at_import = pending.pop(0)
            pid, fd = _fork_mutant(code, items, at_import, module, plugin)
            deadline = time.monotonic() + _mutant_timeout(items, plugin)
            running[fd] = [pid, mutant, len(items), deadline, b""]
        _wait_mutants(running, plugin)


def _mutant_timeout(items, plugin):
    baseline = sum(plugin.durations.get(item.nodeid, 0.0) for item in items)
    return plugin.config["timeout_factor"] * baseline + plugin.floor


def _calibrate(module, plugin):
    """The floor of the mutants' timeouts: the configured one, or three times the wall
    time of one child running every passing test on the unmutated module, whichever is
    larger (a loaded machine makes every child slower; a floor below that would turn
    slow children into timeouts)."""
    items = [item for item in plugin.items if item.nodeid in plugin.passing]
    started = time.monotonic()
    pid, fd = _fork_mutant(None, items, False, module, plugin)
    limit = started + plugin.config["timeout"]
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, limit - time.monotonic()))
        if not ready or not os.read(fd, 1 << 16):
            break
    _kill_group(pid)
    os.close(fd)
    os.waitpid(pid, 0)
    return max(plugin.config["timeout_floor"], 3 * (time.monotonic() - started))


def _wait_mutants(running, plugin):
    now = time.monotonic()
    wait = max(0.0, min(entry[3] for entry in running.values()) - now)
    ready, _, _ = select.select(list(running), [], [], wait)
    for fd in ready:
        chunk = os.read(fd, 1 << 16)
        if chunk:
            running[fd][4] += chunk
            continue
        pid, mutant, count, _, data = running.pop(fd)
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        plugin.emit({"event": "mutant", "mutant": _verdict(mutant, count, data, status)})
    now = time.monotonic()
    for fd in [fd for fd, entry in running.items() if entry[3] <= now]:
        pid, mutant, count, _, _ = running.pop(fd)
        _kill_group(pid)
        os.close(fd)
        os.waitpid(pid, 0)
        plugin.emit({"event": "mutant", "mutant": {"id": mutant["id"], "status": "timeout",
                                                   "killed_by": None, "tests": count}})


def _verdict(mutant, count, data, status):
    result = {"id": mutant["id"], "status": "killed", "killed_by": None, "tests": count}
    try:
        reply = json.loads(data.decode("utf-8"))
    except ValueError:
        reply = None
    if isinstance(reply, dict) and reply.get("status") in ("killed", "survived", "unapplied"):
        result.update(status=reply["status"], killed_by=reply.get("killed_by"))
        result["detail"] = reply.get("detail")
    elif os.WIFSIGNALED(status):
        result["detail"] = "the run was killed by signal %d" % os.WTERMSIG(status)
    else:
        result["detail"] = "the run ended early (exit status %d)" % os.WEXITSTATUS(status)
    return result


def _compile_mutant(mutant, plugin):
    source = plugin.config["focal_source"]
    mutated = source[: mutant["start"]] + mutant["replacement"] + source[mutant["end"]:]
    try:
        return compile(mutated, plugin.focal, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return exc


def _fork_mutant(code, items, at_import, module, plugin):
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        plugin.emit.enabled = False
        reply = {"status": "killed", "killed_by": None}
        gc.disable()  # a short life: collecting would only copy pages shared with the session
        try:
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            reply = _mutant_child(code, items, at_import, module, plugin)
        except BaseException as exc:  # noqa: BLE001 - a mutant that breaks loading is killed
            reply = {"status": "killed", "killed_by": None,
                     "detail": "loading the mutant raised %s: %s" % (type(exc).__name__,
                                                                     _exception_text(exc))}
        try:
            os.write(write_fd, json.dumps(reply).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    return pid, read_fd


def _mutant_child(code, items, at_import, module, plugin):
    if code is None:  # the calibration run: the focal module as it is
        return _run_items(items, plugin)
    if isinstance(code, Exception):
        return {"status": "unapplied", "killed_by": None, "detail": "the mutant does not compile: %s" % code}
    fresh = _execute_mutant(code, module)
    if _transplant(module, fresh, module.__name__) == 0:
        return {"status": "unapplied", "killed_by": None,
                "detail": "the change is in an object the tests cannot see replaced"}
    if at_import:
        failure = _reexecute_test_module(plugin)
        if failure:
            return {"status": "killed", "killed_by": plugin.config["test_path"], "detail": failure}
    return _run_items(items, plugin)


def _run_items(items, plugin):
    run = plugin.item_runner
    for index, item in enumerate(items):
        if run(item, items[index + 1] if index + 1 < len(items) else None):
            return {"status": "killed", "killed_by": item.nodeid}
    return {"status": "survived", "killed_by": None}


def _item_runner(pytest, plugin_lean=True):
    """A function ``(item, nextitem) -> failed`` for the mutant children.

    Only pass or fail matters there, so when pytest's internals allow it the test is set
    up, called and torn down directly (fixtures and all), without the reporting hooks
    (output capture, logging, reports with formatted tracebacks), which cost more than
    a small test itself. Otherwise pytest's own ``runtestprotocol``, with traceback
    formatting turned off.
    """
    from _pytest import nodes, runner

    lean = plugin_lean and all(hasattr(obj, name) for obj, name in (
        (pytest.Item, "runtest"), (nodes.Node, "session"), (runner, "SetupState")))
    skipped = (pytest.skip.Exception, getattr(pytest.xfail, "Exception", pytest.skip.Exception))

    def run_lean(item, nextitem):
        state = getattr(item.session, "_setupstate", None)
        if state is None or not hasattr(item, "_initrequest"):
            return run_protocol(item, nextitem)
        if not item._request:
            item._initrequest()
        failed = False
        try:
            state.setup(item)
            item.runtest()
            # unittest.TestCase tests record their failures instead of raising them.
            failed = any(not e.errisinstance(skipped) for e in getattr(item, "_excinfo", None) or ())
        except skipped:
            pass
        except BaseException:  # noqa: BLE001 - any exception of the test kills the mutant
            failed = True
        try:
            state.teardown_exact(nextitem)
        except BaseException:  # noqa: BLE001 - so does a failing teardown
            failed = True
        return failed

    def run_protocol(item, nextitem):
        nodes.Node._repr_failure_py = lambda self, excinfo, style=None: "failed"
        reports = runner.runtestprotocol(item, nextitem=nextitem, log=False)
        return any(report.failed for report in reports)

    return run_lean if lean else run_protocol


def _reexecute_test_module(plugin):
    """Run the test module's top level again, into its own namespace.

    The mutated line ran at import time, possibly on behalf of the test module (a class
    built by a factory of the focal file at the test module's top level): what the test
    functions see must be rebuilt with the mutant, as a fresh pytest run would. The test
    functions pytest collected keep their code and read the rebuilt names.
    """
    module = _module_of(plugin.test_file)
    if module is None or plugin.test_code is None:
        return None
    try:
        exec(plugin.test_code, vars(module))  # noqa: S102
    except BaseException as exc:  # noqa: BLE001 - the mutant broke the test module's import
        return "importing the test module raised %s: %s" % (type(exc).__name__, _exception_text(exc))
    return None


def _module_of(filename):
    path = os.path.realpath(filename)
    for module in list(sys.modules.values()):
        try:
            file = getattr(module, "__file__", None)
        except BaseException:  # noqa: BLE001 - a lazy module may raise on any attribute
            continue
        if isinstance(file, str) and os.path.realpath(file) == path:
            return module
    return None


def _execute_mutant(code, module):
    fresh = types.ModuleType(module.__name__, getattr(module, "__doc__", None))
    for name in ("__file__", "__package__", "__spec__", "__loader__", "__path__"):
        if hasattr(module, name):
            setattr(fresh, name, getattr(module, name))
    exec(code, fresh.__dict__)  # noqa: S102 - the mutant of the repository's own module
    return fresh


_SKIP = frozenset({"__dict__", "__weakref__", "__doc__", "__module__", "__qualname__", "__builtins__",
                   "__file__", "__spec__", "__loader__", "__package__", "__name__", "__cached__",
                   "__path__", "__annotations__", "__firstlineno__", "__static_attributes__"})
_MISSING = object()


def _transplant(old, new, module_name, seen=None):
    """Give ``old`` (a module or class) the behaviour of ``new``; return the changes made."""
    seen = set() if seen is None else seen
    seen.add(id(old))
    changes = 0
    old_dict, new_dict = vars(old), vars(new)
    for name, value in list(new_dict.items()):
        if name in _SKIP:
            continue
        changes += _transplant_attribute(old, name, old_dict.get(name, _MISSING), value,
                                         module_name, seen)
    for name in [n for n in list(old_dict) if n not in new_dict and n not in _SKIP]:
        delattr(old, name)
        changes += 1
    return changes


def _transplant_attribute(owner, name, old, new, module_name, seen):
    if old is _MISSING:
        setattr(owner, name, new)
        return 1
    if isinstance(old, type) and isinstance(new, type):
        same = (getattr(new, "__module__", None) == module_name
                and getattr(old, "__qualname__", None) == getattr(new, "__qualname__", None))
        return _transplant(old, new, module_name, seen) if same and id(old) not in seen else 0
    old_functions, new_functions = _functions(old), _functions(new)
    if old_functions and len(old_functions) == len(new_functions):
        changes = sum(_patch_function(a, b, module_name, 0) for a, b in zip(old_functions, new_functions, strict=True))
        if changes and callable(getattr(old, "cache_clear", None)):
            old.cache_clear()
        return changes
    if _plain(old) and _plain(new):
        if type(old) is not type(new) or not _equal(old, new):
            setattr(owner, name, new)
            return 1
    return 0


def _functions(value, depth=0):
    if isinstance(value, types.FunctionType):
        return [value]
    if isinstance(value, (staticmethod, classmethod)):
        return _functions(value.__func__, depth)
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, types.FunctionType)]
    if depth < 5 and not isinstance(value, type):
        try:
            wrapped = value.__dict__.get("__wrapped__") if hasattr(value, "__dict__") else None
        except BaseException:  # noqa: BLE001 - an odd object is just not a function
            wrapped = None
        if wrapped is not None:
            return _functions(wrapped, depth + 1)
    return []


def _patch_function(old, new, module_name, depth):
    if getattr(new, "__module__", None) != module_name:
        return 0
    changes = 0
    if old.__code__ != new.__code__:
        if old.__code__.co_freevars != new.__code__.co_freevars:
            return 0
        old.__code__ = new.__code__
        changes += 1
    old_cells, new_cells = old.__closure__ or (), new.__closure__ or ()
    if depth < 3 and len(old_cells) == len(new_cells):
        for a, b in zip(old_cells, new_cells, strict=True):
            try:
                inner_old, inner_new = a.cell_contents, b.cell_contents
            except ValueError:
                continue
            if isinstance(inner_old, types.FunctionType) and isinstance(inner_new, types.FunctionType):
                changes += _patch_function(inner_old, inner_new, module_name, depth + 1)
    return changes


_PLAIN_TYPES = (int, float, complex, str, bytes, bool, type(None), range, type(re.compile("")))


def _plain(value, depth=0):
    if isinstance(value, _PLAIN_TYPES):
        return True
    if depth > 3:
        return False
    if isinstance(value, (tuple, list, set, frozenset)) and len(value) <= 10000:
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict) and len(value) <= 10000:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _equal(a, b):
    try:
        return bool(a == b)
    except BaseException:  # noqa: BLE001 - incomparable values are different
        return False


if __name__ == "__main__":
    main()
