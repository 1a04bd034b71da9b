"""The run viewer's pages and charts, from run directories written by hand: natural order,
trajectories (diffs, assertions, tokens), old run directories, comparisons, SVG layout."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gym_repost.errors import RunDirError
from gym_repost.evaluate import Episode, RunConfig, RunDir
from gym_repost.evaluate.charts import Series, bar_chart, line_chart
from gym_repost.evaluate.report import natural_key, task_rows
from gym_repost.evaluate.viewer import load_run, runs_of, write_report
from gym_repost.evaluate.viewer.trajectory import code_diff, step_views

ROOT = Path(__file__).resolve().parents[2]


def _episode(task: str, sample: int, passed: bool, **extra: Any) -> Episode:
    return Episode(
        task_id=f"id-{task}",
        task_name=task,
        sample=sample,
        seed=0,
        policy="p",
        status="passed" if passed else "failed",
        submissions=[passed],
        solved_at=0 if passed else None,
        **extra,
    )


def _rows(report: Path) -> dict[str, Any]:
    """The table rows the overview's script draws (``rows.js``)."""
    text = (report / "rows.js").read_text()
    assert text.startswith("window.GYM_REPOST_ROWS = ")
    return json.loads(text.removeprefix("window.GYM_REPOST_ROWS = ").rstrip().rstrip(";"))


def _run(path: Path, episodes: list[tuple[Episode, list[dict[str, Any]]]], n: int = 1) -> Path:
    rd = RunDir(path)
    rd.prepare(RunConfig(tasks="t.jsonl", tasks_digest="x", policy="p", n=n, versions={"gym-repost": "9.9"}))
    for episode, steps in episodes:
        rd.append(episode, steps)
    return path


FAILING_STEPS = [
    {
        "action": {"tool": "write_code", "args": {"code": "def f(x):\n    return x\n"}},
        "observation": "Code saved.",
        "reward": 0.0,
        "tool": "write_code",
        "ok": True,
        "tokens": {"input": 120, "output": 30},
    },  # fmt: skip
    {
        "action": {"tool": "run_tests", "args": {}},
        "observation": "Tests failed: AssertionError",
        "reward": 0.0,
        "tool": "run_tests",
        "ok": True,
        "tokens": {"input": 200, "output": 5},
        "test_report": {
            "passed": False,
            "status": "failed",
            "exception": "AssertionError",
            "message": "",
            "assertion": {"source": "assert f(2) == 4", "left": "2", "right": "4"},
        },
    },
    {
        "action": {"tool": "write_code", "args": {"code": "def f(x):\n    return 2 * x\n"}},
        "observation": "Code saved.",
        "reward": 0.0,
        "tool": "write_code",
        "ok": True,
    },  # fmt: skip
    {
        "action": '{"tool": "submit", "args": {}}',
        "observation": "Submission accepted",
        "reward": 1.0,
        "tool": "submit",
        "ok": True,
    },  # fmt: skip
]


def test_natural_order_puts_2_before_10() -> None:
    names = ["HumanEval/10", "HumanEval/2", "HumanEval/100", "HumanEval/0", "humaneval/1x"]
    expected = ["HumanEval/0", "humaneval/1x", "HumanEval/2", "HumanEval/10", "HumanEval/100"]
    assert sorted(names, key=natural_key) == expected
    rows = task_rows([_episode(n, 0, True) for n in ("HumanEval/10", "HumanEval/2", "HumanEval/1")])
    assert [r.name for r in rows] == ["HumanEval/1", "HumanEval/2", "HumanEval/10"]


def test_a_code_version_is_a_diff_against_the_previous_one() -> None:
    diff = code_diff("def f(x):\n    return x\n", "def f(x):\n    return 2 * x\n")
    assert [d.kind for d in diff] == ["hunk", "ctx", "del", "add"]
    steps = step_views(FAILING_STEPS)
    assert [s.version for s in steps] == [1, 0, 2, 0]
    assert all(d.kind == "add" for d in steps[0].diff[1:])  # the first version: every line added
    assert steps[1].report["assertion"]["left"] == "2" and steps[1].tokens == {"input": 200, "output": 5}
    assert steps[3].tool == "submit" and steps[3].reward == 1.0  # an action given as a JSON string


