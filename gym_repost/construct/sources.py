"""Dispatch a ``gym-repost build`` SOURCE to the importer or builder that handles it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gym_repost.errors import BuildError, ConfigError
from gym_repost.task import Task

SOURCE_FORMS = ("humaneval", "repost-eval:PATH", "path/to/manifest.toml")


def import_source(source: str) -> Iterator[Task | BuildError]:
    """Yield the tasks of ``source`` (or, per candidate, why it was dropped).

    Raises:
        ConfigError: the source form is not recognised.
        BuildError: the source as a whole cannot be read.
    """
    if source == "humaneval":
        from gym_repost.construct.importers.humaneval import import_humaneval

        return import_humaneval()
    if source.startswith("repost-eval:"):
        from gym_repost.construct.importers.repost_eval import import_repost_eval

        return import_repost_eval(source.split(":", 1)[1])
    if source.endswith(".toml"):
        from gym_repost.construct.importers.manifest import import_manifest

        if not Path(source).is_file():
            raise BuildError(f"{source}: no such manifest")
        return import_manifest(source)
    raise ConfigError(f"unknown source {source!r}; this version builds from: {', '.join(SOURCE_FORMS)}")
