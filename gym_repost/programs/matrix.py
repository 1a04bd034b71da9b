"""Runs one code against a list of tests inside the sandbox (standard library only).

Its configuration and a one-time token come through the protocol of
:mod:`gym_repost.programs`. The configuration: ``script`` (the evaluation script with the code inserted as
``{name}_new_implementation``, its ``__main__`` block removed), ``name``, ``class_name``,
``style`` (``assert``: bind the code to the target's own name first; ``equivalence``:
leave the script's layout as it is), ``tests`` (sources), ``timeout`` (CPU seconds per
test), ``wall_factor`` (the wall clock stops a test at this many times ``timeout``) and
``preload`` (modules the script imports, imported once here so each test starts fast).

Each test runs in its own child process (``fork``): the child loads the script as a fresh
``__main__`` module, binds the code, runs the test with stdout and stderr sent to
``/dev/null``, and reports one JSON line on a private pipe. This process kills the
child's process group when the test's time is up, so one test's infinite loop, crash,
``os._exit`` or output flood touches only that test, and tests cannot see each other's
state.

The result, ``{"results": [...]}``, is followed by the token's line. This process never
runs the code under test, and the token is read only after every test has finished
(children close their copy of its descriptor at once, unread), so no code under test
ever holds the token: a code that exits early or prints a fake result cannot claim
passes. (Like the test harness, it does not defend against code that
forges its own child's report pipe: the sandbox is the security boundary, not this file.)

A test is a source string, or a dict naming its ``script`` and either ``calls`` (source of
expressions) and ``setup``: run the setup, evaluate the calls, report their values as plain
data (:mod:`gym_repost.programs.values`; outcome ``values``, or ``error`` with
``NotPlainData``), or ``test`` and ``values``: run the test with ``__gym_repost_values__``
bound to the decoded values (the judge's side of :mod:`gym_repost.data.value_tests`).

Outcomes per test: ``pass``; ``fail`` (an ``AssertionError``); ``error`` (any other
exception, an early exit, a crash); ``timeout``. ``phase`` says whether it happened while
loading the script (then every test gets the same outcome: the script is loaded the same
way for each) or in the test.
"""

import builtins
import json
import os
import select
import sys
import types

try:
    from . import protocol, values
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]
    import _gym_repost_values as values  # type: ignore[no-redef,import-not-found]

_MAX_MESSAGE = 300


def _verdict(outcome, exc=None, phase="test"):
    result = {"outcome": outcome, "phase": phase, "exception": None, "message": ""}
    if exc is not None:
        result["exception"] = type(exc).__name__
        try:
            result["message"] = str(exc)[:_MAX_MESSAGE]
        except BaseException:
            result["message"] = "<str() failed>"
    return result


def _bind(namespace, name, class_name):
    """Make the code under test answer to the target's own name."""
    new = name + "_new_implementation"
    if class_name is None:
        namespace[name] = namespace[new]
        return
    owner = namespace[class_name]
    # through __dict__ so that staticmethod and classmethod wrappers are kept
    setattr(owner, name, owner.__dict__[new])


def _load(spec):
    module = types.ModuleType("__main__")
    path = os.path.abspath(spec["script"])
    module.__file__ = path
    sys.modules["__main__"] = module
    with open(path, encoding="utf-8") as fh:
        code = compile(fh.read(), path, "exec", dont_inherit=True)
    exec(code, module.__dict__)
    if spec["style"] == "assert":
        _bind(module.__dict__, spec["name"], spec.get("class_name"))
    return module.__dict__


def _run_test(spec, index, report):
    entry = spec["tests"][index]
    if isinstance(entry, dict):
        spec = dict(spec, script=entry.get("script", spec["script"]))
    try:
        namespace = _load(spec)
    except BaseException as exc:
        return _verdict("error", exc, phase="load")
    report({"loaded": True})
    try:
        if isinstance(entry, dict) and "calls" in entry:
            return _values(entry, index, namespace)
        source = entry if isinstance(entry, str) else entry["test"]
        if isinstance(entry, dict):
            namespace["__gym_repost_values__"] = [values.decode(v) for v in entry.get("values", [])]
        exec(compile(source, "<test %d>" % index, "exec", dont_inherit=True), namespace)
    except AssertionError as exc:
        return _verdict("fail", exc)
    except BaseException as exc:
        return _verdict("error", exc)
    return _verdict("pass")