def test_the_report_shows_trajectories_in_natural_order(tmp_path: Path) -> None:
    run = _run(
        tmp_path / "run",
        [
            (
                _episode(
                    "HumanEval/10",
                    0,
                    False,
                    final_report={
                        "passed": False,
                        "exception": "AssertionError",
                        "assertion": {"source": "assert g() == 1", "left": "0", "right": "1"},
                    },
                ),
                [],
            ),  # fmt: skip
            (
                _episode(
                    "HumanEval/2", 0, True, test_runs=[False, True], stats={"input_tokens": 320, "output_tokens": 35}
                ),
                FAILING_STEPS,
            ),  # fmt: skip
        ],
    )
    page = write_report([run], tmp_path / "out").read_text()
    rows = _rows(tmp_path / "out")
    assert [t["task"] for t in rows["tasks"]] == ["HumanEval/2", "HumanEval/10"]
    assert [e["task"] for e in rows["episodes"]] == ["HumanEval/2", "HumanEval/10"]
    failure = "AssertionError: assert g() == 1 (left 0, right 1)"  # the failure, not "AssertionError:"
    assert rows["tasks"][1]["failure"] == rows["episodes"][1]["failure"] == failure
    assert "9.9" in page and rows["episodes"][0]["tokens"] == "320 in / 35 out"
    assert rows["tasks"][0]["episodes"] == [{"index": 0, "sample": 0, "status": "passed", "label": "passed"}]
    first = (tmp_path / "out" / "episodes" / "0.html").read_text()  # HumanEval/2 comes first
    assert "HumanEval/2" in first and "assert f(2) == 4" in first
    assert "<th>left side</th><td><code>2</code>" in first and "<th>right side</th><td><code>4</code>" in first
    assert "200 in / 5 out tokens" in first and "code version 2" in first
    assert '<span class="del">-    return x</span>' in first and '<span class="add">+    return 2 * x</span>' in first
    assert 'href="1.html"' in first  # next episode
    assert "No trajectory recorded" in (tmp_path / "out" / "episodes" / "1.html").read_text()


def test_an_old_run_directory_still_opens(tmp_path: Path) -> None:
    """Records written before the viewer: no test_runs, times, versions, step reports or tokens."""
    run = tmp_path / "old"
    run.mkdir()
    config = {"tasks": "t.jsonl", "tasks_digest": "x", "policy": "oracle", "n": 1, "repairs": 0, "max_steps": 30}
    (run / "config.json").write_text(json.dumps(config))
    final = {"passed": True, "status": "passed", "exception": None, "message": ""}
    old = {"task_id": "a", "task_name": "A/1", "sample": 0, "seed": 1, "policy": "oracle", "status": "passed",
           "submissions": [True], "solved_at": 0, "steps": 2, "reward": 1.0, "terminated": True, "truncated": False,
           "code": "def f(): pass", "final_report": final, "infra_error": None, "stats": {}}  # fmt: skip
    (run / "episodes.jsonl").write_text(json.dumps(old) + "\n")
    action = {"tool": "write_code", "args": {"code": "def f(): pass"}}
    steps = [{"action": action, "observation": "ok", "reward": 0.0, "tool": "write_code", "ok": True}]
    (run / "trajectories.jsonl").write_text(json.dumps({"task_id": "a", "sample": 0, "steps": steps}) + "\n")
    view = load_run(run)
    assert "self_repair_by_test_runs" not in view.summary
    page = write_report([run], tmp_path / "out").read_text()
    assert "(from file times)" in page and "not recorded" in page
    episode = (tmp_path / "out" / "episodes" / "0.html").read_text()
    assert "code version 1" in episode and "task prompt" not in episode and 'class="seconds"' not in episode


