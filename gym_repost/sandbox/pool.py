"""The warm pool both backends keep: worker processes (local) or containers (docker).

A pool has a fixed number of slots. Each slot holds an idle member, or a busy one (checked
out), or nothing yet (``None``: the member that held it failed and its replacement could
not be made; the next checkout makes one). Every member the backend made is *tracked*
until it is destroyed, busy or not, so that closing the sandbox, or the interpreter's exit,
stops all of them.

Members carry the pool's *generation* at their making: closing the pool starts a new
generation, so a member checked in after a close (a run that was still going) is destroyed
instead of being reused.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from gym_repost.errors import SandboxError

logger = logging.getLogger(__name__)


class PoolMember(Protocol):
    """What the pool needs of a member: the generation it was made in."""

    generation: int


M = TypeVar("M", bound=PoolMember)


class WarmPool(Generic[M]):
    """Slots of warm members; the backend makes and destroys them (see the module docstring)."""

    def __init__(self, *, lifo: bool = False) -> None:
        """``lifo``: a checkout takes the slot given back last, so that an empty slot is
        filled (a member made) only when every member made is busy."""
        self.lock = threading.Lock()
        self.generation = 0
        self.open = False
        """Checked-out members may be checked in, and checkouts wait for a free slot."""
        self._idle: queue.Queue[M | None] = queue.LifoQueue() if lifo else queue.Queue()
        self._members: set[M] = set()

    # ------------------------------------------------------------ tracking

    def track(self, member: M) -> None:
        """Count ``member`` among the pool's (from its making on, before it is ready)."""
        with self.lock:
            self._members.add(member)

    def untrack(self, member: M) -> None:
        """``member`` is being destroyed."""
        with self.lock:
            self._members.discard(member)

    def members(self) -> list[M]:
        """Every tracked member, idle or busy."""
        with self.lock:
            return list(self._members)

    def take_all(self) -> list[M]:
        """Untrack and return every member: the caller destroys them."""
        with self.lock:
            doomed = list(self._members)
            self._members.clear()
        return doomed

    # ------------------------------------------------------------ lifecycle

    def new_generation(self) -> int:
        """Start a generation (on start and on close); members made before it are not reused."""
        with self.lock:
            self.generation += 1
            return self.generation

    def fill(self, members: Iterable[M | None]) -> None:
        """Put freshly made members in the slots (None: an empty slot, filled by the first
        checkout) and open the pool."""
        for member in members:
            self._idle.put(member)
        self.open = True

    def close(self) -> list[M]:
        """Close the pool: empty the slots, start a new generation; returns every member
        (untracked) for the caller to destroy."""
        with self.lock:
            self.open = False
            self.generation += 1
        while True:
            try:
                self._idle.get_nowait()
            except queue.Empty:
                break
        return self.take_all()

    # ------------------------------------------------------------ use

    def checkout(self, create: Callable[[], M], ready: Callable[[M], M | None] | None = None) -> M:
        """Wait for a slot; an empty one gets a member made by ``create`` (the slot stays
        empty if that fails). ``ready(member)`` may check a member before use: it returns
        the member to use, or None after arranging that slot's refill (try another slot),
        or raises :class:`SandboxError` after replacing it; any other exception leaves the
        slot empty (a slot is never lost: a lost one would make checkouts wait forever).

        Raises:
            SandboxError: the pool was closed, or a member could not be made or readied.
        """
        member = self._checkout(create, ready, wait=True)
        assert member is not None
        return member

    def try_checkout(self, create: Callable[[], M], ready: Callable[[M], M | None] | None = None) -> M | None:
        """:meth:`checkout` if a slot is free now; None if every slot is in use (or closed)."""
        return self._checkout(create, ready, wait=False)

    def _checkout(self, create: Callable[[], M], ready: Callable[[M], M | None] | None, wait: bool) -> M | None:
        while True:
            try:
                member = self._idle.get(timeout=0.5) if wait else self._idle.get_nowait()
            except queue.Empty:
                if not wait:
                    return None
                if not self.open:
                    raise SandboxError("the sandbox was closed") from None
                continue
            if member is None:
                try:
                    member = create()
                except BaseException:  # the slot stays empty, for the next checkout to fill
                    self._idle.put(None)
                    raise
            if ready is not None:
                try:
                    member = ready(member)
                except SandboxError:  # ready replaced it
                    raise
                except BaseException:  # ready failed otherwise: the slot is the next checkout's to fill
                    self._idle.put(None)
                    raise
                if member is None:
                    continue
            return member

    def put(self, member: M | None) -> None:
        """Fill a slot (None: leave it empty for the next checkout to fill)."""
        self._idle.put(member)

    def checkin(self, member: M, destroy: Callable[[M], None]) -> None:
        """Give ``member`` back to its slot; one of an old generation is destroyed."""
        if member.generation == self.generation and self.open:
            self._idle.put(member)
        else:
            destroy(member)

    def replace(self, member: M, create: Callable[[], M], destroy: Callable[[M], None], *, fresh: bool = True) -> None:
        """Destroy a failed member; its slot gets a fresh one now (if ``fresh``, and the
        pool is open and of its generation), or stays empty for a later checkout to fill."""
        destroy(member)
        if not fresh:
            self._idle.put(None)
            return
        if member.generation != self.generation or not self.open:
            return
        try:
            self._idle.put(create())
        except SandboxError as exc:
            logger.error("cannot make a replacement for a failed sandbox member: %s", exc)
            self._idle.put(None)


__all__ = ["PoolMember", "WarmPool"]
