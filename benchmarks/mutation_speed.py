"""Mutation score of one focal file: ours against cosmic-ray and mutmut, in one run.

The focal file (``grades/core.py``, 49 lines: a module of six functions with branches,
loops and constants) and its five pytest tests are below. Three tools compute its
mutation score:

* ``ours``: :func:`gym_repost.harness.testfile.run_test_file`, one run of the
  warm local sandbox (pytest and coverage preloaded, as the environment and the CLI
  start it): the tests once, their calls into the focal file recorded and replayed
  under coverage in a clean process, then a calibration run and every mutant and decoy
  in a fresh child of a clean zygote, the variant written as the focal file on disk,
  running only its covering tests (the design that keeps every figure out of the test
  code's reach; before it, each mutant was loaded from memory into a child forked from
  the test session). Timed from the call to the parsed report; the sandbox is started
  (and warmed with two untimed runs) before. ``ours_cold_imports`` is the same without
  the preload (pytest and coverage imported by every run). ``ours_default_cap`` scores
  the seeded sample of ``TestFileEvaluation.max_mutants`` (50) mutants that test-file
  tasks use by default, the estimate's interval reported, instead of all of them.
* ``mutmut`` 3: ``mutmut run`` on a fresh copy of the project (its own trampolines and
  forked workers), wall clock of the command.
* ``cosmic-ray`` 8: ``cosmic-ray init`` + ``cosmic-ray exec`` on a fresh copy (the file
  rewritten on disk and ``python -m pytest -x -q tests`` started per mutant), wall clock.

Each tool counts mutants with its own operators; the record has the counts, the scores
and the time per mutant as well as the totals. On a shared machine wall-clock times
follow the load, so each tool's CPU time (user + system, of every process it waited for)
is recorded too: for ours, the in-sandbox program run the same way outside the sandbox,
forked from a process with pytest and coverage imported, as the warm sandbox does.

cosmic-ray and mutmut are installed into a separate virtual environment
(``--tools-venv``, created on first use with pip), so the project's environment is left
alone.

Prints the figures and appends a JSON record (machine, date, load) to
``benchmarks/results/mutation_speed.jsonl``.

Usage::

    python benchmarks/mutation_speed.py [--runs 15] [--tools-venv DIR] [--skip-external]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, machine, now, summary
from gym_repost.harness.testfile import (
    PROGRAM_NAME,
    _config,
    run_test_file,
    select_mutants,
    shuffled_variants,
)
from gym_repost.sandbox import get_sandbox
from gym_repost.sandbox.programs import program_files, program_stdin
from gym_repost.task import (
    Provenance,
    RepositoryView,
    TestFileEvaluation,
    TestFileMetrics,
    TestFileTask,
)

TARGET_SECONDS = 0.5
DEFAULT_MAX_MUTANTS = TestFileEvaluation.model_fields["max_mutants"].default
MUTMUT = "mutmut==3.8.1"
COSMIC_RAY = "cosmic-ray==8.7.0"

FOCAL = '''\
"""Grading helpers: letters, averages, curves and summaries of exam scores."""

PASS_MARK = 50
BANDS = ((90, "A"), (75, "B"), (60, "C"), (PASS_MARK, "D"))


def letter(score):
    if score < 0 or score > 100:
        raise ValueError(f"score out of range: {score}")
    for threshold, grade in BANDS:
        if score >= threshold:
            return grade
    return "F"


def average(scores):
    if not scores:
        return 0.0
    return sum(scores) / len(scores)


def curve(scores, target=70):
    shift = target - average(scores)
    return [min(100, max(0, s + shift)) for s in scores]


def passed(scores):
    count = 0
    for s in scores:
        if s >= PASS_MARK:
            count += 1
    return count


def best(scores):
    top = scores[0]
    i = 1
    while i < len(scores):
        if scores[i] > top:
            top = scores[i]
        i += 1
    return top


def summary(scores):
    if not scores:
        return {"count": 0, "mean": 0.0, "passed": 0}
    return {"count": len(scores), "mean": round(average(scores), 2),
            "best": best(scores), "passed": passed(scores)}
'''

TESTS = """\
import pytest

from grades.core import average, curve, letter, passed, summary


def test_letter():
    assert [letter(s) for s in (95, 90, 80, 75, 60, 50, 49, 0)] == ["A", "A", "B", "B", "C", "D", "F", "F"]
    with pytest.raises(ValueError):
        letter(101)
    with pytest.raises(ValueError):
        letter(-1)


def test_average():
    assert average([]) == 0.0
    assert average([1, 2, 3, 6]) == 3.0


def test_curve():
    assert curve([60, 70, 80]) == [60, 70, 80]
    assert curve([10, 20], target=65) == [60, 70]
    assert curve([0, 100], target=90) == [40, 100]


