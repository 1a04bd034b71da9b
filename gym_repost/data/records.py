"""Training records: the prompt of a task, response formats, JSONL output.

Every record is a flat JSON object that ``datasets.load_dataset("json", ...)`` and TRL's
trainers read directly: SFT ``{"messages": [...]}`` or ``{"prompt", "completion"}``,
DPO ``{"prompt", "chosen", "rejected"}``, KTO ``{"prompt", "completion", "label"}``; plus
the task's id and provenance as extra keys (:func:`task_fields`), which trainers ignore.

The prompt is the task's dependency-only context with the target's body removed, then
the instruction (``prompts/function_prompt.j2``). The files come from the task's
repository view, never from ``task.context`` verbatim: published contexts (RepoST's
``orig_context``) hold the original function, which would hand the answer to the model.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from typing import Any, Literal

from gym_repost.analysis.parsing import parse_python
from gym_repost.context import parse_context
from gym_repost.prompting import render_prompt
from gym_repost.task import FunctionTask, write_lines_atomically

logger = logging.getLogger(__name__)

SftFormat = Literal["messages", "prompt-completion"]
"""``messages``: ``{"messages": [system?, user, assistant]}``; ``prompt-completion``:
``{"prompt", "completion"}``."""

PROMPTS = "gym_repost.data"


def prompt_files(task: FunctionTask) -> dict[str, str]:
    """The files shown in a task's prompt: its context's files, as the repository view
    has them (the target's body removed); the target's file is always among them."""
    view = task.repository.files
    files = {path: view.get(path, text) for path, text in parse_context(task.context).items()}
    target_file = task.repository.target_file
    files[target_file] = view[target_file]
    if task.target.source.strip() in "\n".join(files.values()):
        logger.warning("%s: the context holds the ground truth; the prompt shows the target's file only", task.name)
        files = {target_file: view[target_file]}
    return files


def instruction_prompt(task: FunctionTask, *, with_test: bool = False) -> str:
    """The user prompt of a task: context files, then what to write.

    Args:
        task: the task.
        with_test: also ask for a test after the function (DSTC's instruction).
    """
    return render_prompt(
        PROMPTS,
        "function_prompt.j2",
        files=prompt_files(task),
        target=task.target,
        file=task.repository.target_file,
        with_test=with_test,
    )


def code_response(code: str) -> str:
    """A code answer as a model writes it: one fenced ``python`` block."""
    return f"```python\n{code.strip(chr(10))}\n```"


def task_fields(task: FunctionTask) -> dict[str, Any]:
    """The task's id and provenance as flat record keys."""
    p = task.provenance
    return {
        "task_id": task.id,
        "task_name": task.name,
        "source": p.source,
        "repo": p.repo,
        "repo_version": p.version,
        "file": p.file,
        "qualname": p.qualname,
        "license": p.license,
    }


def sft_record(task: FunctionTask, code: str, fmt: SftFormat = "messages", system: str | None = None) -> dict[str, Any]:
    """One SFT example: the task's prompt answered by ``code``."""
    prompt, answer = instruction_prompt(task), code_response(code)
    if fmt == "messages":
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer},
        ]
        return {"messages": messages, **task_fields(task)}
    if fmt == "prompt-completion":
        return {"prompt": (system + "\n\n" + prompt) if system else prompt, "completion": answer, **task_fields(task)}
    raise ValueError(f"unknown SFT format {fmt!r}")


def normalized_code(code: str) -> str:
    """A key equal for codes that differ only in formatting and comments (else the text)."""
    try:
        return ast.dump(parse_python(code.strip("\n")))
    except (SyntaxError, ValueError):
        return code.strip()


def task_seed(seed: int, task_id: str, purpose: str) -> int:
    """A stable 31-bit seed per (base seed, task, purpose)."""
    digest = hashlib.sha256(f"{seed}:{task_id}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def write_jsonl(records: Iterable[dict[str, Any]], path: str | os.PathLike[str]) -> int:
    """Write records as JSON Lines atomically; return how many were written."""
    return write_lines_atomically((json.dumps(record, ensure_ascii=False) for record in records), path)
