"""Runs a repository's own tests against mutants of its functions (inside the sandbox): the
oracle of ``gym-repost audit``.

Its configuration and a one-time token come through the protocol of
:mod:`gym_repost.programs`. Standard library, pytest and coverage.py only. Two modes:

* ``cover``: the repository's test suite (``args``: pytest's arguments, ``sys_path``: roots)
  runs once in a child, under coverage.py measuring ``files`` only, with a coverage context
  per test. For each target (``targets``: ``{"key", "file", "first", "last"}``, the lines of
  its body) the result names the tests that ran one of those lines *and passed*, as
  indexes into a table of those tests with the CPU seconds each took (a test id is written
  once, however many targets it covers: packaging's parametrized suite covers its targets
  with thousands each): ``{"names": [[nodeid, cpu], ...], "covering": {key: [index, ...]},
  "tests": n, "errors": [...], "missing": [module, ...], "undefined": [[path, name], ...],
  "at_import": [key, ...], "collect_cpu": seconds}``
  (pytest's error lines, the modules its tests could not import, the names whose
  ``NameError`` failed a test file's collection: :func:`protocol.undefined_names`, and the
  targets a line of whose body ran outside every test, at import or collection time, and
  the CPU seconds of the run until its collection was done);
  ``"error": why`` too when the suite's own code stopped pytest.
* ``kill``: for each mutant (``mutants``: ``{"id", "file", "start", "end", "replacement"}``,
  a character span of the file's text), the file on disk holds the mutant while a child
  runs ``nodeids`` (the target's covering tests; their files are collected and the rest
  deselected, and a test id the mutant's code no longer yields kills it) through pytest,
  stopping at the first failure (the child ends there, its traceback never formatted):
  ``killed`` when a test fails or errors, ``timeout`` at its CPU limit (``cpu``), at a
  test's own in its call (``test_cpu``: ``{nodeid: seconds}``, a multiple of what the
  test took, as PIT's per-test timeouts: a mutant that loops in a cheap test is stopped
  there, not at the sum of every covering test's limit), at the collection's
  (``collect_cpu``, a multiple of what the coverage run's took: a mutant of a target that
  runs at import may loop there) or at its wall-clock guard (``wall``, a
  :class:`~protocol.WallGuard`), ``survived`` when every one passes; the file is put back
  after each. The children fork from this
  process, which imported pytest (never the repository) once. Once ``max_timeouts`` mutants
  ended as timeouts, the rest are ``not run`` (a count of verdicts, not CPU seconds spent:
  the same work takes more CPU time on a busy machine, and two builds must run the same
  mutants): ``{"mutants": [{"id", "status", "by"}], "patched": n, "fallback": why or None,
  "calibration": report or None}``.

  With ``calibrate`` (``{"factor", "floor", "start"}``) the covering tests first run once
  with the original code, like a mutant's run but to the end: each test's limit (and the
  collection's) becomes ``factor`` times what it took there plus ``floor``, a mutant's
  whole run's ``factor`` times that run's plus ``start``, and the tests that fail or are not collected
  that way are left out (:func:`_calibrated`; the report: ``{"why", "left_out",
  "left_out_count"}``). The host's limits, measured under coverage.py's tracing, are then
  only those of that run.

  With ``patch`` (``{"qualname", "first", "last"}``: the target, its lines with decorators),
  the tests are collected once, in a session child, and each mutant whose ``patch`` flag is
  set (its change lies inside the body) runs in a child forked from that session after
  collection, the target's code objects swapped for the mutant's (every function object
  of the target, aliases and decorators' wrapped ones included), the mutant on disk too:
  no collection per mutant (a schema of mutants, as mutmut's trampolines are). The host
  sets it only for a target none of whose body lines ran at import or collection time (the
  coverage run's empty context), so a collection with the original code sees what one
  with the mutant would. The first :data:`CROSS_CHECKS` swapped mutants that survived are
  checked against runs of their own; a disagreement, a session that cannot collect, or a
  target whose function objects are not found sends the mutants left down the path above.

Nothing here runs a candidate's code: this is the repository's code and its tests, the
oracle that says which mutants are known to be wrong.
"""

import functools
import json
import mmap
import os
import select
import struct
import sys
import time