def test_passed():
    assert passed([49, 50, 51, 10]) == 2


def test_summary():
    assert summary([]) == {"count": 0, "mean": 0.0, "passed": 0}
    assert summary([40, 90, 65]) == {"count": 3, "mean": 65.0, "best": 90, "passed": 2}
"""

PROJECT = {
    "grades/__init__.py": "",
    "grades/core.py": FOCAL,
    "tests/test_core.py": TESTS,
    "pyproject.toml": '[tool.mutmut]\npaths_to_mutate = ["grades/"]\ntests_dir = ["tests/"]\n',
    "cr.toml": textwrap.dedent("""\
               [cosmic-ray]
               module-path = "grades/core.py"
               timeout = 10.0
               excluded-modules = []
               test-command = "python -m pytest -x -q tests"

               [cosmic-ray.distributor]
               name = "local"
               """),
}


def the_task(max_mutants: int = 10_000) -> TestFileTask:
    """The focal file as a test-file task; the default cap keeps every mutant."""
    spec = TestFileEvaluation(
        test_path="tests/test_core.py",
        focal_file="grades/core.py",
        focal_module="grades.core",
        ground_truth=TESTS,
        max_mutants=max_mutants,
    )
    return TestFileTask(
        name="bench/grades",
        provenance=Provenance(source="benchmark", repo="grades", file="grades/core.py", qualname="grades.core"),
        repository=RepositoryView(
            files={"grades/__init__.py": "", "grades/core.py": FOCAL}, target_file="grades/core.py"
        ),
        evaluation=spec,
        reference=TestFileMetrics(),
    )


def measure_ours(runs: int, preload: bool, max_mutants: int = 10_000) -> dict[str, Any]:
    """Median time of ``run_test_file`` on a warm sandbox, and what it found."""
    task = the_task(max_mutants)
    times: list[float] = []
    with get_sandbox("local", workers=2, preload=["pytest", "coverage"] if preload else []) as sandbox:
        for _ in range(2):
            run_test_file(sandbox, task, TESTS)
        for _ in range(runs):
            started = time.perf_counter()
            run = run_test_file(sandbox, task, TESTS)
            times.append(time.perf_counter() - started)
    score = run.mutation
    assert run.status == "completed" and score is not None, run.message
    return {
        "seconds": statistics.median(times),
        "times": summary(times),
        "mutants": score.total,
        "killed": score.killed,
        "timeouts": score.timeouts,
        "survived": score.survived,
        "unapplied": run.count_mutants("unapplied"),
        "score": score.score,
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_ours_cpu(runs: int) -> float:
    """Median CPU seconds of the in-sandbox program (all its processes), run outside it."""
    import coverage  # noqa: F401 - preloaded, as in the warm sandbox
    import pytest  # noqa: F401

    task = the_task()
    mutants, _ = select_mutants(FOCAL, task.evaluation.max_mutants, 0)
    variants, sources = shuffled_variants(mutants, FOCAL, random.Random(0))
    root = Path(tempfile.mkdtemp(prefix="mutation-cpu-"))
    files = {**task.repository.files, task.evaluation.test_path: TESTS, **program_files("testfile")}
    stdin = program_stdin(_config(task, variants, FOCAL, 2, sources), "token").encode()
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    cpu = []
    for _ in range(runs):
        before = _children_cpu()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.chdir(root)
            os.dup2(read_fd, 0)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            os.write(write_fd, stdin)  # small enough for the pipe's buffer
            sys.argv = [PROGRAM_NAME]
            sys.path.insert(0, str(root))
            exec(compile((root / PROGRAM_NAME).read_text(), PROGRAM_NAME, "exec"), {"__name__": "__main__"})
            os._exit(1)
        os.close(read_fd)
        os.close(write_fd)
        os.waitpid(pid, 0)
        cpu.append(_children_cpu() - before)
    shutil.rmtree(root, ignore_errors=True)
    return statistics.median(cpu)


def tools_python(venv: Path) -> Path:
    """The tools' interpreter, creating the virtual environment on first use."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", MUTMUT, COSMIC_RAY, "pytest"], check=True)
    return python


def fresh_project() -> Path:
    """A new copy of the project (the external tools write into it)."""
    root = Path(tempfile.mkdtemp(prefix="mutation-speed-"))
    for path, text in PROJECT.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


