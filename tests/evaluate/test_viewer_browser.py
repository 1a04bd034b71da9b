"""The run viewer in a real headless Chromium (Debian's ``chromium``; CI installs it):
every kind of page of real runs renders, runs its script, logs nothing to the console,
loads no missing file, and filters, searches and sorts; screenshots of each are taken.

The runs: the mutant control on the demo tasks with repairs (and its comparison with the
oracle), a test-file run, and an agentic LLM run (the real ``openai`` SDK against the
scripted server) in which one episode's endpoint fails; all four in one folder, whose
report lists them.

The reference screenshots in ``tests/evaluate/screenshots/`` show the pages in review; the
test compares the pages' structure (the DOM), never pixels, which differ across machines.
``GYM_REPOST_UPDATE_SCREENSHOTS=1`` rewrites them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from testfile_tasks import measured_testfile_task

from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.llm.scripted_server import Fault, RecordedRequest, Reply, ScriptedLLMServer, ScriptedToolCall
from gym_repost.policy import load_policy
from gym_repost.sandbox import Sandbox
from gym_repost.task import FunctionTask, load_tasks, save_tasks

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.browser
if CHROMIUM is None and os.environ.get("GYM_REPOST_REQUIRE_BROWSER") != "1":
    pytestmark = [pytest.mark.browser, pytest.mark.skip(reason="no chromium (apt-get install chromium)")]


def chromium(*args: str, url: str, tmp: Path) -> tuple[str, list[str]]:
    """Run headless Chromium on ``url``; its stdout and the console messages it logged."""
    assert CHROMIUM is not None, "GYM_REPOST_REQUIRE_BROWSER=1 and no chromium on PATH"
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # root in CI containers
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--log-level=0",
            "--window-size=1280,1800",
            "--hide-scrollbars",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return result.stdout, console


def cli(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr


BROKEN = "demo/pricing.apply_discount"
"""The task of the LLM run whose endpoint fails in its second turn."""


class AgenticModel:
    """Reads the target's file, writes the ground truth and runs the tests in one reply,
    then submits; on :data:`BROKEN` the endpoint fails (an infrastructure error)."""

    def __init__(self, tasks: list[FunctionTask]) -> None:
        self.tasks = tasks

    def __call__(self, request: RecordedRequest) -> Reply | Fault:
        task = next(t for t in self.tasks if f"write `{t.target.name}`" in request.text())
        turn = sum(m["role"] == "assistant" for m in request.messages)
        if task.name == BROKEN and turn == 1:
            return Fault.server_error()
        if turn == 0:
            path = task.provenance.file
            return Reply.calling("read_file", {"path": path}, text=f"First I read `{path}` for the helpers.")
        if turn == 1:
            calls = (ScriptedToolCall("write_code", {"code": task.ground_truth}), ScriptedToolCall("run_tests"))
            return Reply(text="I write the function, then run the tests.", tool_calls=calls)
        return Reply.calling("submit", text="The tests pass: submitting.")


def llm_run(out: Path, sandbox: Sandbox) -> None:
    """An agentic LLM run on three demo tasks, through the real SDK."""
    tasks = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if isinstance(t, FunctionTask)][:3]
    before = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = "sk-test-openai"
    try:
        with ScriptedLLMServer(responder=AgenticModel(tasks)) as server:
            spec = "llm:openai-compatible/scripted-model"
            factory = load_policy(spec, base_url=server.openai_base_url, mode="agentic", max_retries=0)
            config = RunConfig(tasks="demo-3.jsonl", tasks_digest=tasks_digest(tasks), policy=spec)
            evaluate(tasks, factory, config, RunDir(out), sandbox)
    finally:
        if before is None:
            os.environ.pop("OPENAI_API_KEY")
        else:
            os.environ["OPENAI_API_KEY"] = before


@dataclass(frozen=True)
class Reports:
    runs: Path
    """The folder of the four runs (and its report, ``runs/report``)."""
    compare: Path

    @property
    def mutant(self) -> Path:
        return self.runs / "mutant" / "report"

    @property
    def folder(self) -> Path:
        return self.runs / "report"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox) -> Reports:
    """The viewer of real runs: the mutant control on the demo tasks, with repairs; the
    comparison of the oracle with it; a test-file run; an LLM run; the folder of them."""
    tmp = tmp_path_factory.mktemp("viewer")
    runs = tmp / "runs"
    save_tasks([measured_testfile_task(sandbox)], tmp / "testfile.jsonl")
    cli("eval", "tasks/demo.jsonl", "--policy", "mutant", "-n", "2", "--repairs", "2", "-o", str(runs / "mutant"))
    cli("report", str(runs / "mutant"))
    cli("eval", "tasks/demo.jsonl", "--policy", "oracle", "-o", str(runs / "oracle"))
    cli("report", str(runs / "oracle"), str(runs / "mutant"), "-o", str(tmp / "compare"))
    cli("eval", str(tmp / "testfile.jsonl"), "--policy", "mutant", "--repairs", "1", "-o", str(runs / "testfile"))
    cli("report", str(runs / "testfile"))  # the report that failed on test-file runs
    llm_run(runs / "llm", sandbox)
    cli("report", str(runs))
    return Reports(runs, tmp / "compare")


def _missing_files(dom: str, page: Path) -> list[str]:
    """Local files the page links to or loads that do not exist (Chromium does not log a
    missing file:// resource to the console)."""
    targets = re.findall(r'(?:src|href)="([^"#:]+)(?:#[^"]*)?"', dom)
    return [t for t in targets if not (page.parent / t).resolve().is_file()]


def _rows(dom: str, table: str) -> list[str]:
    body = dom.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr[^>]*data-task[^>]*>.*?</tr>", body, flags=re.S)


def _cells(row: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]


def render(page: Path, tmp: Path, fragment: str = "") -> str:
    """The page's DOM after its script ran, checked: no console message, no missing file."""
    dom, console = chromium("--dump-dom", url=page.as_uri() + fragment, tmp=tmp)
    assert console == [] and _missing_files(dom, page) == []
    return dom


def test_the_overview_renders_without_console_messages_and_filters(reports: Reports, tmp_path: Path) -> None:
    dom = render(reports.mutant / "index.html", tmp_path)
    assert "showing tasks: 15 of 15, episodes: 30 of 30" in dom  # the script ran
    assert dom.count("<svg") == 2 and "75%" in dom and "pass@2" in dom  # charts with an axis
    names = [re.search(r'data-task="([^"]+)"', row).group(1) for row in _rows(dom, "tasks")]
    assert names == sorted(names) and len(names) == 15
    assert re.search(r"<th>started</th><td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>", dom)  # a date
    assert all(v in dom for v in ("gym-repost", "python", "gymnasium"))  # versions
    assert re.search(r'<table class="kv nested">(<tbody>)?<tr><th>type</th><td>local</td></tr>', dom)  # the sandbox

    filtered = render(reports.mutant / "index.html", tmp_path, "#status=failed&task=orders")
    assert "showing tasks: 2 of 15, episodes: 4 of 30" in filtered  # no mutant passes
    visible = [row for row in _rows(filtered, "episodes") if "hidden" not in row]
    assert len(visible) == 4 and all('data-status="failed"' in row for row in visible)


def test_the_overview_searches_failures_and_code_and_sorts(reports: Reports, tmp_path: Path) -> None:
    index = json.loads(
        (reports.mutant / "search.js").read_text().removeprefix("window.GYM_REPOST_SEARCH = ").rstrip().rstrip(";")
    )
    matching = sum("nameerror" in text for text in index)
    assert 0 < matching < len(index)
    dom = render(reports.mutant / "index.html", tmp_path, "#text=NameError")  # loads search.js on demand
    assert f"episodes: {matching} of 30" in dom and len(_rows(dom, "episodes")) == matching

    dom = render(reports.mutant / "index.html", tmp_path, "#sort=episodes.steps.desc,tasks.task.desc")
    steps = [int(_cells(row)[6]) for row in _rows(dom, "episodes")]
    assert steps == sorted(steps, reverse=True) and len(steps) == 30
    names = [_cells(row)[0] for row in _rows(dom, "tasks")]
    assert names[0] == "demo/shipping.split_into_parcels" and names[-1] == "demo/catalog.find_category_path"
    assert re.search(r'data-key="steps"[^>]*aria-sort="descending"', dom)


def test_an_episode_page_renders_actions_diffs_and_reports(reports: Reports, tmp_path: Path) -> None:
    dom = render(reports.mutant / "episodes" / "0.html", tmp_path)
    assert dom.count('class="step ') >= 3 and "write_code" in dom and "submit" in dom
    assert 'id="step-0"' in dom and "task prompt" in dom and "# Task: write `find_category_path`" in dom
    assert 'class="diff"' in dom and 'class="add"' in dom  # the code as a diff
    assert 'class="report failed"' in dom  # a failed submission's report
    assert re.search(r"policy \d+\.\d\d s · environment \d+\.\d\d s", dom)  # per-step timing
    assert " out tokens" not in dom  # the mutant makes no model call: no "0 in / 0 out"
    assert "../assets/viewer.css" in dom and 'href="../index.html"' in dom


def test_a_test_file_episode_page_renders(reports: Reports, tmp_path: Path) -> None:
    dom = render(reports.runs / "testfile" / "report" / "episodes" / "0.html", tmp_path)
    assert "write_tests" in dom and "# Task: write the tests of `tinypkg/core.py`" in dom
    assert re.search(r"tests passed, reward 0\.\d{3} below the bar", dom) and "<th>mutation score</th>" in dom
    overview = render(reports.runs / "testfile" / "report" / "index.html", tmp_path)
    assert "showing tasks: 1 of 1, episodes: 1 of 1" in overview and "below the bar: reward" in overview


def test_an_llm_transcript_renders_the_models_replies_and_an_infrastructure_error(
    reports: Reports, tmp_path: Path
) -> None:
    pages = reports.folder / "runs" / "llm" / "episodes"
    rows = json.loads((pages.parent / "rows.js").read_text().removeprefix("window.GYM_REPOST_ROWS = ").rstrip(";\n"))
    broken = next(e["index"] for e in rows["episodes"] if e["task"] == BROKEN)
    dom = render(pages / f"{(broken + 1) % 3}.html", tmp_path)
    assert dom.count('class="msg assistant"') == 3 and "I write the function, then run the tests." in dom
    assert re.search(r"[\d,]+ in / [\d,]+ out tokens · \d+\.\d\d s", dom)
    assert '<span class="tool">run_tests</span>' in dom and "the tool result of" in dom
    step3 = dom.split('id="step-3"', 1)[1].split("</li>", 1)[0]
    assert "run_tests" in step3 and " in / " not in step3  # the reply's second call: no model call
    failed = render(pages / f"{broken}.html", tmp_path)
    assert "Infrastructure error" in failed and "LLMError" in failed
    assert "the episode stopped during step 2" in failed and "First I read" in failed


def test_a_comparison_shows_transcripts_side_by_side(reports: Reports, tmp_path: Path) -> None:
    dom = render(reports.compare / "index.html", tmp_path)
    assert "showing compare-tasks: 15 of 15" in dom and dom.count("<svg") == 2
    assert 'href="run-2/episodes/1.html"' in dom and 'href="side/0-0.html"' in dom
    side = render(reports.compare / "side" / "0-0.html", tmp_path)
    assert side.count('class="side-head"') == 2 and 'id="r1-step-0"' in side and 'id="r2-step-0"' in side
    assert 'class="report passed"' in side and 'class="report failed"' in side  # oracle beside mutant


def test_a_folder_of_runs_is_listed_and_sorts(reports: Reports, tmp_path: Path) -> None:
    dom = render(reports.folder / "index.html", tmp_path, "#sort=runs.pass1.desc")
    names = [_cells(row)[0] for row in re.findall(r"<tr>\s*<td.*?</tr>", dom, flags=re.S)]
    assert sorted(names) == ["llm", "mutant", "oracle", "testfile"]
    assert set(names[:2]) == {"llm", "oracle"}  # 100% (the LLM's infrastructure error is not scored)
    assert render(reports.folder / "runs" / "oracle" / "index.html", tmp_path).count("← all runs") == 1


@pytest.mark.parametrize(
    ("name", "page"),
    [
        ("overview", "mutant/report/index.html"),
        ("episode", "mutant/report/episodes/0.html"),
        ("transcript", "report/runs/llm/episodes/1.html"),
        ("testfile", "testfile/report/episodes/0.html"),
        ("runs", "report/index.html"),
        ("compare", "../compare/index.html"),
        ("side", "../compare/side/0-0.html"),
    ],
)
def test_screenshots(reports: Reports, tmp_path: Path, name: str, page: str) -> None:
    """A screenshot of each page; the reference copy in the repository is for review, not
    compared pixel by pixel."""
    shot = tmp_path / f"{name}.png"
    _, console = chromium(f"--screenshot={shot}", url=(reports.runs / page).resolve().as_uri(), tmp=tmp_path)
    assert console == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    reference = SCREENSHOTS / f"{name}.png"
    if os.environ.get("GYM_REPOST_UPDATE_SCREENSHOTS") == "1":
        reference.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, reference)
    assert reference.is_file(), f"no reference screenshot {reference}: run with GYM_REPOST_UPDATE_SCREENSHOTS=1"


