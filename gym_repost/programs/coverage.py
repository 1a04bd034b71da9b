"""Measure branch coverage of the candidate's lines (runs inside the sandbox).

Configuration (see :mod:`gym_repost.programs`): ``{"script": SCRIPT, "start": START,
"end": END}``. It runs SCRIPT as ``__main__`` under coverage.py with branch measurement;
its result: executed and missing lines and branches of SCRIPT whose source line lies in
START..END, and how the script ended (or ``{"error": ...}`` without coverage.py).
"""

import json
import os
import runpy
import stat
import sys

try:
    from . import protocol
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]


def main():
    config = protocol.read_config()
    script, start, end = os.path.abspath(config["script"]), int(config["start"]), int(config["end"])
    try:
        import coverage
    except ImportError:
        protocol.write_result({"error": "coverage is not installed in the sandbox's Python"})
        os._exit(0)
    sys.argv = [script]
    sys.path[0] = os.path.dirname(script)
    import builtins

    builtins.__gym_repost_record__ = lambda code_under_test: code_under_test  # measured, not recorded
    cov = coverage.Coverage(branch=True, data_file=None, include=[script])
    cwd, mode = os.getcwd(), os.stat(".").st_mode
    with open(script, "rb") as fh:
        source = fh.read()
    outcome = "passed"
    cov.start()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        outcome = "passed" if exc.code in (None, 0) else "exit %r" % (exc.code,)
    except BaseException as exc:
        outcome = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    cov.stop()
    _put_back(cwd, mode, script, source)
    report_file = os.path.join(cwd, ".coverage.json")
    cov.json_report(outfile=report_file, include=[script])
    with open(report_file, encoding="utf-8") as fh:
        files = json.load(fh)["files"]
    data = next(iter(files.values())) if files else {}

    def inside(line):
        return start <= line <= end

    result = {
        "outcome": outcome,
        "executed_lines": [n for n in data.get("executed_lines", []) if inside(n)],
        "missing_lines": [n for n in data.get("missing_lines", []) if inside(n)],
        "executed_branches": [b for b in data.get("executed_branches", []) if inside(b[0])],
        "missing_branches": [b for b in data.get("missing_branches", []) if inside(b[0])],
    }
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    protocol.write_result(result)
    os._exit(0)


def _put_back(cwd, mode, script, source):
    """The working directory and the script as they were before the run, as far as the
    report needs them: a target that empties its working directory (python-fsutil's
    ``delete_dir_content('')``) took the script's source, which the report reads, and the
    measurement ended without a result."""
    os.makedirs(cwd, exist_ok=True)
    try:
        os.chmod(cwd, stat.S_IMODE(mode))
    except OSError:
        pass
    os.chdir(cwd)
    try:
        with open(script, "rb") as fh:
            same = fh.read() == source
    except OSError:
        same = False
    if not same:
        with open(script, "wb") as fh:
            fh.write(source)


if __name__ == "__main__":
    main()
