"""Fixtures for the construction pipeline: real PyPI packages, ingested once and cached."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gym_repost.construct.ingest import ingest
from gym_repost.construct.stages import SourceRepository


@pytest.fixture(scope="session")
def pypi_sdist() -> Callable[..., SourceRepository]:
    """A factory ``pypi_sdist(name, version, **ingest_options) -> SourceRepository``.

    The sdist is fetched from PyPI the first time only: it stays in the gym-repost cache
    (``$GYM_REPOST_HOME``, default ``~/.cache/gym-repost``) across test sessions, and
    within a session each (name, version, options) is ingested once. Tests using it need
    the network on a cold cache: mark them ``@pytest.mark.network``.
    """
    ingested: dict[str, SourceRepository] = {}

    def make(name: str, version: str, **options: Any) -> SourceRepository:
        key = f"{name}=={version} {sorted(options.items())!r}"
        if key not in ingested:
            ingested[key] = ingest(f"pypi:{name}=={version}", **options)
        return ingested[key]

    return make
