"""The dependency-only context: the files a target depends on, as markdown blocks.

The format RepoST and R2E use for a model's prompt: one fenced block per file, headed by
``## path`` (``# path`` is read too), holding the parts of the file the target needs.
The target's own body never appears in a task's context: :func:`redact_target`
replaces it with the same placeholder the agent's repository view shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gym_repost.analysis.source import find_function, replace_body

BODY_PLACEHOLDER = ["# Body removed: writing this function is the task.", "..."]
"""What the agent sees instead of the target's body (repository view and context)."""

_HEADER = re.compile(r"^#{1,2} (\S.*?)\s*$")


def parse_context(markdown: str) -> dict[str, str]:
    """Split a dependency-only context into files: ```` ```python ```` blocks headed by
    ``## path`` (or ``# path``). A block closes at an unindented fence followed by the
    next block or the end, so fences inside docstrings do not cut a file short."""
    lines = markdown.split("\n")
    files: dict[str, str] = {}
    i = 0
    while i < len(lines):
        header = _HEADER.match(lines[i + 1]) if lines[i].startswith("```") and i + 1 < len(lines) else None
        if header is None:
            i += 1
            continue
        j = i + 2
        while j < len(lines) and not _block_ends(lines, j):
            j += 1
        body = "\n".join(lines[i + 2 : j]).strip("\n") + "\n"
        path = header.group(1)
        files[path] = files[path] + "\n" + body if path in files else body
        i = j + 1
    return files


def _block_ends(lines: list[str], j: int) -> bool:
    if lines[j].rstrip() != "```":
        return False
    rest = (ln for ln in lines[j + 1 :] if ln.strip())
    following = next(rest, None)
    return following is None or following.startswith("```")


def render_context(files: dict[str, str], paths: Iterable[str] | None = None) -> str:
    """Files as markdown blocks headed ``## path`` (all of them, or ``paths`` in order)."""
    chosen = list(files) if paths is None else [p for p in paths if p in files]
    return "".join(f"```python\n## {p}\n{files[p].rstrip()}\n```\n\n" for p in chosen)


def redact_target(markdown: str, target_file: str, qualname: str) -> str:
    """The context with the target's body replaced by the placeholder.

    Contexts that do not hold the target (or cannot be parsed) come back unchanged.
    """
    files = parse_context(markdown)
    source = files.get(target_file)
    span = find_function(source, qualname) if source is not None else None
    if span is None:
        return markdown
    files[target_file] = replace_body(source, span, BODY_PLACEHOLDER)  # type: ignore[arg-type]
    return render_context(files)