def _values(entry, index, namespace):
    """Run the test's setup, then evaluate the calls of the code under test: their values as data."""
    exec(compile(entry["setup"], "<test %d>" % index, "exec", dont_inherit=True), namespace)
    found = []
    for source in entry["calls"]:
        value = eval(compile(source, "<test %d>" % index, "eval", dont_inherit=True), namespace)
        encoded = values.encode(value)
        if encoded is None:
            return {
                "outcome": "error",
                "phase": "test",
                "exception": "NotPlainData",
                "message": "the code returned a %s, which is not plain data" % _type_name(value),
            }
        found.append(encoded)
    return {"outcome": "values", "phase": "test", "exception": None, "message": "", "values": found}


def _type_name(value):
    try:
        return type(value).__qualname__[:100]
    except BaseException:
        return "value"


def _child(spec, index, write_fd):
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    def report(data):
        os.write(write_fd, (json.dumps(data) + "\n").encode())

    report(_run_test(spec, index, report))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _read_lines(fd, guard, pid, cpu_limit):
    """Lines the child sent until its verdict, EOF, its CPU time limit or its wall-clock
    guard (:class:`protocol.WallGuard`, which stretches while the child computes); and which
    limit stopped it (``"cpu"``, ``"wall"``, None)."""
    buffer, lines = b"", []
    while True:
        stopped = protocol.over_limit(pid, cpu_limit, guard)
        if stopped is not None:
            return lines, stopped
        left = guard.left()
        ready, _, _ = select.select([fd], [], [], min(left, 0.02) if left > 0 else 0.02)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return lines, None
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                lines.append(json.loads(line.decode("utf-8", "replace")))
            except ValueError:
                continue
            if "outcome" in lines[-1]:
                return lines, None


def _exit_verdict(status, phase):
    if os.WIFSIGNALED(status):
        message = "the process was killed by signal %d (memory or process limit?)" % os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        message = "the process exited with status %d before the test finished" % code
    return {"outcome": "error", "phase": phase, "exception": "EarlyExit", "message": message}


def _run_in_child(spec, index):
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            protocol.drop_token()
            os.close(read_fd)
            os.setpgid(0, 0)
            _child(spec, index, write_fd)
        finally:
            os._exit(0)
    try:
        os.setpgid(pid, pid)
    except OSError:  # the child already did it, or already exited
        pass
    os.close(write_fd)
    limit, wall = spec["timeout"], spec["wall_factor"] * spec["timeout"]
    lines, stopped = _read_lines(read_fd, protocol.WallGuard(wall, pid), pid, limit)
    protocol.kill_group(pid)
    _, status = os.waitpid(pid, 0)
    os.close(read_fd)
    phase = "test" if any(line.get("loaded") for line in lines) else "load"
    if lines and "outcome" in lines[-1]:
        return lines[-1]
    if stopped:
        return {
            "outcome": "timeout",
            "phase": phase,
            "exception": "Timeout",
            "message": "the test used its %.3g s of CPU time" % limit
            if stopped == "cpu"
            else "the test did not finish within %.3g s of wall-clock time" % wall,
        }
    return _exit_verdict(status, phase)


def _preload(modules):
    for name in modules:
        try:
            __import__(name)
        except BaseException:
            pass


def main():
    spec = protocol.read_config(token=True)  # the token stays in the pipe until every test has run
    builtins.__gym_repost_record__ = lambda obj: obj  # scripts assembled for the harness wrap the code in it
    sys.path[0] = os.path.dirname(os.path.abspath(spec["script"]))
    _preload(spec.get("preload", []))
    results, load_failure = [], None
    for index in range(len(spec["tests"])):
        if load_failure is None:
            result = _run_in_child(spec, index)
            if result.get("phase") == "load":
                load_failure = result
        results.append(load_failure or result)
    protocol.write_result({"results": results}, protocol.read_token(), compress=True)
    os._exit(0)


if __name__ == "__main__":
    main()
