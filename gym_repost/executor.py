"""Where units of work run: one seam for every command that loops over tasks.

A unit of work is one call of ``work(item)`` (a validation, a DSTC or AceCoder task, a
test-generation task). :class:`LocalExecutor` runs ``workers`` of them at once on threads
of this process; results come back in the order of ``items``, whatever order they finish
in, so what a command writes does not depend on scheduling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    """Runs units of work and returns their results in input order."""

    def map(self, work: Callable[[T], R], items: Sequence[T], on_result: Callable[[R], None] | None = None) -> list[R]:
        """``[work(item) for item in items]``, run as the executor runs work; ``on_result``
        is called in this process once per finished item (in completion order)."""
        ...


class LocalExecutor:
    """``workers`` threads of this process."""

    def __init__(self, workers: int = 2) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers

    def map(self, work: Callable[[T], R], items: Sequence[T], on_result: Callable[[R], None] | None = None) -> list[R]:
        def one(item: T) -> R:
            result = work(item)
            if on_result is not None:
                on_result(result)
            return result

        if self.workers == 1 or len(items) <= 1:
            return [one(item) for item in items]
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="gym-repost-work") as pool:
            return list(pool.map(one, items))


__all__ = ["Executor", "LocalExecutor"]
