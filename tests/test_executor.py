"""The executor seam: results in input order, one callback per item, errors propagate."""

from __future__ import annotations

import threading
import time

import pytest

from gym_repost.executor import LocalExecutor


def test_results_come_back_in_input_order_whatever_finishes_first() -> None:
    def work(n: int, _sandbox: object) -> int:
        time.sleep(0.01 * (5 - n))  # the first items finish last
        return n * n

    done: list[int] = []
    assert LocalExecutor(3).map(work, list(range(5)), done.append) == [0, 1, 4, 9, 16]
    assert sorted(done) == [0, 1, 4, 9, 16]


def test_workers_bound_the_concurrency() -> None:
    running, peak, lock = 0, 0, threading.Lock()

    def work(_: int, _sandbox: object) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    LocalExecutor(2).map(work, list(range(8)))
    assert peak <= 2


def test_an_error_in_a_unit_of_work_reaches_the_caller() -> None:
    def work(n: int, _sandbox: object) -> int:
        if n == 2:
            raise ValueError("unit 2 failed")
        return n

    with pytest.raises(ValueError, match="unit 2 failed"):
        LocalExecutor(2).map(work, [1, 2, 3])


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LocalExecutor(0)