try:
    from . import protocol
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]

_BASE_ARGS = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "-p", "no:randomly"]
_KILL_ARGS = ["-x", "--tb=no"]
"""A kill run needs a failure's test id, not its traceback: formatting one parses the source
of each frame's file, and a mutant that fails thousands of subtests of a large test file
(more-itertools' ``test_all_orderings``) spent minutes there."""
_POLL = 0.02
_DEADLINE = {"map": None}
"""In a child of :func:`_in_child`: the shared page through which the running test's CPU
deadline reaches the parent that holds the child to its limits."""


def main():
    config = protocol.read_config(token=True)
    protocol.hold_low_descriptors()
    protocol.script_idioms_off()
    root = os.getcwd()
    sys.path[:0] = [root] + [os.path.join(root, p) for p in config.get("sys_path", [])]
    sys.dont_write_bytecode = True
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import pytest  # once, here: each child forked after has it

    _BASE_ARGS.extend(protocol.pytest_compat_args(pytest))
    for name in config.get("plugins") or []:  # what the suite's fixtures need; autoload is off
        _BASE_ARGS.extend(["-p", name])
    result = cover(config) if config["mode"] == "cover" else kill(config)
    protocol.write_result(result, protocol.read_token(), compress=True)
    os._exit(0)


# --------------------------------------------------------------------------- cover


def cover(config):
    """The covering tests of each target (see the module docstring)."""
    data, status = _in_child(lambda fd: _cover_child(config, fd), config["cpu"], config["wall"])
    try:
        report = json.loads(data.decode("utf-8"))
    except ValueError:
        report = None
    if not isinstance(report, dict):
        ended = "was stopped (%s)" % status[2] if status[0] == "stopped" else "exited %s" % status[2]
        return {"error": "the coverage run %s without a report" % ended, "covering": {}, "tests": 0}
    return report


def _cover_child(config, fd):
    import io

    import coverage
    import pytest

    files = [os.path.abspath(f) for f in config["files"]]
    cov = coverage.Coverage(data_file=None, include=files, config_file=False)
    plugin = _Outcomes(cov)
    stopped, said = None, io.StringIO()
    sys.stdout = sys.stderr = said  # pytest's report: why a suite ran no test
    cov.start()
    try:
        pytest.main(
            [*_BASE_ARGS, "--continue-on-collection-errors", *config["args"]], plugins=[plugin, protocol.SeededTests()]
        )
    except BaseException as exc:  # the suite's own code stopped pytest: say how
        stopped = "pytest stopped: %s: %s" % (type(exc).__name__, str(exc)[:300])
    finally:
        cov.stop()
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    output = said.getvalue()
    errors, missing = protocol.pytest_problems(output, 6), protocol.missing_modules(output + (stopped or ""))
    undefined = protocol.undefined_names(output)
    if stopped is not None:
        report = {"error": stopped, "covering": {}, "tests": 0, "errors": errors, "missing": missing}
        report["undefined"] = undefined
        protocol.write_all(fd, json.dumps(report).encode("utf-8"))
        return
    data = cov.get_data()
    covering, index, at_import = {}, {}, []
    for target in config["targets"]:
        by_line = data.contexts_by_lineno(os.path.abspath(target["file"])) or {}
        names = set()
        for line in range(target["first"], target["last"] + 1):
            names.update(by_line.get(line, ()))
        passed = sorted(n for n in names if plugin.outcomes.get(n) == "passed")
        covering[target["key"]] = [index.setdefault(n, len(index)) for n in passed]
        if "" in names:  # a body line ran outside every test: at import or collection
            at_import.append(target["key"])
    table = [[n, round(plugin.cpu.get(n, 0.0), 4)] for n in index]
    report = {"names": table, "covering": covering, "tests": len(plugin.outcomes), "errors": errors, "missing": missing}
    report["undefined"], report["at_import"] = undefined, at_import
    report["collect_cpu"] = round(plugin.collect_cpu, 4) if plugin.collect_cpu is not None else None
    protocol.write_all(fd, json.dumps(report).encode("utf-8"))


