"""The scripted model of an LLM build of the demo repository's ``RateClient.fetch_rates``,
shared by the LLM builder's tests and the Ray build tests.

Import by name (``from llm_builds import RATES_MODULE, block, verdicts``). The replies are
the demo's own evaluation script, cut in two: the module (the method, its dependencies and
a fake rate service), then its tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gym_repost.llm.scripted_server import Reply, ScriptItem

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "tasks" / "demo"
RATES_SCRIPT = (DEMO / "scripts" / "rateclient_fetch_rates.py").read_text(encoding="utf-8")
RATES_MODULE = RATES_SCRIPT[: RATES_SCRIPT.index("def _state(")]
"""The demo script up to its tests: the method, its dependencies and the fake rate service."""
RATES_TESTS = RATES_SCRIPT[RATES_SCRIPT.index("def _state(") :]


def block(code: str, before: str = "Here is the script.") -> str:
    return f"{before}\n```python\n{code}```\n"


def verdicts(functionality: str = "SAME", tests: str = "CORRECT") -> list[ScriptItem]:
    return [
        Reply(f"The target is copied as is; the service is faked.\nVERDICT: {functionality}"),
        Reply(f"The test compares both on many inputs.\nVERDICT: {tests}"),
    ]


def cli_llm_build(
    source: Path, output: Path, base_url: str, *more: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``gym-repost build SOURCE --builder llm:openai-compatible/test-model`` of ``RateClient.fetch_rates``
    alone, without tracing, one worker, priced at $1 and $2 per million tokens; ``more``: further options."""
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", "build", str(source), "-o", str(output)]
        + ["--builder", "llm:openai-compatible/test-model", "--base-url", base_url]
        + ["--only", "*::RateClient.fetch_rates", "--no-trace", "--mutants", "4", "--workers", "1"]
        + ["--builder-arg", "backoff_initial=0.05", "--builder-arg", "input_price=1.0"]
        + ["--builder-arg", "output_price=2.0", *more],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
