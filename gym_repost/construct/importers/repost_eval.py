"""Import RepoST-Eval, the RepoST paper's benchmark, from its published JSON files.

The data is read from where it lies (``repost-eval:PATH``, PATH being the directory with
``checked_test_set_final.json`` and, optionally, ``ExecEval_data.json``); nothing is
copied into the project. Each of the 296 examples becomes a function task:

* the evaluation script is the published ``eval_script``; the candidate goes right after
  the original definition (inside its class for methods), as RepoST's harness does;
* the agent's repository view is the published dependency-only context (``orig_context``),
  one file per ``## path`` block, with the target's body removed;
* the published checks are kept in ``metadata.checks``, including the published
  ``coverage_rate``, which is unreliable for methods (see the data's README): our own
  measurement goes to ``metadata.branch_coverage`` when ``validate --coverage`` runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gym_repost.analysis.packages import distribution_for
from gym_repost.construct.function_task import (
    external_imports,
    make_function_task,
    repository_view,
)
from gym_repost.context import parse_context
from gym_repost.errors import BuildError
from gym_repost.task import FunctionTask, Provenance, RepositoryView

DATA_FILE = "checked_test_set_final.json"
PROMPTS_FILE = "ExecEval_data.json"


def _repository(example: dict[str, Any]) -> RepositoryView:
    files = parse_context(example["orig_context"])
    path, qualname = example["func_path"], example["func_name"]
    if path not in files:
        # the context does not hold the target's file: show the original function alone
        files[path] = example["orig_func"].rstrip("\n") + "\n"
    try:
        return repository_view(files, path, qualname, complete=False)
    except BuildError:
        files[path] = files[path].rstrip("\n") + "\n\n\n" + example["orig_func"].rstrip("\n") + "\n"
        return repository_view(files, path, qualname, complete=False)


def _checks(example: dict[str, Any]) -> dict[str, Any]:
    def answer(value: Any) -> Any:
        return value.get("answer") if isinstance(value, dict) else value

    return {
        "published_coverage_rate": example.get("coverage_rate"),
        "sandbox_ast_check": example.get("sandbox_ast_check"),
        "sandbox_functionality_check": answer(example.get("sandbox_functionality_check")),
        "test_correctness_check": answer(example.get("test_correctness_check")),
    }


def example_task(example: dict[str, Any], prompt: str | None, source: str) -> FunctionTask:
    """One RepoST-Eval example as a function task.

    Raises:
        BuildError: the example lacks a field, or its script lacks the target or test.
    """
    missing = [
        k
        for k in ("func_name", "func_path", "eval_script", "orig_context", "idx")
        if not isinstance(example.get(k), str)
    ]
    if missing:
        raise BuildError(f"missing or non-string fields: {', '.join(missing)}")
    owner, _, repo = example["repo_name"].partition("___")
    repo_name = f"{owner}/{repo}" if repo else owner
    commit = example.get("commit_id")
    provenance = Provenance(
        source=source,
        repo=repo_name,
        version=commit,
        file=example["func_path"],
        qualname=example["func_name"],
        license=None,
        url=f"https://github.com/{repo_name}/blob/{commit}/{example['func_path']}" if commit else None,
    )
    script = example["eval_script"]
    try:
        imports = external_imports(__import__("ast").parse(script))
    except SyntaxError:
        imports = []
    return make_function_task(
        name=f"repost-eval/{example['idx']}-{example['func_name']}",
        provenance=provenance,
        script=script,
        repository=_repository(example),
        context=example["orig_context"],
        prompt=prompt,
        timeout=30.0,
        standalone=False,
        requirements=[distribution_for(m) for m in imports],
        metadata={"split": "eval", "checks": _checks(example)},
    )


def import_repost_eval(path: str | Path) -> Iterator[FunctionTask | BuildError]:
    """Yield every example of the RepoST-Eval data at ``path`` as a task (or why not).

    Raises:
        BuildError: ``path`` does not hold the data file, or it is not the expected JSON.
    """
    root = Path(path)
    data_file = root / DATA_FILE if root.is_dir() else root
    if not data_file.is_file():
        raise BuildError(f"{data_file}: not found (expected the RepoST-Eval directory holding {DATA_FILE})")
    try:
        examples = json.loads(data_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BuildError(f"{data_file}: not valid JSON: {exc}") from None
    if not isinstance(examples, list):
        raise BuildError(f"{data_file}: expected a JSON list of examples")
    prompts = _read_prompts(data_file.parent / PROMPTS_FILE)
    for number, example in enumerate(examples):
        try:
            if not isinstance(example, dict):
                raise BuildError("not a JSON object")
            yield example_task(example, prompts.get(str(example.get("idx"))), "repost-eval")
        except BuildError as exc:
            idx = example.get("idx") if isinstance(example, dict) else "?"
            yield BuildError(f"{data_file} example #{number} (idx {idx}): {exc}")


def _read_prompts(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return {str(r.get("idx")): r.get("instruction", "") for r in rows if isinstance(r, dict)}
