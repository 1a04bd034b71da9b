"""The RepoST generation prompt: dependency-only context ending in the target's header.

Built from the :class:`~gym_repost.task_view.TaskView` alone. The context is the view's
``## path`` blocks, the target's own file last and cut right after the target's header
(decorators, signature and, per the docstring option, its docstring), so the model never
sees the body, wherever the task's context came from. All functions here are pure.
"""

from __future__ import annotations

import textwrap

from gym_repost.analysis.source import find_function
from gym_repost.context import parse_context, render_context
from gym_repost.prompting import render_prompt
from gym_repost.task_view import TargetView, TaskView

DOCSTRING_OPTIONS: tuple[str, ...] = ("original", "removed", "generated")


def target_header(target: TargetView, docstring: str | None, indent: str = "") -> str:
    """Decorators, signature and (when given) a docstring, indented by ``indent``."""
    lines = [f"@{d}" for d in target.decorators] + target.signature.split("\n")
    if docstring and docstring.strip():
        doc = docstring.strip().replace('"""', '\\"\\"\\"').split("\n")
        body = ['"""' + doc[0]] + doc[1:] + ['"""'] if len(doc) > 1 else ['"""' + doc[0] + '"""']
        lines += ["    " + line if line.strip() else "" for line in body]
    return "\n".join(indent + line if line else "" for line in lines)


def _target(view: TaskView) -> TargetView:
    if view.target is None:
        raise ValueError(f"the generation prompt is for function tasks, not {view.kind} tasks")
    return view.target


def target_file_prefix(view: TaskView, docstring: str | None) -> str:
    """The target's file (as the agent sees it) up to and including the target's header."""
    target = _target(view)
    text = view.repository.files[view.repository.target_file]
    span = find_function(text, target.qualname)
    if span is None:
        return text.rstrip("\n") + "\n"
    before = "\n".join(text.split("\n")[: span.start - 1])
    return before + ("\n" if before else "") + target_header(target, docstring, span.indent) + "\n"


def generation_context(view: TaskView, docstring: str | None) -> str:
    """The dependency-only context as markdown blocks, the target's file last and cut."""
    target_file = view.repository.target_file
    files = {p: text for p, text in parse_context(view.context).items() if p != target_file}
    files[target_file] = target_file_prefix(view, docstring)
    return render_context(files).strip()


def docstring_for(view: TaskView, option: str, generated: str | None = None) -> str | None:
    """The docstring the prompt shows: the original, none, or the generated one."""
    if option == "original":
        return _target(view).docstring
    if option == "generated":
        return generated
    return None


def generation_prompt(view: TaskView, docstring: str | None) -> str:
    """The prompt asking for the complete function in one ```python block."""
    target = _target(view)
    return render_prompt(
        "gym_repost.policy",
        "generate.j2",
        repo=view.repo,
        target=target,
        file=view.repository.target_file,
        context=generation_context(view, docstring),
        header=target_header(target, docstring),
    )


def source_without_docstring(source: str, name: str) -> str:
    """The ground truth ``source`` of function ``name`` with its docstring cut out (what a
    docstring writer is shown)."""
    span = find_function(source, name)
    first = span.node.body[0] if span is not None else None
    if span is None or first is None or span.docstring is None or len(span.node.body) < 2:
        return source
    lines = source.split("\n")
    return "\n".join(lines[: first.lineno - 1] + lines[first.end_lineno or first.lineno :])


def clean_docstring(answer: str) -> str:
    """A model's docstring answer without fences, quotes or common indentation."""
    text = answer.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    text = text.strip()
    for quote in ('"""', "'''"):
        if text.startswith(quote) and text.endswith(quote) and len(text) >= 6:
            text = text[3:-3]
    return textwrap.dedent(text).strip()
