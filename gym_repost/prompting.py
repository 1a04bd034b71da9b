"""Prompts are data: Jinja templates stored under ``<package>/prompts/``."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2


@lru_cache(maxsize=None)
def _environment(package: str) -> jinja2.Environment:
    loader = jinja2.FunctionLoader(lambda name: resources.files(package).joinpath("prompts", name).read_text("utf-8"))
    return jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render_prompt(package: str, name: str, **context: Any) -> str:
    """Render template ``name`` (e.g. ``function_task.j2``) of ``package``'s ``prompts/``."""
    return _environment(package).get_template(name).render(**context).strip() + "\n"