class _Outcomes:
    """A context per test; each test's outcome and CPU seconds; and the CPU seconds of the
    run until its collection was done (pytest's start, the conftests, the test files)."""

    def __init__(self, cov):
        self.cov, self.outcomes, self.cpu, self.collect_cpu = cov, {}, {}, None

    def pytest_collection_finish(self, session):
        self.collect_cpu = time.process_time()  # the child's own, from its fork

    def pytest_runtest_protocol(self, item, nextitem):
        self.cov.switch_context(item.nodeid)
        self._started = time.process_time()

    def pytest_runtest_logreport(self, report):
        self.cpu[report.nodeid] = time.process_time() - getattr(self, "_started", time.process_time())
        previous = self.outcomes.get(report.nodeid, "passed")
        if report.failed or previous == "failed":
            self.outcomes[report.nodeid] = "failed"
        elif report.skipped:
            self.outcomes[report.nodeid] = "skipped"
        else:
            self.outcomes.setdefault(report.nodeid, "passed")


# --------------------------------------------------------------------------- kill


CROSS_CHECKS = 2
"""Swapped mutants that survived checked against runs of their own before the rest are
trusted. A swap that missed a copy of the target's code makes a mutant survive that a run
of its own kills; a killed one failed the tests with the mutant's code, as its own run
would (the target does not run at import or collection time)."""
MAX_LEFT_OUT = 20
"""Ids of covering tests left out by the calibration (:func:`_calibrated`) named in its report."""
SESSION_CPU_PER_MUTANT = 1.0
"""CPU seconds the session child may use per mutant (its file compiled, the code swapped),
beside a mutant's own for the collection."""


def kill(config):
    """Each mutant's verdict by the covering tests (see the module docstring)."""
    originals = {}
    for mutant in config["mutants"]:
        if mutant["file"] not in originals:
            with open(mutant["file"], "rb") as fh:
                originals[mutant["file"]] = fh.read()
    config, calibration = _calibrated(config)
    if not config["nodeids"]:  # no covering test passes with the original code, run alone
        verdicts = [{"id": m["id"], "status": "not run", "by": None} for m in config["mutants"]]
        return {"mutants": verdicts, "patched": 0, "fallback": None, "calibration": calibration}
    patched, why = {}, None
    if config.get("patch"):
        patched, why = _patched_verdicts(config, originals)
    verdicts, checked = [], 0
    for mutant in config["mutants"]:
        if _timeouts(verdicts) >= config["max_timeouts"]:
            verdicts.append({"id": mutant["id"], "status": "not run", "by": None})
            continue
        found = patched.get(mutant["id"])
        if found is not None and not _known_wrong(found[0]) and checked < CROSS_CHECKS:
            checked += 1
            own, _cpu = _with_mutant(config, mutant, originals)
            if _known_wrong(own) != _known_wrong(found[0]):
                patched, why = {}, "a patched verdict disagreed with a run of its own (mutant %s)" % mutant["id"]
            verdicts.append(own)
            continue
        verdicts.append(found[0] if found is not None else _with_mutant(config, mutant, originals)[0])
    used = sum(1 for v in verdicts if v.get("patched"))
    for verdict in verdicts:
        verdict.pop("patched", None)
    return {"mutants": verdicts, "patched": used, "fallback": why, "calibration": calibration}


