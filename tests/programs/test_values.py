"""Plain data between processes: what survives the trip, and what cannot."""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import json

import pytest

from gym_repost.programs import values


def _trip(value: object) -> object:
    encoded = values.encode(value)
    assert encoded is not None, value
    return values.decode(json.loads(json.dumps(encoded)))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(10**40),
        1.5,
        float("inf"),
        1 + 2j,
        "",
        "é\n",
        b"\x00\xff",
        [1, [2, (3,)]],
        {"a": {1, 2}, (1, 2): frozenset({"x"})},
        decimal.Decimal("19.99"),
        fractions.Fraction(1, 3),
        datetime.date(2026, 11, 25),
        datetime.datetime(2026, 11, 25, 14, 0, 1),
        datetime.timedelta(seconds=3),
        ValueError,
        KeyError,
        collections.OrderedDict,
    ],
)
def test_plain_values_survive_the_trip(value: object) -> None:
    back = _trip(value)
    assert back == value and type(back) is type(value)


def test_a_named_tuple_travels_as_a_tuple() -> None:
    point = collections.namedtuple("Point", "x y")(1, 2)
    assert _trip(point) == (1, 2)


class _Anything:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class _SneakyInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


class _SneakyTuple(tuple):  # type: ignore[type-arg]
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = tuple.__hash__


@pytest.mark.parametrize(
    "value",
    [
        _Anything(),
        _SneakyInt(3),
        _SneakyTuple((1,)),
        [1, _Anything()],
        {"k": _SneakyInt(1)},
        object(),
        lambda: 1,
        iter([1]),
    ],
)
def test_what_could_carry_behaviour_is_not_plain(value: object) -> None:
    assert values.encode(value) is None


def test_too_deep_or_too_large_is_not_plain() -> None:
    deep: list[object] = []
    for _ in range(100):
        deep = [deep]
    assert values.encode(deep) is None
    assert values.encode(list(range(values.MAX_ITEMS + 1))) is None


def test_a_class_is_read_back_as_the_reader_s_own_class_or_refused() -> None:
    assert values.decode(["C", "builtins", "ValueError"]) is ValueError
    with pytest.raises(ValueError):
        values.decode(["C", "not_loaded_anywhere", "Thing"])
    with pytest.raises(ValueError):
        values.decode(["C", "os", "system"])  # a function, not a class


def test_numpy_arrays_of_plain_dtypes_travel_and_object_arrays_do_not() -> None:
    numpy = pytest.importorskip("numpy")
    array = numpy.arange(6, dtype="int32").reshape(2, 3)
    back = _trip(array)
    assert isinstance(back, numpy.ndarray) and back.dtype == array.dtype and (back == array).all()
    assert _trip(numpy.float64(2.5)) == 2.5
    assert values.encode(numpy.array([object()], dtype=object)) is None
    with pytest.raises(ValueError):
        values.decode(["A", "|O", [1], "AAAAAAAAAAA="])