def test_a_directory_without_a_run_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="not a run directory"):
        write_report([tmp_path], tmp_path / "out")


def test_a_comparison_counts_wins_and_losses_per_task(tmp_path: Path) -> None:
    # run 1: a 1/2, b 0/2, c 2/2; run 2: a 2/2, b 0/2, c 1/2, d 1/2 -> vs run 1: a win, b tie, c loss, d missing
    def episodes(rates: dict[str, tuple[bool, bool]]) -> list[tuple[Episode, list[dict[str, Any]]]]:
        return [(_episode(t, s, ok), []) for t, oks in rates.items() for s, ok in enumerate(oks)]

    one = _run(tmp_path / "one", episodes({"a": (True, False), "b": (False, False), "c": (True, True)}), n=2)
    rates_two = {"a": (True, True), "b": (False, False), "c": (False, True), "d": (True, False)}
    two = _run(tmp_path / "two", episodes(rates_two), n=2)
    page = write_report([one, two], tmp_path / "cmp").read_text()
    tally = re.search(r"run 2 vs run 1</td>((?:<td[^>]*>\d+</td>){4})", page.replace("\n", ""))
    assert tally is not None and re.findall(r">(\d+)<", tally.group(1)) == ["1", "1", "1", "1"]
    assert (tmp_path / "cmp" / "run-1" / "index.html").is_file() and (tmp_path / "cmp" / "run-2" / "episodes").is_dir()
    assert page.count("<svg") == 2 and 'href="run-2/index.html"' in page
    assert "not made on the same task set" not in page  # both runs say tasks_digest "x"
    # each task links to every run's episodes and to their transcripts side by side
    row = page.split('<td data-key="task">c</td>', 1)[1].split("</tr>", 1)[0]
    assert re.findall(r'href="(run-\d/episodes/\d+\.html)"', row) == [
        "run-1/episodes/4.html",
        "run-1/episodes/5.html",
        "run-2/episodes/4.html",
        "run-2/episodes/5.html",
    ]
    assert all((tmp_path / "cmp" / href).is_file() for href in re.findall(r'href="(run-\d/episodes/[^"]+)"', page))
    assert 'href="side/2-0.html"' in row and 'href="side/3-0.html"' in page  # task d: in run 2 only
    side = (tmp_path / "cmp" / "side" / "2-0.html").read_text()
    assert side.count('class="side-head"') == 2 and 'href="2-1.html"' in side  # the other sample
    assert 'href="../run-1/episodes/4.html"' in side and 'href="../run-2/episodes/4.html"' in side
    assert "no sample 0 of this task in this run" in (tmp_path / "cmp" / "side" / "3-0.html").read_text()


def test_side_by_side_shows_each_runs_steps_in_rows(tmp_path: Path) -> None:
    one = _run(tmp_path / "one", [(_episode("t", 0, True), FAILING_STEPS)])
    two = _run(tmp_path / "two", [(_episode("t", 0, False), FAILING_STEPS[:2])])
    write_report([one, two], tmp_path / "cmp")
    side = (tmp_path / "cmp" / "side" / "0-0.html").read_text()
    cells = side.split('class="side-cell"')[1:]
    assert len(cells) == 8  # steps 1-4 (no step 0: these runs have no reset), two columns
    assert 'id="r1-step-4"' in cells[6] and cells[7].strip().startswith(">\n") and "step" not in cells[7]
    assert 'id="r2-step-2"' in cells[3] and "assert f(2) == 4" in cells[3]