def _calibrated(config):
    """``(config, report)``: the limits of the mutants' runs measured against the original
    code's own run of the covering tests (``calibrate``: ``{"factor", "floor"}``), and what
    that run said. Each test's limit becomes ``factor`` times the CPU seconds it took there,
    plus ``floor``, and so does the collection's; a mutant's whole run may use ``factor``
    times the whole run's (its collection and kept tests) plus ``start``; tests that fail
    or are not collected with the original code, run alone, are left out (each mutant
    would be "killed" by them).

    The coverage run's CPU seconds are no baseline for a verdict: coverage.py's tracing
    makes a test several times slower (more-itertools' ``test_large``: 3.8 s traced, 0.65
    s not), by a factor that varies with the load of the machine then, so a mutant ten
    times slower than the test was a timeout in one build and survived in another. The
    original's run is a run like a mutant's, without tracing, in the same process moments
    before: a ratio of two runs made alike. Without ``calibrate``, or when that run fails
    (``report["why"]``), the host's limits stand."""
    settings = config.get("calibrate")
    if not settings or not config["mutants"]:
        return config, None
    first = config["mutants"][0]
    data, status = _in_child(lambda fd: _calibration_child(config, fd), first["cpu"], first["wall"])
    try:
        said = json.loads(data.decode("utf-8"))
    except ValueError:
        said = None
    if status[0] != "exit" or status[2] != 0 or not isinstance(said, dict):
        ended = "was stopped (%s)" % status[2] if status[0] == "stopped" else "exited %s" % status[2]
        why = "the original code's run of the covering tests %s" % ended
        return config, {"why": why, "left_out": [], "left_out_count": 0}
    if said.get("collection"):  # every mutant's run would fail there: none can be judged
        why = "the covering tests' files do not collect with the original code: %s" % said["collection"]
        return dict(config, nodeids=[]), {"why": why, "left_out": [], "left_out_count": len(config["nodeids"])}
    timed, bad = said.get("cpu") or {}, set(said.get("failed") or []) | set(said.get("missing") or [])
    nodeids = [n for n in config["nodeids"] if n not in bad]
    factor, floor = float(settings["factor"]), float(settings["floor"])
    limits = dict(config.get("test_cpu") or {})
    limits.update({n: factor * float(timed[n]) + floor for n in nodeids if n in timed})
    config = dict(config, nodeids=nodeids, test_cpu=limits)
    if config.get("collect_cpu") is not None and said.get("collect") is not None:
        config["collect_cpu"] = factor * float(said["collect"]) + floor
    # the whole run's limit, a backstop above the tests' own, measured the same way: from the
    # traced run it bound first for a mutant a few seconds slower in each of many cheap tests
    # on one machine and not on another
    spent = sum(float(timed[n]) for n in nodeids if n in timed) + float(said.get("collect") or 0.0)
    whole = factor * spent + float(settings.get("start", 0.0))
    config["mutants"] = [dict(m, cpu=whole, wall=float(m["wall"]) * whole / float(m["cpu"])) for m in config["mutants"]]
    left_out = sorted(bad)
    return config, {"why": None, "left_out": left_out[:MAX_LEFT_OUT], "left_out_count": len(left_out)}


def _calibration_child(config, fd):
    """The covering tests with the original code, every one (no first failure ends it),
    held to the host's limits: each test's CPU seconds, those that failed or were not
    collected, and the CPU seconds of the collection."""
    import pytest

    chosen = _Chosen(config["nodeids"])
    files = list(dict.fromkeys(n.split("::", 1)[0] for n in config["nodeids"]))
    limits = _TestLimits(config.get("test_cpu") or {}, config.get("collect_cpu"))
    timing = _Timing()
    pytest.main([*_BASE_ARGS, "--tb=no", *files], plugins=[chosen, limits, timing, protocol.SeededTests()])
    said = {"cpu": timing.cpu, "failed": sorted(timing.failed), "missing": chosen.missing, "collect": timing.collect}
    said["collection"] = timing.collection
    protocol.write_all(fd, json.dumps(said).encode("utf-8"))
    os._exit(0)


class _Timing:
    """Each test's CPU seconds over the span its limit holds in a mutant's run
    (:class:`_TestLimits`: from the end of its setup to the start of its teardown), the
    tests that failed, the CPU seconds until the collection was done, and the first file
    that failed to collect."""

    def __init__(self):
        self.cpu, self.failed, self.collect, self._started = {}, set(), None, None
        self.collection = None

    def pytest_collectreport(self, report):
        if report.failed and self.collection is None:
            self.collection = report.nodeid or "collection"

    def pytest_collection_finish(self, session):
        self.collect = time.process_time()  # the child's own, from its fork

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.add(report.nodeid)
        if report.when == "setup" and report.passed:
            self._started = time.process_time()

    def pytest_runtest_teardown(self, item, nextitem):
        if self._started is not None:
            self.cpu[item.nodeid] = time.process_time() - self._started
            self._started = None


def _known_wrong(verdict):
    return verdict["status"] in ("killed", "timeout")


def _timeouts(verdicts):
    return sum(1 for v in verdicts if v["status"] == "timeout")


