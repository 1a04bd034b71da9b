"""Spaces for text observations and tool-call actions."""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence
from types import ModuleType
from typing import Any, overload

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils.shared_memory import create_shared_memory, read_from_shared_memory, write_to_shared_memory


class AnyText(Text):
    """A text space that contains every string up to ``max_length`` characters.

    Gymnasium's :class:`~gymnasium.spaces.Text` only contains strings over a fixed
    character set; observations here are arbitrary source code and reports. Samples
    are drawn from printable ASCII (random actions for checkers and fuzzing).
    """

    def __init__(self, max_length: int = 1_000_000, *, seed: Any = None) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random printable string of at most 256 characters (cheap random actions)."""
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(0, min(256, self.max_length) + 1))
        chars = self.np_random.choice(list(string.printable), size=length)
        return "".join(chars)

    def contains(self, x: Any) -> bool:
        """True for any ``str`` of at most ``max_length`` characters."""
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"


# Shared memory for AsyncVectorEnv (gymnasium's default, ``shared_memory=True``). Gymnasium
# stores a Text value as indices into the space's character set, which AnyText does not
# restrict (a character outside string.printable raised KeyError in the worker), and reads
# the buffer once, when the vector environment is made (every observation came back as the
# first read's '0's). Here a value is stored as its length and its code points (lone
# surrogates included), and the read returns a live view that decodes the buffer when it is
# indexed; AsyncVectorEnv's default ``copy=True`` deep-copies it into a tuple of str.


def _slots(space: AnyText, shared_memory: Any) -> np.ndarray:
    return np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((-1, space.max_length + 1))


class SharedTexts(Sequence[str]):
    """The texts of a vector environment's shared buffer, decoded on access (as a numpy
    view of a Box buffer shows the current observations). ``copy.deepcopy`` gives a tuple."""

    def __init__(self, space: AnyText, shared_memory: Any, n: int) -> None:
        self._slots = _slots(space, shared_memory)[:n]

    def __len__(self) -> int:
        return len(self._slots)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        slot = self._slots[index]
        return slot[1 : 1 + int(slot[0])].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, SharedTexts)) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@create_shared_memory.register(AnyText)
def _create_any_text_shared_memory(space: AnyText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@read_from_shared_memory.register(AnyText)
def _read_any_text_from_shared_memory(space: AnyText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


@write_to_shared_memory.register(AnyText)
def _write_any_text_to_shared_memory(space: AnyText, index: int, values: str, shared_memory: Any) -> None:
    codes = np.frombuffer(str(values).encode("utf-32-le", "surrogatepass"), dtype="<u4")
    if len(codes) > space.max_length:
        raise ValueError(f"a text of {len(codes)} characters does not fit {space!r}")
    slot = _slots(space, shared_memory)[index]
    slot[0] = len(codes)
    slot[1 : 1 + len(codes)] = codes.astype(np.int32)
