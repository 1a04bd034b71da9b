"""Stage 5, test generation without an LLM: search inputs in the sandbox, write the test, verify it.

:func:`generate_tests` ships the sandboxed module and the explorer
(:mod:`gym_repost.programs.explore` and the modules it imports) into one
sandbox run that searches inputs for the target and chooses the test's inputs; replays
them under another hash seed (an outcome that depends on set or dict ordering across
processes is not a property an equivalent implementation must share); writes the test
(:mod:`~gym_repost.construct.testgen.writer`); and checks that it passes with the ground
truth and fails with a do-nothing candidate. Nothing of the repository runs on the host.

The search's budget counts runs of the target (``executions``) and the Python calls they
make (:data:`CALLS_PER_EXECUTION` per run of the budget), never seconds, so that the same
seed gives the same test on a quiet machine and a loaded one, a fast one and a slow one.
The wall clock and the run's CPU time are only safety limits (``wall_limit``,
:data:`CPU_LIMIT`), far above what the counted budgets spend; when one fires the result's
notes (or the drop's detail) say so and a warning is logged, because then the test may
differ from another machine's.
"""

from __future__ import annotations

import ast
import logging
import signal
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from gym_repost.analysis.mutation import OPERATORS, SEARCH_OPERATORS, generate_mutants, sample_mutants
from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source import find_function, function_source
from gym_repost.construct.function_task import make_function_task
from gym_repost.construct.stages import Drop, GeneratedTests, SandboxedScript
from gym_repost.construct.testgen.trace import RecordedCall
from gym_repost.construct.testgen.writer import ChosenInput, write_tests
from gym_repost.errors import BuildError
from gym_repost.harness import do_nothing_candidate, run_function_tests
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.programs import run_program
from gym_repost.task import FunctionTask, Provenance, RepositoryView

logger = logging.getLogger(__name__)

MODULE_FILE = "_gr_module.py"
EXPLORER_MODULES = ("runtime", "hints", "pools", "mutate", "strategies", "selection")
"""The explorer's modules in :mod:`gym_repost.programs`, shipped beside it."""
REPLAY_HASH_SEED = "1"
MAX_MUTANTS = 60
"""Mutants of the target the search uses to choose inputs that tell them apart."""
EXECUTIONS = 2000
"""Default budget of one search, in runs of the target (see :func:`generate_tests`)."""
CALLS_PER_EXECUTION = 10_000
"""The search's budget of Python calls, per run of its budget of runs (20 million for the
default): what stops the search of a target whose runs are costly, on every machine alike."""
CPU_LIMIT = 300.0
"""The explorer's CPU-time safety limit, in seconds (RLIMIT_CPU): far above what its
counted budgets let a search spend (20 million calls for the search and as many for the
mutants: some 40 CPU seconds on the machine it was measured on); a search it stops is
dropped with a note that names it (:data:`CPU_SAFETY_NOTE`), as a limit, not a failure."""
WALL_LIMIT = 120.0
"""Default wall-clock safety limit of one search, in seconds (reported when it fires)."""
SAFETY_NOTE = "wall-clock safety limit"
"""How every note about a wall-clock safety limit that fired begins."""
CPU_SAFETY_NOTE = "CPU-time safety limit"
"""How the note about the explorer's CPU-time safety limit (:data:`CPU_LIMIT`) begins."""
SAFETY_NOTES = (SAFETY_NOTE, CPU_SAFETY_NOTE)
"""What a note about a safety limit that fired holds (one of these)."""
SANDBOX_GRACE = 90.0
"""Seconds the sandbox run of the explorer gets beyond its safety limits (the module's
import, at most 60 seconds, and the report)."""