def _with_mutant(config, mutant, originals):
    """The mutant's verdict from a run of its own (the file on disk holds it); its CPU seconds."""
    path = mutant["file"]
    _write(path, _mutated(originals[path], mutant))
    try:
        return _kill_one(config, mutant)
    finally:
        _write(path, originals[path])


def _mutated(original, mutant):
    text = original.decode("utf-8", "surrogateescape")
    mutated = text[: mutant["start"]] + mutant["replacement"] + text[mutant["end"] :]
    return mutated.encode("utf-8", "surrogateescape")


def _kill_one(config, mutant):
    data, status = _in_child(lambda fd: _kill_child(config, fd), mutant["cpu"], mutant["wall"])
    return _verdict(mutant, data, status)


def _verdict(mutant, data, status):
    """A mutant's verdict from its child's output and end; its CPU seconds."""
    cpu = status[1] if isinstance(status, tuple) else 0.0
    if status[0] == "stopped":
        return {"id": mutant["id"], "status": "timeout", "by": None}, cpu
    try:
        said = json.loads(data.decode("utf-8"))
    except ValueError:
        said = {}
    if status[0] == "exit" and status[2] == 0:
        return {"id": mutant["id"], "status": "survived", "by": None}, cpu
    by = said.get("failed") if isinstance(said.get("failed"), str) else None
    return {"id": mutant["id"], "status": "killed", "by": by}, cpu


# --------------------------------------------------------------------------- patched


def _patched_verdicts(config, originals):
    """``({mutant id: (verdict, cpu)}, why)``: the verdicts of a session that collected the
    tests once (those of the mutants it could patch, up to the count of timeouts), and why there are
    none when it could not run. The files are put back whatever became of the session."""
    first, count = config["mutants"][0], len(config["mutants"])
    cpu = first["cpu"] + SESSION_CPU_PER_MUTANT * count  # the collection, then a compile per mutant
    wall = sum(m["wall"] for m in config["mutants"]) + first["wall"] + SESSION_CPU_PER_MUTANT * count
    try:
        data, status = _in_child(lambda fd: _session_child(config, originals, fd), cpu, wall)
    finally:
        for path, original in originals.items():
            _write(path, original)
    try:
        said = json.loads(data.decode("utf-8"))
    except ValueError:
        said = None
    if not isinstance(said, dict) or said.get("verdicts") is None:
        why = said.get("why") if isinstance(said, dict) else None
        return {}, why or "the session child ended without verdicts (%s %s)" % (status[0], status[2])
    found = {}
    for entry in said["verdicts"]:
        verdict, cpu = entry
        verdict["patched"] = True
        found[verdict["id"]] = (verdict, cpu)
    return found, None


def _session_child(config, originals, fd):
    """Collect the covering tests once; then each patchable mutant in a child of this
    process (:func:`_run_patched`). Writes ``{"verdicts": [[verdict, cpu], ...]}`` or
    ``{"why": ...}``."""
    import pytest

    failed = _FirstFailure()  # the collection's; a mutant's child ends at its first failure
    chosen = _Chosen(config["nodeids"])
    files = list(dict.fromkeys(n.split("::", 1)[0] for n in config["nodeids"]))
    limits = _TestLimits(config.get("test_cpu") or {})

    class Loop:
        @pytest.hookimpl(tryfirst=True)
        def pytest_runtestloop(self, session):
            if session.testsfailed or failed.nodeid is not None or chosen.missing or not session.items:
                said = {"why": "the session did not collect every covering test"}
            else:
                said = _run_patched(config, originals, session, failed)
            protocol.write_all(fd, json.dumps(said).encode("utf-8"))
            os._exit(0)

    pytest.main([*_BASE_ARGS, *_KILL_ARGS, *files], plugins=[failed, chosen, limits, Loop(), protocol.SeededTests()])
    protocol.write_all(fd, json.dumps({"why": "pytest ended before running the tests"}).encode("utf-8"))
    os._exit(0)