def _tool_env(python: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def measure_mutmut(python: Path) -> dict[str, Any]:
    """``mutmut run`` on a fresh copy: wall clock, mutants and their verdicts."""
    root = fresh_project()
    env = _tool_env(python)
    started, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run([str(python.parent / "mutmut"), "run"], cwd=root, env=env, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - started, _children_cpu() - cpu
    results = subprocess.run(
        [str(python.parent / "mutmut"), "results", "--all", "true"], cwd=root, env=env, capture_output=True, text=True
    ).stdout
    verdicts = re.findall(r"__mutmut_\d+: (\w[\w ]*)", results)
    shutil.rmtree(root, ignore_errors=True)
    if done.returncode != 0 or not verdicts:
        raise RuntimeError(f"mutmut failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    killed = sum(v == "killed" for v in verdicts)
    timeouts = sum(v == "timeout" for v in verdicts)
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "mutants": len(verdicts),
        "killed": killed,
        "timeouts": timeouts,
        "survived": sum(v == "survived" for v in verdicts),
        "score": (killed + timeouts) / len(verdicts),
    }


def measure_cosmic_ray(python: Path) -> dict[str, Any]:
    """``cosmic-ray init`` + ``exec`` on a fresh copy: wall clock, mutants and survivors."""
    root = fresh_project()
    env = _tool_env(python)
    started, cpu = time.perf_counter(), _children_cpu()
    for step in ("init", "exec"):
        done = subprocess.run(
            [str(python.parent / "cosmic-ray"), step, "cr.toml", "cr.sqlite"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"cosmic-ray {step} failed: {done.stderr[-500:]}")
    seconds, cpu = time.perf_counter() - started, _children_cpu() - cpu
    report = subprocess.run(
        [str(python.parent / "cr-report"), "cr.sqlite"], cwd=root, env=env, capture_output=True, text=True
    ).stdout
    shutil.rmtree(root, ignore_errors=True)
    total = int(re.search(r"total jobs: (\d+)", report).group(1))  # type: ignore[union-attr]
    survived = int(re.search(r"surviving mutants: (\d+)", report).group(1))  # type: ignore[union-attr]
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "mutants": total,
        "survived": survived,
        "score": (total - survived) / total,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of ours (median reported)")
    parser.add_argument(
        "--tools-venv",
        type=Path,
        default=Path.home() / ".cache" / "gym-repost" / "mutbench-venv",
        help="virtual environment holding mutmut and cosmic-ray (created if missing)",
    )
    parser.add_argument("--skip-external", action="store_true", help="measure ours only")
    parser.add_argument("--note", default="", help="a note kept in the record (what was measured, and why)")
    args = parser.parse_args()

    results: dict[str, Any] = {
        "ours": measure_ours(args.runs, preload=True),
        "ours_cold_imports": measure_ours(max(3, args.runs // 3), preload=False),
        "ours_default_cap": measure_ours(args.runs, preload=True, max_mutants=DEFAULT_MAX_MUTANTS),
    }
    results["ours"]["cpu_seconds"] = measure_ours_cpu(max(3, args.runs // 3))
    if not args.skip_external:
        python = tools_python(args.tools_venv)
        results["mutmut"] = measure_mutmut(python)
        results["cosmic_ray"] = measure_cosmic_ray(python)
    ours = results["ours"]["seconds"]
    for name, figures in results.items():
        figures["ms_per_mutant"] = 1000 * figures["seconds"] / figures["mutants"]
        figures["ratio_to_ours"] = figures["seconds"] / ours
        cpu = figures.get("cpu_seconds")
        if cpu is not None:
            figures["cpu_ratio_to_ours"] = cpu / results["ours"]["cpu_seconds"]
        print(
            f"{name:<18} {figures['seconds']:8.3f} s  {figures['mutants']:4d} mutants  "
            f"{figures['ms_per_mutant']:7.1f} ms/mutant  score {figures['score']:.3f}  "
            f"x{figures['ratio_to_ours']:.1f} ours"
            + (f"  cpu {cpu:.3f} s (x{figures['cpu_ratio_to_ours']:.1f})" if cpu is not None else "")
        )
    verdict = "within" if ours <= TARGET_SECONDS else "OVER"
    print(f"ours: {ours:.3f} s, {verdict} the {TARGET_SECONDS} s target (every mutant)")
    capped = results["ours_default_cap"]
    print(
        f"ours, the default sample of {capped['mutants']} mutants: {capped['seconds']:.3f} s, "
        f"{'within' if capped['seconds'] <= TARGET_SECONDS else 'OVER'} the target"
    )
    record = {
        "benchmark": "mutation_speed",
        "date": now(),
        "machine": machine(),
        "focal_lines": FOCAL.count("\n"),
        "tests": TESTS.count("\ndef test_"),
        "target_seconds": TARGET_SECONDS,
        "tools": {"mutmut": MUTMUT, "cosmic_ray": COSMIC_RAY},
        "results": results,
        **({"note": args.note} if args.note else {}),
    }
    print(f"record appended to {append_record('mutation_speed', record)}")
    return 0 if ours <= TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
