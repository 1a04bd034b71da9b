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
  "tests": n, "errors": [...], "missing": [module, ...], "undefined": [[path, name], ...]}``
  (pytest's error lines, the modules its tests could not import, and the names whose
  ``NameError`` failed a test file's collection: :func:`protocol.undefined_names`);
  ``"error": why`` too when the suite's own code stopped pytest.
* ``kill``: for each mutant (``mutants``: ``{"id", "file", "start", "end", "replacement"}``,
  a character span of the file's text), the file on disk holds the mutant while a child
  runs ``nodeids`` (the target's covering tests; their files are collected and the rest
  deselected, and a test id the mutant's code no longer yields kills it) through pytest,
  stopping at the first failure: ``killed`` when a test fails or errors, ``timeout`` at
  its CPU limit (``cpu``) or its wall-clock guard (``wall``, a :class:`~protocol.WallGuard`), ``survived`` when
  every one passes; the file is put back after each. The children fork from this
  process, which imported pytest (never the repository) once. Past ``budget`` CPU seconds
  over all children, the rest are ``not run``: ``{"mutants": [{"id", "status", "by"}]}``.

Nothing here runs a candidate's code: this is the repository's code and its tests, the
oracle that says which mutants are known to be wrong.
"""

import json
import os
import select
import sys
import time

try:
    from . import protocol
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]

_BASE_ARGS = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "-p", "no:randomly"]
_POLL = 0.02


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
        pytest.main([*_BASE_ARGS, "--continue-on-collection-errors", *config["args"]], plugins=[plugin])
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
    covering, index = {}, {}
    for target in config["targets"]:
        by_line = data.contexts_by_lineno(os.path.abspath(target["file"])) or {}
        names = set()
        for line in range(target["first"], target["last"] + 1):
            names.update(by_line.get(line, ()))
        passed = sorted(n for n in names if plugin.outcomes.get(n) == "passed")
        covering[target["key"]] = [index.setdefault(n, len(index)) for n in passed]
    table = [[n, round(plugin.cpu.get(n, 0.0), 4)] for n in index]
    report = {"names": table, "covering": covering, "tests": len(plugin.outcomes), "errors": errors, "missing": missing}
    report["undefined"] = undefined
    protocol.write_all(fd, json.dumps(report).encode("utf-8"))


class _Outcomes:
    """A context per test; each test's outcome and CPU seconds."""

    def __init__(self, cov):
        self.cov, self.outcomes, self.cpu = cov, {}, {}

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


def kill(config):
    """Each mutant's verdict by the covering tests (see the module docstring)."""
    originals, verdicts, spent = {}, [], 0.0
    for mutant in config["mutants"]:
        if spent >= config["budget"]:
            verdicts.append({"id": mutant["id"], "status": "not run", "by": None})
            continue
        path = mutant["file"]
        if path not in originals:
            with open(path, "rb") as fh:
                originals[path] = fh.read()
        text = originals[path].decode("utf-8", "surrogateescape")
        mutated = text[: mutant["start"]] + mutant["replacement"] + text[mutant["end"] :]
        _write(path, mutated.encode("utf-8", "surrogateescape"))
        try:
            verdict, cpu = _kill_one(config, mutant)
        finally:
            _write(path, originals[path])
        spent += cpu
        verdicts.append(verdict)
    return {"mutants": verdicts}


def _kill_one(config, mutant):
    nodeids = config["nodeids"]
    data, status = _in_child(lambda fd: _kill_child(nodeids, fd), mutant["cpu"], mutant["wall"])
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


def _kill_child(nodeids, fd):
    import pytest

    failed = _FirstFailure()
    chosen = _Chosen(nodeids)
    files = list(dict.fromkeys(n.split("::", 1)[0] for n in nodeids))
    code = pytest.main([*_BASE_ARGS, "-x", *files], plugins=[failed, chosen])
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
    def __init__(self):
        self.nodeid, self.ran = None, False

    def pytest_runtest_logreport(self, report):
        self.ran = True
        if report.failed and self.nodeid is None:
            self.nodeid = report.nodeid

    def pytest_collectreport(self, report):
        if report.failed and self.nodeid is None:
            self.nodeid = report.nodeid or "collection"


# --------------------------------------------------------------------------- children


def _in_child(body, cpu, wall):
    """Run ``body(write_fd)`` in a forked child held to ``cpu`` CPU seconds and a stretching
    wall-clock guard of ``wall``: what it wrote, and ``("exit", cpu, code)`` or
    ``("stopped", cpu, reason)``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
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
        over = protocol.over_limit(pid, cpu, guard)
        if over is not None:
            break
    protocol.kill_group(pid)
    os.close(read_fd)
    _, status, usage = os.wait4(pid, 0)
    used = usage.ru_utime + usage.ru_stime
    if over is not None:
        return data, ("stopped", used, over)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    return data, ("exit", used, code)


def _write(path, data):
    with open(path, "wb") as fh:
        fh.write(data)


if __name__ == "__main__":
    main()