def _run_patched(config, originals, session, failed):
    patch = config["patch"]
    path = config["mutants"][0]["file"]
    functions = _live_functions(path, patch["qualname"], patch["first"], patch["last"])
    if not functions:
        return {"why": "no function object of %s was found" % patch["qualname"]}
    verdicts = []
    for mutant in config["mutants"]:
        if _timeouts([v for v, _ in verdicts]) >= config["max_timeouts"]:
            break
        if not mutant.get("patch") or mutant["file"] != path:
            continue
        mutated = _mutated(originals[path], mutant)
        swaps = _mutant_code(mutated, path, functions)
        if swaps is None:
            continue
        _write(path, mutated)  # what reads the file (a subprocess, inspect) sees the mutant
        try:
            body = functools.partial(_patched_child, session, os.getpid(), failed, swaps)
            data, status = _in_child(body, mutant["cpu"], mutant["wall"])
        finally:
            _write(path, originals[path])
        verdicts.append(list(_verdict(mutant, data, status)))
    return {"verdicts": verdicts}


def _live_functions(path, qualname, first, last):
    """Every function object whose code is the target's (its qualified name, in ``path``,
    starting within the target's lines): the module's, and the copies and wrapped ones
    other modules hold."""
    import gc
    import types

    real, seen, found = os.path.realpath(path), {}, []
    name = qualname.rsplit(".", 1)[-1]
    for obj in gc.get_objects():
        if type(obj) is not types.FunctionType:
            continue
        code = obj.__code__
        if code.co_name != name or getattr(code, "co_qualname", qualname) != qualname:
            continue
        if not first <= code.co_firstlineno <= last:
            continue
        filename = code.co_filename
        if filename not in seen:
            seen[filename] = os.path.realpath(filename)
        if seen[filename] == real:
            found.append(obj)
    return found


def _mutant_code(mutated, path, functions):
    """``[(function, mutant code)]`` for the mutated file's text, or None when a function's
    code cannot be swapped (the text does not compile, the code is not found, or its free
    variables differ)."""
    try:
        module = compile(mutated, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    codes = {}
    pending = [module]
    while pending:
        code = pending.pop()
        codes.setdefault((getattr(code, "co_qualname", code.co_name), code.co_firstlineno), code)
        pending.extend(c for c in code.co_consts if hasattr(c, "co_code"))
    swaps = []
    for function in functions:
        old = function.__code__
        new = codes.get((getattr(old, "co_qualname", old.co_name), old.co_firstlineno))
        if new is None or new.co_freevars != old.co_freevars or new.co_name != old.co_name:
            return None
        swaps.append((function, new))
    return swaps


def _patched_child(session, parent, failed, swaps, fd):
    """Run the collected tests with the target's code swapped, stopping at the first failure."""
    _die_with(parent)
    failed.fd = fd
    for function, code in swaps:
        function.__code__ = code
    items = session.items
    for i, item in enumerate(items):
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=items[i + 1] if i + 1 < len(items) else None)
        if session.shouldfail or session.shouldstop:
            break
    protocol.write_all(fd, json.dumps({"failed": failed.nodeid}).encode("utf-8"))
    os._exit(0 if failed.nodeid is None and failed.ran else 1)


