"""Reading untrusted JSON within limits, without running the sender's code."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gym_repost.bounded_json import loads, plain_copy
from gym_repost.errors import UntrustedDataError


class Loud(str):
    def __str__(self) -> str:
        raise AssertionError("called")

    def __eq__(self, other: object) -> bool:
        raise AssertionError("called")

    __hash__ = str.__hash__


class LoudDict(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise AssertionError("called")

    def __iter__(self) -> Any:
        raise AssertionError("called")


class LoudFloat(float):
    def __float__(self) -> float:
        raise AssertionError("called")


def test_subclasses_are_copied_as_their_base_type_without_calling_them() -> None:
    value = LoudDict({Loud("k"): [Loud("v"), LoudFloat(1.5), (1, True, None)]})
    copy = plain_copy(value)
    assert copy == {"k": ["v", 1.5, [1, True, None]]}
    assert type(copy) is dict and type(next(iter(copy))) is str and type(copy["k"][0]) is str
    assert type(copy["k"][1]) is float


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1: "x"}, "keys must be strings"),
        ({"a": {"b": b"x"}}, "at a.b: a value of type bytes is not JSON"),
        ([float("inf")], r"at \[0\]: inf is not a JSON number"),
        (2**63, "out of range"),
        ({"a": "x" * 100}, "too large"),
        ([[[[[1]]]]], "nested more than 4 levels deep"),
    ],
)
def test_what_is_refused_and_where(value: Any, message: str) -> None:
    with pytest.raises(UntrustedDataError, match=message):
        plain_copy(value, max_chars=50, max_depth=4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000, "nested more than 16 levels deep"),
        ("[" * 17 + "]" * 17, "nested more than 16 levels deep"),
        ("{", "not valid JSON"),
        ("1" * 5000, "not valid JSON"),
        ("NaN", "not a JSON number"),
        (" " * 1_000_001, "characters long"),
    ],
)
def test_loads_refuses_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(UntrustedDataError, match=message):
        loads(text)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**62), 2**62)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(json_values)
def test_plain_json_round_trips(value: Any) -> None:
    assert plain_copy(value) == value
    assert loads(json.dumps(value)) == value
