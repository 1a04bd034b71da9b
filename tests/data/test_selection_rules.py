"""The pure selection rules, on hand-computed cases: DSTC's minimax selection and
AceCoder's preference-pair rule (boundaries included)."""

from __future__ import annotations

import math

import pytest

from gym_repost.data.acecoder import dedupe_codes, is_preferred, preference_pairs
from gym_repost.data.dstc import Selection, minimax_select
from gym_repost.errors import DataError

# --------------------------------------------------------------------------- minimax


@pytest.mark.parametrize("matrix", [[], [[]], [[], [], []]])
def test_minimax_on_an_empty_matrix_selects_nothing(matrix: list[list[int]]) -> None:
    assert minimax_select(matrix) == (None, None, None, None)


def test_minimax_when_every_code_passes_every_test_has_no_rejected_pair() -> None:
    # row sums 2, 2 -> code 0 (tie, lowest index); its tests 0 and 1 are each passed by
    # 2 codes -> test 0; no test is failed by any code -> no rejected test, no rejected code
    assert minimax_select([[1, 1], [1, 1]]) == (0, 0, None, None)


def test_minimax_when_every_code_fails_every_test_has_no_chosen_pair() -> None:
    # no code passes anything -> no chosen code; every test is failed by some code and
    # passed by 0 codes -> test 0; codes failing it: 0 and 1, both pass 0 tests -> code 0
    assert minimax_select([[0, 0], [0, 0]]) == (None, None, 0, 0)


def test_minimax_picks_the_demanding_test_of_the_best_code_and_the_lenient_failing_test() -> None:
    matrix = [[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 0], [1, 0, 1, 0]]
    # code passes: 3, 4, 1, 2 -> chosen code 1; test passes: 3, 1, 4, 2.
    # tests passed by code 1: all -> fewest passes: test 1 (1 code).
    # tests failed by some code: 0 (3), 1 (1), 3 (2) -> most passes: test 0.
    # codes failing test 0: code 2 only -> rejected code 2.
    assert minimax_select(matrix) == (1, 1, 0, 2)


def test_minimax_breaks_every_tie_by_the_lowest_index() -> None:
    matrix = [[1, 1, 0], [1, 0, 0], [0, 1, 1]]
    # code passes 2, 1, 2 -> codes 0 and 2 tie -> 0. Code 0 passes tests 0 and 1, each
    # passed by 2 codes -> test 0. Test passes 2, 2, 1, all below 3 -> tests 0 and 1
    # tie -> 0. Codes failing test 0: code 2 only.
    assert minimax_select(matrix) == (0, 0, 0, 2)
    # codes failing test 0: 1 and 2, both pass no test -> the lower index, 1
    assert minimax_select([[1, 0], [0, 0], [0, 0]]) == (0, 0, 0, 1)


def test_minimax_among_codes_failing_the_rejected_test_takes_the_weakest() -> None:
    matrix = [[1, 1, 1, 0], [0, 1, 0, 1], [0, 1, 0, 0], [1, 1, 1, 1]]
    # code passes 3, 2, 1, 4 -> code 3; its tests: passes per test 2, 4, 2, 2 -> test 0
    # (tie of 0, 2 and 3). Tests failed by some code: 0, 2, 3 (2 passes each) -> test 0.
    # Codes failing test 0: 1 (2 passes) and 2 (1 pass) -> code 2.
    assert minimax_select(matrix) == (3, 0, 0, 2)


def test_minimax_with_one_code_may_reject_the_chosen_code() -> None:
    # the only code passes test 0 and fails test 1: chosen (0, 0), rejected (0, 1)
    assert minimax_select([[True, False]]) == (0, 0, 1, 0)
    assert minimax_select([[1]]) == (0, 0, None, None)
    assert minimax_select([[0]]) == (None, None, 0, 0)


