"""Infrastructure errors cannot inflate a run's score: figures that count them as failures,
their share, and a loud warning above 5%."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gym_repost.evaluate import Episode, RunConfig, RunDir, evaluate, summarize
from gym_repost.evaluate.metrics import infra_error_share, infra_warning
from gym_repost.evaluate.report import INFRA_FAIL, SCORED, figure_rows
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.evaluate.viewer import write_report
from gym_repost.policy import load_policy
from gym_repost.sandbox import Sandbox
from gym_repost.task import load_tasks, save_tasks

ROOT = Path(__file__).resolve().parents[2]

# Solves every task from the solutions it is handed, except the episodes named in
# `broken`, where it raises what a dying sandbox worker raises: an infrastructure error.
FLAKY_POLICY = textwrap.dedent("""\
    import json
    from gym_repost.errors import SandboxError

    class Flaky:
        def __init__(self, solutions, broken=()):
            with open(solutions) as fh:
                self.solutions = json.load(fh)
            self.broken = set(broken)

        def reset(self, task, observation, info, *, seed):
            self.name, self.written = info["task_name"], False
            self.key = f"{info['task_name']}/{info['sample']}"

        def act(self, observation, info):
            if self.key in self.broken:
                raise SandboxError("sandbox worker 4242 failed: it died (simulated)")
            if self.written:
                return {"tool": "submit"}
            self.written = True
            return {"tool": "write_code", "args": {"code": self.solutions[self.name]}}
    """)


def _episode(task: str, sample: int, status: str, solved_at: int | None = None, submissions: int = 0) -> Episode:
    return Episode(
        task_id=task,
        task_name=task,
        sample=sample,
        seed=0,
        policy="p",
        status=status,
        solved_at=solved_at,
        submissions=[i == solved_at for i in range(submissions)],
    )


# ------------------------------------------------------------------ the maths, by hand


def test_infra_error_share_by_hand() -> None:
    assert infra_error_share(1, 4) == 0.25
    assert infra_error_share(0, 7) == 0.0
    assert infra_error_share(0, 0) == 0.0
    with pytest.raises(ValueError):
        infra_error_share(5, 4)


def test_the_warning_starts_above_five_percent() -> None:
    assert infra_warning(0, 0) is None
    assert infra_warning(1, 20) is None  # exactly 5%
    warning = infra_warning(2, 20)  # 10%
    assert warning is not None and "2 of 20 episodes (10.0%)" in warning and "infra = fail" in warning
    assert infra_warning(14, 14) is not None


def _viewer_page(tmp_path: Path, episodes: list[Episode], config: RunConfig | None) -> str:
    """The viewer's overview of a run directory holding ``episodes``."""
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    if config is not None:
        run.prepare(config)
    for episode in episodes:
        run.append(episode, [])
    return write_report([run.path], tmp_path / "report").read_text()


def test_summary_counts_infra_errors_as_failures_beside_the_scored_figures(tmp_path: Path) -> None:
    episodes = [
        _episode("a", 0, "passed", solved_at=0, submissions=1),
        _episode("a", 1, "infra_error"),
        _episode("b", 0, "passed", solved_at=1, submissions=2),  # passed after one repair
        _episode("b", 1, "passed", solved_at=0, submissions=1),
        _episode("c", 0, "infra_error"),  # only infrastructure errors: gone from "scored"
        _episode("c", 1, "infra_error"),
    ]
    config = RunConfig(tasks="mem", tasks_digest="x", policy="p", n=2, repairs=1)
    summary = summarize(episodes, config)
    # scored: a has 1 sample (passed), b has 2 (both pass after one repair), c has none.
    # pass@1 = mean(a 1/1, b 2/2) = 1.0; pass@2 only over b = 1.0
    # self-repair r=0: mean(a 1, b 1/2) = 0.75; r=1: mean(a 1, b 1) = 1.0
    assert summary["pass@1"] == 1.0 and summary["pass@2"] == 1.0
    assert summary["self_repair"] == {"0": 0.75, "1": 1.0}
    # infra = fail: a 1/2, b 2/2, c 0/2 -> pass@1 = 0.5; pass@2: a 1, b 1, c 0 -> 2/3
    # r=0: mean(a 1/2, b 1/2, c 0) = 1/3; r=1: mean(a 1/2, b 1, c 0) = 1/2
    with_infra = summary["with_infra_errors"]
    assert with_infra["pass@1"] == pytest.approx(0.5)
    assert with_infra["pass@2"] == pytest.approx(2 / 3)
    assert with_infra["self_repair"] == {"0": pytest.approx(1 / 3), "1": pytest.approx(0.5)}
    assert summary["infra_errors"] == 3 and summary["infra_error_share"] == 0.5
    assert "3 of 6 episodes (50.0%)" in summary["infra_warning"]

    rows = figure_rows(summary)
    assert rows["pass@k"][SCORED] == [("pass@1", 1.0), ("pass@2", 1.0)]
    assert rows["self_repair"][INFRA_FAIL][1] == ("r=1", pytest.approx(0.5))
    page = _viewer_page(tmp_path, episodes, config)
    assert 'role="alert"' in page and "WARNING: 3 of 6 episodes" in page
    assert "<th>infra = fail</th>" in page and "50.0%" in page


