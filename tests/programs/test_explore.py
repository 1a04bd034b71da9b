"""The explorer's budgets count work: the same seed keeps the same inputs, on a busy machine too."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from busy import busy_machine

from gym_repost.construct.stages import Drop
from gym_repost.construct.testgen import explore as testgen_explore
from gym_repost.construct.testgen import generate_tests
from gym_repost.construct.testgen.explore import (
    CPU_SAFETY_NOTE,
    SAFETY_NOTES,
    run_explorer,
    search_config,
    search_timeout,
    wall_clock_notes,
)
from gym_repost.programs.explore import TIMEOUT_CALLS, WAITING_CALLS
from gym_repost.sandbox.base import Sandbox
from tests.construct.test_testgen import script

# never complete (no input has fewer than no words), so the search ends on its budget of
# runs or a stall, and its mutants make the selection spend its own
CLASSIFY = """
def classify(text, limit=3):
    words = text.split()
    if not words:
        return "empty"
    if len(words) > limit:
        return "long"
    if len(words) < 0:
        return "never"
    total = 0
    for word in words:
        if word.isdigit():
            total += int(word)
        elif word.isupper():
            total -= 1
        elif len(word) > 5:
            total += 2
    return total
"""

# a negative n never ends: the per-call timer (CPU time) must stop it the same way under load
COUNTDOWN = """
def countdown(n, step=1):
    steps = 0
    while n != 0:
        n -= step
        steps += 1
    return steps
"""

# which branch a call takes is drawn from the global generator: the arcs reached, and so the
# inputs kept, follow its draws
COIN = """
import random