def test_the_overview_sorts_searches_and_shows_the_sandbox_as_a_table(tmp_path: Path) -> None:
    final = {"passed": False, "status": "failed", "exception": "KeyError", "message": "'sku'"}
    run = _run(
        tmp_path / "run",
        [
            (_episode("a", 0, False, final_report=final, code="def f():\n    return LOOKUP['SKU']\n"), []),
            (_episode("b", 0, True, code="def g(): pass"), []),
        ],
    )
    page = write_report([run], tmp_path / "out").read_text()
    assert '<th data-key="reward" data-type="num">reward</th>' in page and '<th data-key="task">task</th>' in page
    assert 'name="text"' in page and "failures and code" in page
    sandbox = page.split("<th>sandbox</th>", 1)[1].split("</table>", 1)[0]
    assert '<table class="kv nested">' in sandbox and "<tr><th>type</th><td>local</td></tr>" in sandbox
    search = (tmp_path / "out" / "search.js").read_text()
    index = json.loads(search.removeprefix("window.GYM_REPOST_SEARCH = ").rstrip().rstrip(";"))
    assert len(index) == 2 and "keyerror: 'sku'" in index[0] and "return lookup['sku']" in index[0]
    assert "def g(): pass" in index[1]
    assert _rows(tmp_path / "out")["episodes"][0]["tokens_total"] is None


def test_a_folder_of_runs_lists_them(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    _run(folder / "run-10", [(_episode("a", 0, True), [])])
    _run(folder / "run-2", [(_episode("a", 0, False), []), (_episode("b", 0, True), [])])
    (folder / "notes").mkdir()
    (folder / "damaged").mkdir()
    (folder / "damaged" / "config.json").write_text("{")
    assert [p.name for p in runs_of([folder])] == ["damaged", "run-2", "run-10"]
    index = write_report([folder], tmp_path / "out")
    page = index.read_text()
    assert re.findall(r'href="(runs/[^"]+)"', page) == ["runs/run-2/index.html", "runs/run-10/index.html"]
    assert "damaged" in page.split("Not shown", 1)[1] and "notes" not in page
    assert 'id="runs"' in page and 'data-key="pass1"' in page and "50.0%" in page
    overview = (tmp_path / "out" / "runs" / "run-2" / "index.html").read_text()
    assert 'href="../../index.html">← all runs' in overview and 'href="../../assets/viewer.css"' in overview
    episode = (tmp_path / "out" / "runs" / "run-2" / "episodes" / "0.html").read_text()
    assert 'href="../../../assets/viewer.css"' in episode
    assert runs_of([folder / "run-2"]) == [folder / "run-2"]


def _text_boxes(svg: str) -> tuple[float, list[tuple[float, float, str]]]:
    """The SVG's width and each text's horizontal extent (estimated per character)."""
    root = ET.fromstring(svg)
    width = float(root.get("width"))
    boxes = []
    for text in root.iter("{http://www.w3.org/2000/svg}text"):
        if text.get("transform"):
            continue  # the rotated y label
        size = float(text.get("font-size") or 12)
        w = len(text.text or "") * 0.6 * size
        x = float(text.get("x"))
        anchor = text.get("text-anchor", "start")
        left = x - w / 2 if anchor == "middle" else x - w if anchor == "end" else x
        boxes.append((left, left + w, text.text or ""))
    return width, boxes


@pytest.mark.parametrize(
    "svg",
    [
        bar_chart(
            "pass@k", ["pass@1", "pass@10"], [Series("scored", [0.031, 1.0]), Series("infra = fail", [0.0, None])]
        ),
        line_chart(
            "Self-repair: pass rate after r repairs",
            ["0", "1", "2"],
            [Series("a long series name here", [0.1, 0.5, 0.9])],
            x_label="r: failed submissions before the pass",
        ),  # fmt: skip
        bar_chart("a title much longer than the plot area would be on its own", ["pass@1"], [Series("s", [0.5])]),
    ],
)
def test_charts_have_an_axis_and_no_clipped_label(svg: str) -> None:
    width, boxes = _text_boxes(svg)
    texts = [t for _, _, t in boxes]
    assert all(f"{p}%" in texts for p in (0, 25, 50, 75, 100))  # the y axis's ticks
    clipped = [t for left, right, t in boxes if left < 0 or right > width]
    assert clipped == []


def test_report_of_several_runs_needs_an_output_folder(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", "report", str(tmp_path), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and "-o DIR" in result.stderr and "Traceback" not in result.stderr
