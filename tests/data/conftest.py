"""Helpers for the training-data tests: loading output as TRL does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def load_jsonl(tmp_path: Path) -> Any:
    """``datasets.load_dataset("json", data_files=PATH, split="train")`` with a private cache."""
    datasets = pytest.importorskip("datasets", reason="pip install 'gym-repost[dev]' for the datasets loader")

    def load(path: Path) -> Any:
        return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf-cache"))

    return load