def test_a_clean_run_has_equal_figures_and_no_warning(tmp_path: Path) -> None:
    summary = summarize([_episode("a", 0, "passed", 0, 1), _episode("a", 1, "failed", None, 1)], None)
    assert summary["with_infra_errors"] == {"pass@1": 0.5, "pass@2": 1.0, "self_repair": {"0": 0.5}}
    assert summary["pass@1"] == 0.5 and summary["infra_error_share"] == 0.0
    assert summary["infra_warning"] is None
    assert 'role="alert"' not in _viewer_page(tmp_path, [_episode("a", 0, "passed", 0, 1)], None)


# ------------------------------------------------------------------ real runs


@pytest.fixture
def demo_tasks(tmp_path: Path) -> tuple[Path, Path]:
    """Three shipped demo tasks and their solutions (handed to the policy by the test)."""
    names = ("demo/pricing.apply_discount", "demo/money.parse_money", "demo/coupons.parse_coupon")
    tasks = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if t.name in names]
    save_tasks(tasks, tmp_path / "tasks.jsonl")
    (tmp_path / "solutions.json").write_text(json.dumps({t.name: t.ground_truth for t in tasks}))
    (tmp_path / "flaky.py").write_text(FLAKY_POLICY)
    return tmp_path / "tasks.jsonl", tmp_path / "solutions.json"


def test_cli_eval_shows_both_figures_and_warns_above_five_percent(
    tmp_path: Path, demo_tasks: tuple[Path, Path]
) -> None:
    tasks, solutions = demo_tasks
    run = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_repost.cli",
            "eval",
            str(tasks),
            "--policy",
            f"{tmp_path / 'flaky.py'}:Flaky",
            "--policy-arg",
            f"solutions={solutions}",
            "--policy-arg",
            'broken=["demo/money.parse_money/1", "demo/coupons.parse_coupon/0", "demo/coupons.parse_coupon/1"]',
            "-n",
            "2",
            "-o",
            str(run),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr  # above the warning's 5%: the run did not go well
    summary = json.loads((run / "summary.json").read_text())
    # scored: apply_discount 2/2, parse_money 1/1 -> 1.0; parse_coupon has no scored episode
    assert summary["pass@1"] == 1.0 and summary["pass@2"] == 1.0
    # infra = fail: 2/2, 1/2, 0/2 -> pass@1 = 0.5; pass@2 = (1 + 1 + 0) / 3
    assert summary["with_infra_errors"]["pass@1"] == pytest.approx(0.5)
    assert summary["with_infra_errors"]["pass@2"] == pytest.approx(2 / 3)
    assert summary["infra_errors"] == 3 and summary["infra_error_share"] == 0.5
    assert summary["infra_warning"].startswith("3 of 6 episodes (50.0%)")
    lines = result.stdout.splitlines()
    assert any(line.startswith("WARNING: 3 of 6 episodes") for line in lines), result.stdout
    scored = [line for line in lines if "│ scored " in line]
    infra = [line for line in lines if "│ infra = fail " in line]
    assert len(scored) == 3 and len(infra) == 2  # pass@k and self-repair tables; self-repair by test runs
    assert "100.0%" in scored[0] and "50.0%" in infra[0] and "66.7%" in infra[0]

    report = subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", "report", str(run)], capture_output=True, text=True, timeout=600
    )
    assert report.returncode == 0 and "WARNING: 3 of 6 episodes" in report.stdout
    page = (run / "report" / "index.html").read_text()
    assert 'role="alert"' in page and "infra = fail" in page


def test_a_run_below_five_percent_has_no_warning(
    tmp_path: Path, demo_tasks: tuple[Path, Path], sandbox: Sandbox
) -> None:
    tasks_file, solutions = demo_tasks
    tasks = list(load_tasks(tasks_file))
    factory = load_policy(
        f"{tmp_path / 'flaky.py'}:Flaky", solutions=str(solutions), broken=["demo/money.parse_money/3"]
    )
    config = RunConfig(
        tasks=str(tasks_file),
        tasks_digest=tasks_digest(tasks),
        policy=factory.spec,
        policy_options=factory.options,
        n=7,
        workers=2,
    )
    summary = evaluate(tasks, factory, config, RunDir(tmp_path / "run"), sandbox)
    # 1 of 21 episodes (4.8%): reported, not warned about
    assert summary["infra_errors"] == 1 and summary["infra_error_share"] == pytest.approx(1 / 21)
    assert summary["infra_warning"] is None
    assert summary["pass@1"] == 1.0
    assert summary["with_infra_errors"]["pass@1"] == pytest.approx((1 + 6 / 7 + 1) / 3)
    assert summary["with_infra_errors"]["pass@7"] == 1.0