def test_minimax_returns_a_named_tuple_of_indices() -> None:
    selection = minimax_select([[1, 0], [0, 1]])
    assert isinstance(selection, tuple) and isinstance(selection, Selection)
    chosen_code, chosen_test, rejected_test, rejected_code = selection
    assert (chosen_code, chosen_test, rejected_test, rejected_code) == (0, 0, 0, 1)
    assert selection.rejected_code == 1


@pytest.mark.parametrize("matrix", [[[1, 0], [1]], [[1, 2]], [[0.5]]])
def test_minimax_rejects_a_malformed_matrix(matrix: list[list[float]]) -> None:
    with pytest.raises(DataError):
        minimax_select(matrix)


# --------------------------------------------------------------------------- AceCoder pairs


def test_a_clear_pair_is_taken_under_both_rules() -> None:
    assert preference_pairs([1.0, 0.5]) == [(0, 1)]
    assert preference_pairs([1.0, 0.5], strict=False) == [(0, 1)]
    assert preference_pairs([0.5, 1.0]) == [(1, 0)]


def test_a_gap_of_exactly_0_4_is_enough_only_for_the_non_strict_rule() -> None:
    assert preference_pairs([1.0, 0.6]) == []
    assert preference_pairs([1.0, 0.6], strict=False) == [(0, 1)]


def test_a_chosen_pass_rate_of_exactly_0_8_is_enough_only_for_the_non_strict_rule() -> None:
    assert preference_pairs([0.8, 0.2]) == []
    assert preference_pairs([0.8, 0.2], strict=False) == [(0, 1)]
    assert preference_pairs([0.81, 0.2]) == [(0, 1)]


def test_a_rejected_pass_rate_of_0_is_never_paired() -> None:
    assert preference_pairs([1.0, 0.0]) == []
    assert preference_pairs([1.0, 0.0], strict=False) == []
    assert preference_pairs([1.0, 0.01]) == [(0, 1)]


def test_boundaries_hold_for_rates_computed_as_fractions() -> None:
    # 17/20 - 9/20 is exactly 0.4, but 0.85 - 0.45 == 0.39999999999999997 in floats
    assert 17 / 20 - 9 / 20 < 0.4
    assert preference_pairs([17 / 20, 9 / 20], strict=False) == [(0, 1)]
    assert preference_pairs([17 / 20, 9 / 20]) == []
    assert preference_pairs([4 / 5, 2 / 5], strict=False) == [(0, 1)]
    assert is_preferred(18 / 20, 9 / 20) and not is_preferred(17 / 20, 9 / 20)


def test_every_qualifying_pair_is_listed_in_index_order() -> None:
    rates = [1.0, 0.5, 0.9, 0.3, 0.0]
    # strict: 1.0 over 0.5 and 0.3 (not 0.9: gap 0.1; not 0.0); 0.9 over 0.3 (gap 0.6),
    # not over 0.5 (gap exactly 0.4); 0.5 and 0.3 are not above 0.8
    assert preference_pairs(rates) == [(0, 1), (0, 3), (2, 3)]
    assert preference_pairs(rates, strict=False) == [(0, 1), (0, 3), (2, 1), (2, 3)]


def test_no_pairs_from_too_few_or_equal_programs() -> None:
    assert preference_pairs([]) == []
    assert preference_pairs([1.0]) == []
    assert preference_pairs([1.0, 1.0, 0.9]) == []


@pytest.mark.parametrize("rates", [[1.2, 0.5], [-0.1], [math.nan, 0.5]])
def test_pass_rates_outside_0_1_are_rejected(rates: list[float]) -> None:
    with pytest.raises(DataError):
        preference_pairs(rates)


def test_programs_equal_up_to_formatting_and_comments_are_deduplicated() -> None:
    codes = [
        "def f(x):\n    return x + 1\n",
        "def f(x):\n  return x+1  # same\n",
        "def f(x):\n    return x + 2\n",
        "def f(x: oops",
    ]
    assert dedupe_codes(codes) == [codes[0], codes[2], codes[3]]
