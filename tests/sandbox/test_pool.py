"""The warm pool both backends share: slots, generations, failed members and closing."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from gym_repost.errors import SandboxError
from gym_repost.sandbox.pool import WarmPool


@dataclass(eq=False)
class Member:
    generation: int
    name: str = ""
    destroyed: bool = field(default=False)


class Maker:
    def __init__(self, pool: WarmPool[Member], fail: int = 0) -> None:
        self.pool, self.made, self.fail = pool, 0, fail

    def create(self) -> Member:
        if self.fail:
            self.fail -= 1
            raise SandboxError("cannot make one")
        self.made += 1
        member = Member(self.pool.generation, f"m{self.made}")
        self.pool.track(member)
        return member

    def destroy(self, member: Member) -> None:
        self.pool.untrack(member)
        member.destroyed = True


def _opened(slots: int, fail: int = 0) -> tuple[WarmPool[Member], Maker]:
    pool: WarmPool[Member] = WarmPool()
    maker = Maker(pool, fail)
    pool.new_generation()
    pool.fill([maker.create() for _ in range(slots)])
    return pool, maker


def test_members_are_reused_and_tracked_until_destroyed() -> None:
    pool, maker = _opened(2)
    first = pool.checkout(maker.create)
    second = pool.checkout(maker.create)
    assert {first.name, second.name} == {"m1", "m2"} and maker.made == 2
    pool.checkin(first, maker.destroy)
    assert pool.checkout(maker.create) is first
    assert len(pool.members()) == 2


def test_a_failed_member_is_replaced_and_a_failed_replacement_leaves_the_slot_empty() -> None:
    pool, maker = _opened(1)
    broken = pool.checkout(maker.create)
    maker.fail = 1
    pool.replace(broken, maker.create, maker.destroy)  # the replacement cannot be made
    assert broken.destroyed and pool.members() == []
    member = pool.checkout(maker.create)  # the empty slot is filled on checkout
    assert member.name == "m2" and not member.destroyed
    maker.fail = 1
    pool.replace(member, maker.create, maker.destroy, fresh=False)  # Ctrl-C: no replacement now
    with pytest.raises(SandboxError, match="cannot make one"):
        pool.checkout(maker.create)
    assert pool.checkout(maker.create).name == "m3"  # the slot stayed, empty


def test_a_member_checked_in_after_close_is_destroyed_and_checkouts_stop() -> None:
    pool, maker = _opened(1)
    busy = pool.checkout(maker.create)
    doomed = pool.close()
    assert doomed == [busy] and pool.members() == []
    pool.checkin(busy, maker.destroy)
    assert busy.destroyed
    with pytest.raises(SandboxError, match="closed"):
        pool.checkout(maker.create)


def test_members_of_an_old_generation_are_not_reused_after_a_restart() -> None:
    pool, maker = _opened(1)
    old = pool.checkout(maker.create)
    pool.close()
    pool.new_generation()
    pool.fill([maker.create()])
    pool.checkin(old, maker.destroy)
    assert old.destroyed
    assert pool.checkout(maker.create).generation == pool.generation


def test_a_checkout_waits_for_a_slot_and_ready_may_refill_it() -> None:
    pool, maker = _opened(1)
    held = pool.checkout(maker.create)
    got: list[Member] = []
    waiter = threading.Thread(target=lambda: got.append(pool.checkout(maker.create)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # no free slot
    pool.checkin(held, maker.destroy)
    waiter.join(10)
    assert got == [held]

    def refuse_once(member: Member) -> Member | None:
        if member is held:  # e.g. a preload module unfit to fork from: start another instead
            maker.destroy(member)
            pool.put(maker.create())
            return None
        return member

    pool.checkin(held, maker.destroy)
    fresh = pool.checkout(maker.create, refuse_once)
    assert held.destroyed and fresh is not held and fresh.name == "m2"


def test_a_slot_whose_member_could_not_be_made_or_readied_for_any_reason_is_not_lost() -> None:
    pool: WarmPool[Member] = WarmPool()
    maker = Maker(pool)
    pool.new_generation()
    pool.fill([None])  # an empty slot: the first checkout makes its member

    def broken() -> Member:
        raise RuntimeError("a bug, not a sandbox failure")

    with pytest.raises(RuntimeError):
        pool.checkout(broken)
    made = pool.try_checkout(maker.create)  # the slot is still there: a lost one hangs checkouts
    assert made is not None and made.name == "m1"
    pool.checkin(made, maker.destroy)

    def unready(member: Member) -> Member:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pool.checkout(maker.create, unready)
    again = pool.try_checkout(maker.create)
    assert again is not None and again.name == "m2"  # the slot was left empty, and filled anew
