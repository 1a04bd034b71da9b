"""The construction pipeline: repositories in, function and test-file tasks out.

See :mod:`gym_repost.construct.pipeline` for the stages, :mod:`~gym_repost.construct.agent`
for the construction agent's tools, and its policies: :mod:`~gym_repost.construct.builder`
(deterministic) and :mod:`~gym_repost.construct.llm_builder` (a model following RepoST).
:mod:`~gym_repost.construct.corpus` builds many repositories through an executor
(:func:`build_corpus`).

May import: analysis, context, errors, executor, harness, llm, prompting, sandbox, task, tools.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"build_corpus": "gym_repost.construct.corpus", "read_sources": "gym_repost.construct.corpus"}


def __getattr__(name: str) -> Any:
    """``build_corpus`` and ``read_sources``, imported on first use (the pipeline is heavy)."""
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gym_repost.construct' has no attribute {name!r}")


__all__ = ["build_corpus", "read_sources"]