def run_explorer(
    sandbox: Sandbox, module: str, config: dict[str, Any], timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run the explorer (:mod:`gym_repost.programs.explore`) on ``module`` with ``config``; its JSON report.

    A run that ends without a report gives ``{"ok": False, "kind": "crash", ...}``; one
    its CPU-time safety limit (:data:`CPU_LIMIT`) stopped, ``"kind": "cpu limit"``.
    """
    run = run_program(
        sandbox,
        "explore",
        {MODULE_FILE: module},
        {**config, "module_file": MODULE_FILE},
        timeout=timeout,
        token=True,
        modules=EXPLORER_MODULES,
        env=env,
        cpu_seconds=CPU_LIMIT,
    )
    if run.completed and run.payload is not None:
        return run.payload
    result = run.result
    if result.returncode == -signal.SIGXCPU and not result.timed_out:
        return {
            "ok": False,
            "kind": "cpu limit",
            "error": f"{CPU_SAFETY_NOTE}: the explorer used its {CPU_LIMIT:g} s of CPU time before its "
            f"counted budgets ran out; another machine may have finished the search",
        }
    why = "timed out" if result.timed_out else f"exit {result.returncode}"
    return {
        "ok": False,
        "kind": "crash",
        "error": f"the explorer {why} ({run.problem}): {(result.stderr or '')[-300:]}",
    }


def generate_tests(
    sandbox: Sandbox,
    script: SandboxedScript,
    *,
    seeds: Sequence[RecordedCall] = (),
    executions: int = EXECUTIONS,
    seed: int = 0,
    min_assertions: int = 3,
    max_inputs: int = 12,
    wall_limit: float = WALL_LIMIT,
) -> GeneratedTests | Drop:
    """Equivalence tests for the script's target, or why none could be written.

    Args:
        sandbox: where the target runs (and only there).
        script: the sandboxed module holding the target.
        seeds: inputs recorded from the repository's tests (:func:`~.trace.trace_repository`).
        executions: the search's budget, in runs of the target: the search stops after
            this many, or once they have made :data:`CALLS_PER_EXECUTION` Python calls per
            run of the budget (or once every branch is reached, or after a quarter of them in
            a row reach nothing new), and telling mutants apart may spend as much again.
        seed: seed of the search's random choices (same seed, same inputs, whatever the load).
        min_assertions: fewer usable inputs than this drops the candidate.
        max_inputs: the test's size in assertions; inputs that tell mutants apart may add
            4 more, and the repository's own calls whose results no other input shows 8 more
            (:data:`~gym_repost.programs.selection.KILLER_SLOTS`, ``TRACED_SLOTS``).
        wall_limit: safety limit of the whole search in wall-clock seconds; not a budget:
            when it fires, the notes (or the drop's detail) say so and a warning is logged.

    Returns:
        :class:`GeneratedTests`, or a :class:`Drop` at stage ``tests`` whose reason is one
        of: ``target not in script``, ``async target``, ``module does not import``,
        ``test generation failed``, ``search over its CPU limit``, ``target hangs in C code``,
        ``inputs cannot be built``, ``non-deterministic``,
        ``too few inputs``, ``no input returns normally``, ``tests fail on the ground truth``,
        ``tests accept a do-nothing candidate``.

    Raises:
        SandboxError: the sandbox itself failed (infrastructure).
    """
    target = script.target
    span = find_function(script.module, target.qualname)
    if span is None:
        return _drop(script, "target not in script", f"{target.qualname} is not defined in the sandboxed module")
    if span.is_async:
        return _drop(script, "async target", "coroutines are not supported by the deterministic builder")
    config = search_config(
        script, seeds=seeds, executions=executions, seed=seed, max_inputs=max_inputs, wall_limit=wall_limit
    )
    found = run_explorer(sandbox, script.module, config, timeout=search_timeout(config))
    if not found.get("ok"):
        return _failed(script, found)
    _warn_on_wall_clock(script, found)
    inputs, notes = _hash_stable(sandbox, script, config, found)
    return _with_safety_limits(_finish(sandbox, script, found, inputs, notes, min_assertions), found)


def search_config(
    script: SandboxedScript,
    *,
    seeds: Sequence[RecordedCall] = (),
    executions: int = EXECUTIONS,
    seed: int = 0,
    max_inputs: int = 12,
    wall_limit: float = WALL_LIMIT,
) -> dict[str, Any]:
    """The explorer's configuration for the script's target (see :func:`generate_tests`).

    Raises:
        BuildError: the target is not defined in the script.
    """
    target = script.target
    span = find_function(script.module, target.qualname)
    if span is None:
        raise BuildError(f"{target.qualname} is not defined in the sandboxed module")
    return {
        "qualname": target.qualname,
        "name": target.name,
        "class_name": target.class_name,
        "start_line": span.start,
        "end_line": span.end,
        "executions": executions,
        "mutant_executions": executions,
        "calls": CALLS_PER_EXECUTION * executions,
        "mutant_calls": CALLS_PER_EXECUTION * executions,
        "wall_limit": wall_limit,
        "seed": seed,
        "max_inputs": max_inputs,
        "seeds": [asdict(s) for s in seeds],
        "mutants": target_mutants(function_source(script.module, span), seed),
        "may_be_random": "random" in script.module,
    }


def search_timeout(config: dict[str, Any]) -> float:
    """Seconds the sandbox gives one search: the larger of its safety limits (wall clock,
    CPU time) and a grace period."""
    return max(float(config.get("wall_limit", WALL_LIMIT)), CPU_LIMIT) + SANDBOX_GRACE


def target_mutants(source: str, seed: int) -> list[dict[str, Any]]:
    """Up to :data:`MAX_MUTANTS` mutants of the target's source, for the in-sandbox selection
    (the usual operators and :data:`~gym_repost.analysis.mutation.SEARCH_OPERATORS`)."""
    try:
        mutants = generate_mutants(source, operators=(*OPERATORS, *SEARCH_OPERATORS))
    except SyntaxError:
        return []
    return [{"source": m.source, "line": m.line} for m in sample_mutants(mutants, MAX_MUTANTS, seed)]


def may_depend_on_hash_order(module: str, inputs: Sequence[dict[str, Any]]) -> bool:
    """True when the module or an input builds sets or hashes: only then can an outcome
    change with PYTHONHASHSEED (dicts keep insertion order)."""
    texts = [module] + [f"{i.get('instance')}, {i['args']}, {i['kwargs']}" for i in inputs]
    for text in texts:
        try:
            tree = parse_python(text)
        except SyntaxError:
            return True
        for node in ast.walk(tree):
            if isinstance(node, (ast.Set, ast.SetComp)) or (
                isinstance(node, ast.Name) and node.id in ("set", "frozenset", "hash")
            ):
                return True
    return False


def _hash_stable(
    sandbox: Sandbox, script: SandboxedScript, config: dict[str, Any], found: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The chosen inputs whose outcome is the same under another PYTHONHASHSEED."""
    inputs = found["inputs"]
    if not inputs or not may_depend_on_hash_order(script.module, inputs):
        return inputs, []
    replayed = run_explorer(
        sandbox,
        script.module,
        {**config, "replay": True, "inputs": inputs},
        timeout=40,
        env={"PYTHONHASHSEED": REPLAY_HASH_SEED},
    )
    if not replayed.get("ok"):
        return inputs, [f"hash-seed replay failed: {replayed.get('error', '')[:200]}"]
    stable = [i for i, fp in zip(inputs, replayed["fingerprints"]) if fp == i["fingerprint"]]
    dropped = len(inputs) - len(stable)
    return stable, ([f"dropped {dropped} input(s) whose outcome depends on the hash seed"] if dropped else [])


def _finish(
    sandbox: Sandbox,
    script: SandboxedScript,
    found: dict[str, Any],
    inputs: list[dict[str, Any]],
    notes: list[str],
    min_assertions: int,
) -> GeneratedTests | Drop:
    stats = found["stats"]
    if len(inputs) < min_assertions:
        return _too_few(script, found, inputs, notes, min_assertions)
    if not any(i["kind"].startswith("ok:") for i in inputs):
        kinds = sorted({i["kind"].split(":", 1)[1] for i in inputs})
        return _drop(script, "no input returns normally", f"every input raises: {', '.join(kinds)}")
    items = [
        ChosenInput(args=i["args"], kwargs=i["kwargs"], instance=i["instance"], origin=i["origin"], seeded=i["seeded"])
        for i in inputs
    ]
    code = write_tests(script.target.name, found["target_kind"], script.target.class_name, items)
    verdict = verify(sandbox, script, code)
    if verdict is not None:
        return verdict
    notes += _notes(found)
    return GeneratedTests(
        code=code,
        inputs=dict(Counter(i.origin for i in items)),
        assertions=len(items),
        branch_coverage=found["branch_coverage"],
        deterministic=not (stats["seeded"] or stats["nondeterministic"]),
        notes=tuple(notes),
    )


def wall_clock_notes(found: dict[str, Any]) -> list[str]:
    """What the wall-clock safety limits did to a search (empty when they never fired)."""
    stats = found.get("stats") or {}
    notes = []
    if stats.get("wall_clock_limit"):
        notes.append(
            f"{SAFETY_NOTE}: it stopped the search during {stats['wall_clock_limit']}; "
            f"results may differ from an unloaded run"
        )
    if stats.get("wall_timeouts"):
        notes.append(
            f"{SAFETY_NOTE}: {stats['wall_timeouts']} call(s) hit the per-call wall-clock timer "
            f"before the CPU-time one; results may differ from an unloaded run"
        )
    return notes


def _warn_on_wall_clock(script: SandboxedScript, found: dict[str, Any]) -> None:
    for note in wall_clock_notes(found):
        logger.warning("%s: %s", script.target.key, note)


def _with_safety_limits(result: GeneratedTests | Drop, found: dict[str, Any]) -> GeneratedTests | Drop:
    """The result, saying which wall-clock safety limits fired (in a drop's detail)."""
    fired = wall_clock_notes(found)
    if not fired:
        return result
    if isinstance(result, Drop):
        return replace(result, detail="; ".join([result.detail, *fired]) if result.detail else "; ".join(fired))
    return replace(result, safety_limits=tuple(fired))


def _notes(found: dict[str, Any]) -> list[str]:
    stats = found["stats"]
    notes = [
        f"searched {stats['executed']} inputs (search stopped: {stats.get('search_stop', '?')}); "
        f"branch coverage {_percent(found['branch_coverage'])} of {found['branches']} branches"
    ]

    if stats["seeded"]:
        notes.append(f"{stats['seeded']} input(s) give stable results only with random seeded: seeded")
    if stats["nondeterministic"]:
        notes.append(f"dropped {stats['nondeterministic']} non-deterministic input(s)")
    if stats["timeouts"]:
        notes.append(f"{stats['timeouts']} input(s) timed out and were dropped")
    if found["missing_branches"]:
        notes.append(f"branches not reached (script lines): {found['missing_branches'][:8]}")
    return notes


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _too_few(
    script: SandboxedScript, found: dict[str, Any], inputs: list[dict[str, Any]], notes: list[str], min_assertions: int
) -> Drop:
    stats = found["stats"]
    if stats["nondeterministic"] and not inputs:
        return _drop(
            script,
            "non-deterministic",
            f"the ground truth gave different results on the same input "
            f"({stats['nondeterministic']} inputs), even with random seeded",
        )
    if found["unbuildable"] and not inputs:
        detail = "; ".join(f"{name}: {why}" for name, why in found["unbuildable"].items())
        return _drop(script, "inputs cannot be built", detail)
    detail = (
        f"{len(inputs)} usable input(s), {min_assertions} needed; searched {stats['executed']}, "
        f"{stats['invalid']} unusable"
    )
    if found["build_errors"]:
        detail += f"; e.g. {found['build_errors'][0]}"
    return _drop(script, "too few inputs", "; ".join([detail, *notes]))


def _failed(script: SandboxedScript, found: dict[str, Any]) -> Drop:
    kind = found.get("kind")
    reason = {
        "import": "module does not import",
        "target": "target not in script",
        "cpu limit": "search over its CPU limit",
        "hung": "target hangs in C code",
    }.get(kind or "", "test generation failed")
    return _drop(script, reason, found.get("error", ""))


def _drop(script: SandboxedScript, reason: str, detail: str = "") -> Drop:
    logger.info("%s: %s (%s)", script.target.key, reason, detail[:200])
    return Drop(file=script.target.file, qualname=script.target.qualname, stage="tests", reason=reason, detail=detail)


def verification_task(script: SandboxedScript, code: str) -> FunctionTask:
    """A throw-away task holding the module with the test code appended.

    Raises:
        BuildError: the script lacks the target or its test.
    """
    target = script.target
    full = script.module.rstrip("\n") + "\n\n\n" + code
    provenance = Provenance(source="testgen", repo="testgen", file=target.file, qualname=target.qualname)
    view = RepositoryView(files={target.file: script.module}, target_file=target.file, complete=False)
    return make_function_task(name=f"testgen/{target.qualname}", provenance=provenance, script=full, repository=view)


def verify(sandbox: Sandbox, script: SandboxedScript, code: str) -> Drop | None:
    """None when the test passes with the ground truth and fails with a do-nothing candidate."""
    try:
        task = verification_task(script, code)
    except BuildError as exc:
        return _drop(script, "test generation failed", str(exc))
    report = run_function_tests(sandbox, task, task.ground_truth)
    if not report.passed:
        return _drop(script, "tests fail on the ground truth", report.to_text()[-500:])
    if run_function_tests(sandbox, task, do_nothing_candidate(task)).passed:
        return _drop(script, "tests accept a do-nothing candidate")
    return None
