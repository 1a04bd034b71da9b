"""Measure branch coverage of the candidate's lines (runs inside the sandbox).

Not imported by gym-repost: its text is copied into the run directory and started as::

    python3 _gym_repost_coverage.py SCRIPT START END

It runs SCRIPT as ``__main__`` under coverage.py with branch measurement and prints, on
its last line, a marker and a JSON object: executed and missing lines and branches of
SCRIPT whose source line lies in START..END, and how the script ended.
"""

import json
import os
import runpy
import sys

MARK = "@@gym-repost-coverage@@"


def main():
    script, start, end = os.path.abspath(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    try:
        import coverage
    except ImportError:
        print(MARK + json.dumps({"error": "coverage is not installed in the sandbox's Python"}))
        sys.stdout.flush()
        os._exit(0)
    sys.argv = [script]
    sys.path[0] = os.path.dirname(script)
    import builtins
    builtins.__gym_repost_record__ = lambda code_under_test: code_under_test  # measured, not recorded
    cov = coverage.Coverage(branch=True, data_file=None, include=[script])
    outcome = "passed"
    cov.start()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        outcome = "passed" if exc.code in (None, 0) else "exit %r" % (exc.code,)
    except BaseException as exc:  # noqa: BLE001 - report, the measurement still counts
        outcome = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    cov.stop()
    report_file = os.path.join(os.getcwd(), ".coverage.json")
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
    sys.stdout.flush()
    os.write(1, ("\n" + MARK + json.dumps(result) + "\n").encode())
    os._exit(0)


if __name__ == "__main__":
    main()
