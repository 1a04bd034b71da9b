"""pass@k and the self-repair table on hand-computed cases."""

from math import comb

import pytest

from gym_repost.evaluate import pass_at_k, self_repair_curve
from gym_repost.evaluate.metrics import SampleOutcome, mean_pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
        (10, 3, 1, 0.3),  # pass@1 is c / n
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (5, 0, 5, 0.0),
        (5, 1, 5, 1.0),  # n - c < k: every draw of 5 includes the pass
        (4, 2, 3, 1.0),
        (20, 1, 10, 0.5),  # one pass among 20, draw 10: probability 1/2
    ],
)
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_matches_the_combinatorial_definition() -> None:
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - comb(n - c, k) / comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_rejects_impossible_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_over_tasks() -> None:
    outcomes = [
        SampleOutcome("a", 0),
        SampleOutcome("a", None),  # task a: 1 of 2
        SampleOutcome("b", None),
        SampleOutcome("b", None),
    ]  # task b: 0 of 2
    assert mean_pass_at_k(outcomes, 1) == pytest.approx((0.5 + 0.0) / 2)
    assert mean_pass_at_k(outcomes, 2) == pytest.approx((1.0 + 0.0) / 2)
    assert mean_pass_at_k(outcomes, 3) is None


def test_self_repair_curve_counts_passes_within_r_plus_one_submissions() -> None:
    outcomes = [
        SampleOutcome("a", 0),  # passes at once
        SampleOutcome("b", 2),  # passes after two repairs
        SampleOutcome("c", None),  # never
        SampleOutcome("d", 1),
        SampleOutcome("d", None),  # half of d's samples, after one repair
    ]
    curve = self_repair_curve(outcomes, repairs=3)
    assert curve == pytest.approx(
        {0: 1 / 4, 1: (1 + 0 + 0 + 0.5) / 4, 2: (1 + 1 + 0 + 0.5) / 4, 3: (1 + 1 + 0 + 0.5) / 4}
    )


def test_self_repair_curve_is_monotone() -> None:
    outcomes = [SampleOutcome(str(i % 5), None if i % 3 else i % 4) for i in range(30)]
    curve = self_repair_curve(outcomes, repairs=3)
    values = [curve[r] for r in range(4)]
    assert values == sorted(values)


def test_summary_holds_the_mean_reward_of_scored_episodes_only() -> None:
    from gym_repost.evaluate.run_dir import Episode
    from gym_repost.evaluate.summary import summarize

    def episode(task: str, status: str, reward: float) -> Episode:
        return Episode(
            task_id=task,
            task_name=task,
            sample=0,
            seed=0,
            policy="p",
            status=status,  # type: ignore[arg-type]
            submissions=[status == "passed"],
            solved_at=0 if status == "passed" else None,
            reward=reward,
        )

    summary = summarize(
        [episode("a", "passed", 1.0), episode("b", "failed", 0.5), episode("c", "infra_error", 0.0)], None
    )
    assert summary["mean_reward"] == 0.75 and summary["infra_errors"] == 1 and summary["pass@1"] == 0.5
    assert summarize([], None)["mean_reward"] is None