def _die_with(parent):
    """SIGKILL when the session child ``parent`` ends (killed at its limits, say): a mutant's
    run never outlives the process that holds it to its limits."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it ended before the call
        os._exit(70)


def _kill_child(config, fd):
    import pytest

    nodeids = config["nodeids"]
    failed = _FirstFailure(fd)
    chosen = _Chosen(nodeids)
    files = list(dict.fromkeys(n.split("::", 1)[0] for n in nodeids))
    limits = _TestLimits(config.get("test_cpu") or {}, config.get("collect_cpu"))
    code = pytest.main([*_BASE_ARGS, *_KILL_ARGS, *files], plugins=[failed, chosen, limits, protocol.SeededTests()])
    if failed.nodeid is None and chosen.missing:
        failed.nodeid = "collection"  # the mutant changed which tests there are
    protocol.write_all(fd, json.dumps({"failed": failed.nodeid}).encode("utf-8"))
    os._exit(0 if code == 0 and failed.nodeid is None and failed.ran else 1)


class _Chosen:
    """Runs only ``nodeids``, in the order collected (:func:`protocol.keep_only`); notes the
    ids that were not collected."""

    def __init__(self, nodeids):
        self.wanted, self.missing = set(nodeids), []

    def pytest_collection_modifyitems(self, session, config, items):
        self.missing = protocol.keep_only(config, items, self.wanted)


class _FirstFailure:
    """The first failing test's id. With ``fd`` (a mutant's child) the child ends at that
    failure, its verdict written: the tests after it, and the subtests after it in the same
    test, cannot change it."""

    def __init__(self, fd=None):
        self.nodeid, self.ran, self.fd = None, False, fd

    def pytest_runtest_logreport(self, report):
        self.ran = True
        if report.failed and self.nodeid is None:
            self._failed(report.nodeid)

    def pytest_collectreport(self, report):
        if report.failed and self.nodeid is None:
            self._failed(report.nodeid or "collection")

    def _failed(self, nodeid):
        self.nodeid = nodeid
        if self.fd is not None:
            protocol.write_all(self.fd, json.dumps({"failed": nodeid}).encode("utf-8"))
            os._exit(1)


class _TestLimits:
    """Each test's CPU limit (``{nodeid: seconds}``) as a deadline of the running child's CPU
    time, which the parent that holds it to its limits reads (:func:`_in_child`). It holds
    for the test's call (its subtests too), from the end of its setup to the start of its
    teardown: a module's fixture, which the coverage run may have charged to a test this
    run deselects, is not the test's to pay. With ``collection`` (a mutant's own run, which
    imports the mutant), the run until its collection is done has that limit too: a mutant
    of a target that runs at import and loops there is stopped at it, not at the limit of
    every covering test together."""

    def __init__(self, limits, collection=None):
        self.limits = limits
        if collection:
            _set_deadline(protocol.cpu_seconds(os.getpid()) + float(collection))

    def pytest_collection_finish(self, session):
        _set_deadline(0.0)

    def pytest_runtest_logreport(self, report):
        limit = self.limits.get(report.nodeid)
        if report.when == "setup" and report.passed and limit is not None:
            _set_deadline(protocol.cpu_seconds(os.getpid()) + float(limit))

    def pytest_runtest_teardown(self, item, nextitem):
        _set_deadline(0.0)


def _set_deadline(seconds):
    shared = _DEADLINE["map"]
    if shared is not None:
        shared[:8] = struct.pack("d", seconds)


def _deadline(shared):
    seconds = struct.unpack("d", shared[:8])[0]
    return seconds if seconds > 0 else None


# --------------------------------------------------------------------------- children


def _in_child(body, cpu, wall):
    """Run ``body(write_fd)`` in a forked child held to ``cpu`` CPU seconds and a stretching
    wall-clock guard of ``wall``: what it wrote, and ``("exit", cpu, code)`` or
    ``("stopped", cpu, reason)``."""
    read_fd, write_fd = os.pipe()
    shared = mmap.mmap(-1, 8)  # the running test's CPU deadline (:class:`_TestLimits`), 0: none
    pid = os.fork()
    if pid == 0:
        try:
            _DEADLINE["map"] = shared
            os.close(read_fd)
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDWR)
            for target in (0, 1, 2):
                os.dup2(null, target)
            body(protocol.raise_descriptor(write_fd))
        finally:
            os._exit(70)
    os.close(write_fd)
    guard, data, over = protocol.WallGuard(wall, pid), b"", None
    while True:
        left = guard.left()
        ready, _, _ = select.select([read_fd], [], [], min(left, _POLL) if left > 0 else _POLL)
        if ready:
            chunk = os.read(read_fd, 1 << 20)
            if not chunk:
                break
            data += chunk
        elif _exited(pid):  # a process it forked may hold the pipe open: read what is there
            data += _drain(read_fd)
            break
        deadline = _deadline(shared)
        over = protocol.over_limit(pid, cpu if deadline is None else min(cpu, deadline), guard)
        if over is not None:
            break
    protocol.kill_group(pid)
    os.close(read_fd)
    shared.close()
    _, status, usage = os.wait4(pid, 0)
    used = usage.ru_utime + usage.ru_stime
    if over is not None:
        return data, ("stopped", used, over)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    return data, ("exit", used, code)


def _exited(pid):
    """Whether child ``pid`` has exited (it stays unreaped: :func:`os.wait4` reaps it)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _drain(fd):
    """What the pipe ``fd`` holds now, read without waiting for its other end to close."""
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk


def _write(path, data):
    with open(path, "wb") as fh:
        fh.write(data)


if __name__ == "__main__":
    main()
