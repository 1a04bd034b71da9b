"""The run viewer in a real headless Chromium (Debian's ``chromium``; CI installs it):
the overview and a trajectory page of a real run render, run their script, log nothing to
the console, and filter; screenshots of both are taken.

The reference screenshots in ``tests/evaluate/screenshots/`` show the pages in review; the
test compares the pages' structure (the DOM), never pixels, which differ across machines.
``GYM_REPOST_UPDATE_SCREENSHOTS=1`` rewrites them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The viewer of a real run: the mutant control on the demo tasks, with repairs; and
    beside it (``../compare``) the comparison of the oracle with it."""
    tmp = tmp_path_factory.mktemp("viewer")
    run, oracle = tmp / "run", tmp / "oracle"
    for args in (
        ["eval", "tasks/demo.jsonl", "--policy", "mutant", "-n", "2", "--repairs", "2", "-o", str(run)],
        ["report", str(run)],
        ["eval", "tasks/demo.jsonl", "--policy", "oracle", "-o", str(oracle)],
        ["report", str(oracle), str(run), "-o", str(tmp / "compare")],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "gym_repost.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stderr
    return run / "report"


def _missing_files(dom: str, page: Path) -> list[str]:
    """Local files the page links to or loads that do not exist (Chromium does not log a
    missing file:// resource to the console)."""
    targets = re.findall(r'(?:src|href)="([^"#:]+)(?:#[^"]*)?"', dom)
    return [t for t in targets if not (page.parent / t).resolve().is_file()]


def _rows(dom: str, table: str) -> list[str]:
    body = dom.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr[^>]*data-task[^>]*>", body)


def test_the_overview_renders_without_console_messages_and_filters(report: Path, tmp_path: Path) -> None:
    dom, console = chromium("--dump-dom", url=(report / "index.html").as_uri(), tmp=tmp_path)
    assert console == [] and _missing_files(dom, report / "index.html") == []
    assert "showing tasks: 15 of 15, episodes: 30 of 30" in dom  # the script ran
    assert dom.count("<svg") == 2 and "75%" in dom and "pass@2" in dom  # charts with an axis
    names = [re.search(r'data-task="([^"]+)"', row).group(1) for row in _rows(dom, "tasks")]
    assert names == sorted(names) and len(names) == 15
    assert re.search(r"<th>started</th><td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>", dom)  # a date
    assert all(v in dom for v in ("gym-repost", "python", "gymnasium"))  # versions

    filtered, console = chromium(
        "--dump-dom", url=(report / "index.html").as_uri() + "#status=failed&task=orders", tmp=tmp_path
    )
    assert console == []
    assert "showing tasks: 2 of 15, episodes: 4 of 30" in filtered  # no mutant passes
    visible = [row for row in _rows(filtered, "episodes") if "hidden" not in row]
    assert len(visible) == 4 and all('data-status="failed"' in row for row in visible)


def test_a_trajectory_page_renders_actions_diffs_and_reports(report: Path, tmp_path: Path) -> None:
    page = report / "episodes" / "0.html"
    dom, console = chromium("--dump-dom", url=page.as_uri(), tmp=tmp_path)
    assert console == [] and _missing_files(dom, page) == []
    assert dom.count('class="step ') >= 2 and "write_code" in dom and "submit" in dom
    assert 'class="diff"' in dom and 'class="add"' in dom  # the code as a diff
    assert 'class="report failed"' in dom  # a failed submission's report
    assert "../assets/viewer.css" in dom and 'href="../index.html"' in dom


@pytest.mark.parametrize(
    ("name", "page"),
    [("overview", "index.html"), ("episode", "episodes/0.html"), ("compare", "../../compare/index.html")],
)
def test_screenshots(report: Path, tmp_path: Path, name: str, page: str) -> None:
    """A screenshot of each page; the reference copy in the repository is for review, not
    compared pixel by pixel."""
    shot = tmp_path / f"{name}.png"
    _, console = chromium(f"--screenshot={shot}", url=(report / page).resolve().as_uri(), tmp=tmp_path)
    assert console == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    reference = SCREENSHOTS / f"{name}.png"
    if os.environ.get("GYM_REPOST_UPDATE_SCREENSHOTS") == "1":
        reference.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, reference)
    assert reference.is_file(), f"no reference screenshot {reference}: run with GYM_REPOST_UPDATE_SCREENSHOTS=1"


def test_a_large_run_draws_200_rows_and_a_comparison_renders(report: Path, tmp_path: Path) -> None:
    """300 tasks: the overview draws the first 200 task rows and offers the rest; the
    comparison of that run with the real one renders without console messages."""
    from benchmarks.viewer import synthetic_run
    from gym_repost.evaluate.viewer import write_report

    synthetic_run(tmp_path / "big", tasks=300, samples=1)
    index = write_report([tmp_path / "big"], tmp_path / "big-report")
    dom, console = chromium("--dump-dom", url=index.as_uri(), tmp=tmp_path)
    assert console == []
    assert len(_rows(dom, "tasks")) == 200 and "show 100 more of 100" in dom
    assert "showing tasks: 300 of 300, episodes: 300 of 300" in dom
    assert _rows(dom, "tasks")[0].startswith('<tr data-task="synth/0"')  # natural order: 0, 1, 2, ...
    assert 'data-task="synth/10"' in dom.split('data-task="synth/9"', 1)[1]

    compare = write_report([report.parent, tmp_path / "big"], tmp_path / "compare")
    dom, console = chromium("--dump-dom", url=compare.as_uri(), tmp=tmp_path)
    assert console == [] and "showing compare-tasks: 315 of 315" in dom and dom.count("<svg") == 2
    assert "not made on the same task set" in dom