def test_a_large_run_draws_200_rows_and_a_comparison_renders(reports: Reports, tmp_path: Path) -> None:
    """300 tasks: the overview draws the first 200 task rows and offers the rest; the
    comparison of that run with the real one renders without console messages."""
    from benchmarks.viewer import synthetic_run
    from gym_repost.evaluate.viewer import write_report

    synthetic_run(tmp_path / "big", tasks=300, samples=1)
    index = write_report([tmp_path / "big"], tmp_path / "big-report")
    dom = render(index, tmp_path)
    assert len(_rows(dom, "tasks")) == 200 and "show 100 more of 100" in dom
    assert "showing tasks: 300 of 300, episodes: 300 of 300" in dom
    assert _rows(dom, "tasks")[0].startswith('<tr data-task="synth/0"')  # natural order: 0, 1, 2, ...
    assert 'data-task="synth/10"' in dom.split('data-task="synth/9"', 1)[1]
    render(tmp_path / "big-report" / "episodes" / "0.html", tmp_path)

    compare = write_report([reports.runs / "mutant", tmp_path / "big"], tmp_path / "compare")
    dom = render(compare, tmp_path)
    assert "showing compare-tasks: 315 of 315" in dom and dom.count("<svg") == 2
    assert "not made on the same task set" in dom
