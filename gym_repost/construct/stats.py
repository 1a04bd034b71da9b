"""Build statistics: RepoST's Table 2 shape, the drop table, stage timings."""

from __future__ import annotations

import ast
import io
import statistics
import time
import tokenize
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source import dedent_code
from gym_repost.construct.stages import Drop
from gym_repost.task import FunctionTask


def count_tokens(code: str) -> int:
    """Python tokens of ``code`` (names, operators, literals; no layout tokens).

    RepoST counts a model tokenizer's tokens; ours is the language's own tokenizer, so
    the figures are comparable between our builds, not with the paper's.
    """
    layout = {
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.COMMENT,
        tokenize.ENDMARKER,
        tokenize.ENCODING,
    }
    try:
        return sum(1 for tok in tokenize.generate_tokens(io.StringIO(code).readline) if tok.type not in layout)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return len(code.split())


@dataclass
class StageTimer:
    """Wall-clock seconds per stage (summed over calls)."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(stage, time.perf_counter() - started)

    def add(self, stage: str, seconds: float) -> None:
        """Add ``seconds`` to ``stage``."""
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def table2(candidates: int, tasks: Sequence[FunctionTask]) -> dict[str, Any]:
    """RepoST's Table 2 for one build: sizes, tests, coverage, standalone share, libraries."""
    coverages = [t.metadata.branch_coverage for t in tasks if t.metadata.branch_coverage is not None]
    kill_rates = [
        t.metadata.checks["mutant_kill_rate"] for t in tasks if t.metadata.checks.get("mutant_kill_rate") is not None
    ]
    libraries = sorted({lib for t in tasks for lib in t.metadata.external_packages})
    return {
        "candidate functions": candidates,
        "tasks kept": len(tasks),
        "yield": len(tasks) / candidates if candidates else None,
        "avg target tokens": _mean([count_tokens(t.target.source) for t in tasks]),
        "avg target lines": _mean([len(t.target.source.splitlines()) for t in tasks]),
        "avg evaluation-script lines": _mean([len(t.evaluation.script.splitlines()) for t in tasks]),
        "avg test cases": _mean([t.metadata.num_asserts for t in tasks]),
        "avg branch coverage": _mean(coverages),
        "median branch coverage": _median(coverages),
        "branch coverage n/a (under 3 arcs)": len(tasks) - len(coverages),
        "median mutant kill rate": _median(kill_rates),
        "kill rate n/a (under 3 mutants)": len(tasks) - len(kill_rates),
        "single-statement share": _mean([1.0 if single_statement(t) else 0.0 for t in tasks]),
        "docstring share": _mean([1.0 if t.target.docstring else 0.0 for t in tasks]),
        "standalone share": _mean([1.0 if t.metadata.standalone else 0.0 for t in tasks]),
        "methods share": _mean([1.0 if t.target.class_name else 0.0 for t in tasks]),
        "external libraries": libraries,
    }


def single_statement(task: FunctionTask) -> bool:
    """The target's body (docstring aside) is one statement, nested ones counted."""
    try:
        tree = parse_python(dedent_code(task.target.source))
    except (SyntaxError, ValueError):
        return False
    function = tree.body[0] if tree.body else None
    body = getattr(function, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return sum(isinstance(n, ast.stmt) for s in body for n in ast.walk(s)) == 1


def drop_table(drops: Sequence[Drop]) -> list[tuple[str, str, int, str]]:
    """``(stage, reason, count, an example)`` rows, most frequent first."""
    counts = Counter((d.stage, d.reason) for d in drops)
    examples: dict[tuple[str, str], str] = {}
    for d in drops:
        examples.setdefault((d.stage, d.reason), f"{d.file}::{d.qualname}" + (f": {d.detail}" if d.detail else ""))
    return [(stage, reason, n, examples[(stage, reason)][:160]) for (stage, reason), n in counts.most_common()]