def coin(items, bias=0.5):
    if not items:
        return None
    if random.random() < bias:
        return items[0]
    if random.random() < bias:
        return items[len(items) // 2]
    return items[-1]
"""

# a negative bias draws from the generator until the call's timer stops it: how many draws
# that is depends on the machine's speed, and the draws after it followed
SPINNING_COIN = """
import random

def spin(items, bias=0.5):
    if bias < 0:
        while True:
            random.random()
    if not items:
        return None
    if random.random() < bias:
        return items[0]
    if random.random() < bias:
        return items[len(items) // 2]
    return items[-1]
"""

# a large n waits (forever on an event no one sets, or a second and a half asleep): no CPU
# time passes, only the wall clock
WAITS = """
import threading
import time

def waits(n, label="a"):
    if n > 3:
        WAIT
    if label == "b":
        return -n
    if len(str(label)) < 0:  # never: the search cannot complete
        return None
    return n
"""

# every run renders a table of 100 rows cell by cell, some 1,700 Python calls: runs that
# cost, whose number the budget of calls bounds; 12345 rows render until the call's timer
# stops them, after as many calls as the machine's speed allows
COSTLY = """
def _cell(value, width):
    return str(value).rjust(min(width, 12))

def render(rows, width=4):
    count = 10**8 if rows == int("12345") else 100
    total = 0
    for r in range(count):
        total += len("|".join(_cell(r * c, width) for c in range(8)))
    if width > 6:
        return "wide"
    if width < 0:
        return "narrow"
    if total < 0:  # never: the search cannot complete
        return None
    return total
"""

# each run sums ten million numbers in C: CPU time that makes no Python call, which only
# the CPU-time safety limit bounds
C_BOUND = """
def spend(n, scale=1):
    total = sum(range(10_000_000))
    if n > 3:
        return total
    if scale < 0:
        return -total
    return n
"""


def search(sandbox: Sandbox, module: str, qualname: str, **options: Any) -> dict[str, Any]:
    call_timeout = options.pop("call_timeout", None)
    calls = options.pop("calls", None)
    hang_seconds = options.pop("hang_seconds", None)
    config = search_config(script(module, qualname), **options)
    if hang_seconds is not None:
        config["hang_seconds"] = hang_seconds
    if call_timeout is not None:
        config["call_timeout"] = call_timeout
    if calls is not None:
        config["calls"] = config["mutant_calls"] = calls
    found = run_explorer(sandbox, script(module, qualname).module, config, timeout=search_timeout(config))
    assert found.get("ok"), found
    return found


def kept(found: dict[str, Any]) -> tuple[Any, ...]:
    """What the search decided: the inputs chosen, and the work it counted (no timings)."""
    stats = {k: v for k, v in found["stats"].items() if k != "setup"}
    return found["inputs"], stats, found["branch_coverage"]


@pytest.mark.parametrize(
    ("module", "qualname", "options"),
    [
        (CLASSIFY, "classify", {"executions": 600}),
        (COUNTDOWN, "countdown", {"executions": 300, "call_timeout": 0.1}),
    ],
)
def test_the_same_seed_keeps_the_same_inputs_quiet_and_busy(
    sandbox: Sandbox, module: str, qualname: str, options: dict[str, Any]
) -> None:
    first = search(sandbox, module, qualname, seed=3, **options)
    again = search(sandbox, module, qualname, seed=3, **options)
    with busy_machine(4):
        busy = search(sandbox, module, qualname, seed=3, **options)
    assert kept(first) == kept(again) == kept(busy)
    stats = first["stats"]
    assert "wall_clock_limit" not in busy["stats"] and busy["stats"]["wall_timeouts"] == 0
    assert len(first["inputs"]) >= 3
    if qualname == "countdown":
        assert stats["timeouts"] > 0  # the endless calls were stopped by CPU time
    else:
        assert stats["search_stop"] in ("stalled", "executions")
        assert stats["mutants"] > 0 and stats["mutant_executions"] > 0


@pytest.mark.parametrize("wait", ["threading.Event().wait()", "time.sleep(1.5)"])
def test_calls_that_wait_stop_the_search_after_a_count_not_a_time(sandbox: Sandbox, wait: str) -> None:
    module, options = WAITS.replace("WAIT", wait), {"seed": 5, "executions": 400, "call_timeout": 0.05}
    quiet = search(sandbox, module, "waits", **options)
    with busy_machine(4):
        busy = search(sandbox, module, "waits", **options)
    assert kept(quiet) == kept(busy)
    stats = quiet["stats"]
    assert stats["search_stop"] == "waiting calls" and stats["waiting_stop"] == "search"
    assert "wall_clock_limit" not in stats and "wall_clock_limit" not in busy["stats"]
    # the search's waiting calls, the mutant selection's, and (a sleep returns) the chosen
    # inputs' second and third runs
    assert stats["waits"] >= WAITING_CALLS
    assert stats["wall_timeouts"] == (stats["waits"] if "Event" in wait else 0)
    # what it found before it stopped is kept: inputs that return, both branches of the label
    assert len(quiet["inputs"]) >= 3 and all(i["kind"].startswith("ok:") for i in quiet["inputs"])
    assert any("'b'" in i["args"] for i in quiet["inputs"])


def test_a_different_seed_is_a_different_search(sandbox: Sandbox) -> None:
    assert kept(search(sandbox, CLASSIFY, "classify", seed=1, executions=600)) != kept(
        search(sandbox, CLASSIFY, "classify", seed=2, executions=600)
    )


def test_the_budget_of_runs_bounds_the_search(sandbox: Sandbox) -> None:
    small = search(sandbox, CLASSIFY, "classify", executions=40)["stats"]
    assert small["search_stop"] == "executions" and small["search_executions"] <= 40 + 1
    assert small["mutant_executions"] <= 40 + 5  # the last input taken is checked for stability


def test_the_wall_clock_safety_limit_is_reported(sandbox: Sandbox) -> None:
    stopped = search(sandbox, CLASSIFY, "classify", executions=10**6, wall_limit=0.0)
    assert stopped["stats"]["wall_clock_limit"] == "search" and stopped["stats"]["search_stop"] == "wall-clock limit"
    notes = wall_clock_notes(stopped)
    assert notes and notes[0].startswith("wall-clock safety limit: it stopped the search during search")


def test_test_generation_reports_a_search_the_wall_clock_cut_short(
    sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gym_repost.construct.testgen.explore"):
        result = generate_tests(sandbox, script(CLASSIFY, "classify"), wall_limit=0.0)
    said = result.detail if isinstance(result, Drop) else " ".join(result.safety_limits)
    assert "wall-clock safety limit: it stopped the search during search" in said
    assert any("wall-clock safety limit" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_the_budget_of_calls_stops_a_search_whose_runs_cost(sandbox: Sandbox) -> None:
    """prettytable's ``paginate`` renders a table page by page: 600 runs spent two minutes
    of CPU time, and the sandbox's 60-second CPU limit killed the explorer on one build and
    not on another ('test generation failed: exit -24'). The count of Python calls the runs
    make stops such a search, on every machine at the same run."""
    options = {"seed": 2, "executions": 5000, "calls": 3_000_000}
    quiet = search(sandbox, COSTLY, "render", **options)
    with busy_machine(4):
        busy = search(sandbox, COSTLY, "render", **options)
    assert kept(quiet) == kept(busy)
    stats = quiet["stats"]
    assert stats["search_stop"] == "calls" and stats["search_executions"] < 1000  # not the budget of runs
    assert 3_000_000 <= stats["search_calls"] < 3_000_000 + TIMEOUT_CALLS  # the run that crossed it is the last
    # runs their timer stopped (12345 rows, mutants that never end) counted TIMEOUT_CALLS
    # each, however far they got
    assert stats["timeouts"] > 0
    assert stats["mutant_budget_spent"] == "calls"
    assert stats["calls"] - stats["search_calls"] < 3_000_000 + TIMEOUT_CALLS
    assert len(quiet["inputs"]) >= 3


def test_a_search_the_cpu_limit_stops_is_dropped_as_a_limit(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search whose CPU time runs out before its counted budgets do (work in C calls the
    count does not see) is not 'test generation failed': it is dropped with a reason and a
    note that name the safety limit, which the build lists among the limits that fired."""
    monkeypatch.setattr(testgen_explore, "CPU_LIMIT", 2.0)
    config = search_config(script(C_BOUND, "spend"), executions=10**5)
    found = run_explorer(sandbox, script(C_BOUND, "spend").module, config, timeout=search_timeout(config))
    assert found["ok"] is False and found["kind"] == "cpu limit"
    assert found["error"].startswith(f"{CPU_SAFETY_NOTE}: the explorer used its 2 s of CPU time")
    dropped = generate_tests(sandbox, script(C_BOUND, "spend"), executions=10**5)
    assert isinstance(dropped, Drop) and dropped.reason == "search over its CPU limit"
    assert dropped.detail.startswith(CPU_SAFETY_NOTE)
    assert any(note in dropped.detail for note in SAFETY_NOTES)  # what the builder lists as a limit


def test_an_input_whose_run_makes_too_many_calls_is_not_chosen() -> None:
    """Inputs too slow to be chosen were those over 0.2 s of CPU time: an input near it was
    chosen on one machine and not on another. They are those over SLOW_CALLS calls."""
    from gym_repost.programs.explore import Trial
    from gym_repost.programs.selection import SLOW_CALLS, Selection

    trials = []
    for n, calls in enumerate([SLOW_CALLS + 1, SLOW_CALLS, 10]):
        trial = Trial(f"(None, ({n},), {{}})", "search")
        trial.kind, trial.fingerprint, trial.calls = "ok:int", str(n), calls
        trials.append(trial)
    explorer = _Runs()
    explorer.trials = trials
    explorer.stable = lambda trial: True  # type: ignore[attr-defined]
    selection = Selection(explorer, 4)
    selection.by_diversity()
    assert selection.chosen == trials[1:]


# an int argument is a file descriptor to open(): the search tries 0, 1, 2... and each call
# closes the descriptor it opened, standard output and the protocol's pipes among them
FIRST_LINE = """
def first_line(path):
    with open(path) as fh:
        return fh.readline().strip()
"""


def test_a_search_whose_inputs_close_low_descriptors_still_reports(sandbox: Sandbox) -> None:
    """The explorer wrote its result to standard output, which an input had closed: the
    build said 'test generation failed: the explorer exit 1' (the demo's load_catalog)."""
    found = search(sandbox, FIRST_LINE, "first_line", executions=200)
    assert found["ok"] and found["stats"]["executed"] > 0


class _Runs:
    """An explorer whose runs of the one input give the outcomes given, in turn."""

    def __init__(self, *errors: str | None) -> None:
        self.errors, self.trials, self.stats = list(errors), [], {"executed": 0}

    def execute(self, source: str, origin: str, seeded: bool = False) -> Any:
        from gym_repost.programs.explore import Trial

        self.stats["executed"] += 1
        trial = Trial(source, origin, self.errors.pop(0))
        trial.fingerprint = "same"
        return trial


@pytest.mark.parametrize(
    ("runs", "kills"),
    [(("timeout", None), False), (("timeout", "timeout"), True), ((None,), False)],
    ids=["stopped-once", "stopped-twice", "same-result"],
)
def test_a_mutant_kills_by_its_timer_only_when_a_second_run_is_stopped_too(runs: tuple[Any, ...], kills: bool) -> None:
    """A loaded machine may charge a fast call more CPU time once, and a timer that stopped a
    mutant once made it killed: the build chose another input (isodate's ``_strfdt`` gained
    a hunted input in one build of three beside four CPU burners)."""
    from gym_repost.programs.explore import Trial
    from gym_repost.programs.selection import Selection

    explorer = _Runs(*runs)
    selection = Selection(explorer, 4)
    selection.spend_until, selection.clock = 100, None
    original = Trial("(None, (1,), {})", "search")
    original.fingerprint = "same"
    assert selection._kills(original) is kills
    assert explorer.stats["executed"] == len(runs) and not explorer.errors


def test_a_target_that_draws_from_the_global_generator_keeps_the_same_inputs_every_search(sandbox: Sandbox) -> None:
    """Each search is a forked run, whose ``random`` the OS seeded: ``coin``'s calls took
    other branches in each search, so each kept other inputs (more-itertools'
    ``_sample_unweighted``: two corpus builds wrote other tests). The explorer seeds it."""
    runs = [kept(search(sandbox, COIN, "coin", seed=1, executions=300)) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0][0]) >= 3


def test_an_input_stopped_by_its_timer_changes_nothing_for_the_inputs_after_it(sandbox: Sandbox) -> None:
    """A call the timer stops drew as many numbers as the machine's speed allowed; the calls
    after it drew the numbers that followed, so each search took other branches and kept
    other inputs (more-itertools' ``_sample_unweighted`` on an endless iterator: two corpus
    builds wrote other tests). Each input's call starts from a generator seeded by its own
    source."""
    runs = [search(sandbox, SPINNING_COIN, "spin", seed=1, executions=300, call_timeout=0.05) for _ in range(3)]
    assert runs[0]["stats"]["timeouts"] >= 2
    assert kept(runs[0]) == kept(runs[1]) == kept(runs[2])


ENDLESS = """
from itertools import chain, count, repeat

def first_at(start, times=1):
    if times < 0:
        raise ValueError("times must not be negative")
    return next(chain.from_iterable(map(repeat, count(start), repeat(times))))
"""
"""``times=0``: an endless loop in C (``chain`` skips empty ``repeat`` objects forever),
which no timer whose handler runs between bytecodes stops."""

SPREAD = """
from itertools import chain, count, repeat

def spread(items, times=2):
    if times < 1:
        return []
    out = []
    for item in items:
        out.extend(repeat(item, times))
    return out
"""
SPREAD_HANGS = "def spread(items, times=2):\n    return list(chain.from_iterable(map(repeat, count(), repeat(0))))\n"


def test_an_input_that_hangs_in_c_code_counts_as_stopped_by_its_timer(sandbox: Sandbox) -> None:
    """A run stuck in C code kills its process (its CPU-time limit, lowered around each
    run) and the search starts again in a new one that counts that input as stopped by
    its timer: the search ends with a report, not at the CPU safety limit 300 s later,
    and the same inputs every time."""
    first = search(sandbox, ENDLESS, "first_at", hang_seconds=1)
    stats = first["stats"]
    assert stats["hangs"] >= 1 and stats["hung_runs"] >= stats["hangs"]
    assert stats["timeouts"] >= stats["hung_runs"]
    assert first["cpu_seconds"] < 60
    assert all("times=0" not in str(i["kwargs"]) and i["args"][1:2] != ["0"] for i in first["inputs"])
    assert len(first["inputs"]) >= 3
    assert kept(search(sandbox, ENDLESS, "first_at", hang_seconds=1)) == kept(first)


def test_a_mutant_that_hangs_in_c_code_is_told_apart_by_the_input_it_hangs_on(sandbox: Sandbox) -> None:
    target = script(SPREAD, "spread")
    config = search_config(target)
    config["hang_seconds"] = 1
    config["mutants"] = [{"line": 5, "source": SPREAD_HANGS}]
    found = run_explorer(sandbox, target.module, config, timeout=search_timeout(config))
    assert found.get("ok"), found
    stats = found["stats"]
    assert stats["hangs"] == 1 and stats["mutants"] == 1 and stats["mutants_killed"] == 1
    assert stats["hung_runs"] == 2  # the killer's run and the run that confirms a timer's kill


def test_a_search_whose_runs_keep_hanging_is_given_up(sandbox: Sandbox) -> None:
    config = search_config(script(ENDLESS, "first_at"))
    config.update(hang_seconds=1, max_hangs=1)
    found = run_explorer(sandbox, script(ENDLESS, "first_at").module, config, timeout=search_timeout(config))
    assert found["ok"] is False and found["kind"] == "hung"
    assert found["error"] == "1 runs of the target hung in C code (each stopped after 1 CPU seconds)"


NESTS = '''
import os


def nest(name):
    """Make ``made/<name>``: a directory of the working directory no earlier call made."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError("not a name")
    if os.path.exists("made"):
        raise RuntimeError("an earlier call made it")
    os.makedirs(os.path.join("made", name))
    return name.upper()
'''


def test_what_a_run_writes_in_the_working_directory_does_not_reach_the_runs_after_it(sandbox: Sandbox) -> None:
    """python-fsutil's ``copy_dir_content('', 0)`` copies the working directory into a new
    ``0`` inside it: each such run copied twice what the one before had, until one reached
    its per-call timer, and which one that was hung on the CPU's speed (three builds, three
    sets of inputs). The directory is put back after each run, so every run finds it as the
    import left it, as the final test's first call does: no run of ``nest`` finds ``made``,
    and no second run of a chosen input sees another outcome than its first."""
    found = search(sandbox, NESTS, "nest", executions=300)
    kinds = {i["kind"] for i in found["inputs"]}
    assert "ok:str" in kinds and "raised:RuntimeError" not in kinds, kinds
    assert found["stats"]["nondeterministic"] == 0
    assert kept(search(sandbox, NESTS, "nest", executions=300)) == kept(found)


LOCKS = '''
import os
import stat

START = stat.S_IMODE(os.stat(".").st_mode), stat.S_IMODE(os.stat("sub").st_mode) if os.path.isdir("sub") else None


def lock(mode):
    """Set the permission bits of the working directory and of its ``sub``."""
    if not isinstance(mode, int) or not 0 <= mode <= 0o777:
        raise ValueError("not a mode")
    now = stat.S_IMODE(os.stat(".").st_mode), stat.S_IMODE(os.stat("sub").st_mode) if os.path.isdir("sub") else None
    if now != START:
        raise RuntimeError("an earlier call changed them")
    os.makedirs("sub", exist_ok=True)
    os.chmod("sub", mode)
    os.chmod(".", mode)
    return mode
'''


def test_a_run_that_takes_away_the_working_directory_s_permissions_does_not_stop_the_search(sandbox: Sandbox) -> None:
    """python-fsutil's ``set_permissions('', 0)`` took every permission away from the working
    directory, and putting it back after the run failed there: the search ended with
    "PermissionError: Permission denied" and the candidate was dropped as "test generation
    failed". Each directory's permission bits are put back first, so every run finds them
    as the import left them."""
    found = search(sandbox, LOCKS, "lock", executions=200)
    kinds = {i["kind"] for i in found["inputs"]}
    assert "ok:int" in kinds and "raised:RuntimeError" not in kinds, kinds
    assert found["stats"]["nondeterministic"] == 0
