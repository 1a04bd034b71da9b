"""An on-disk response cache: a rerun of the same requests costs nothing.

One JSON file per request, named by the SHA-256 of the canonical request (backend type,
model, base URL, messages, tools, temperature, max_tokens, seed). Writes are atomic
(temporary file, then rename), so concurrent episodes and killed runs never leave a
half-written entry. Only successful answers are stored.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class ResponseCache:
    """Responses stored under ``directory/<key[:2]>/<key>.json``."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored response, or None (a damaged entry is ignored and logged)."""
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            logger.warning("ignoring damaged LLM cache entry %s: %s", path, exc)
            return None
        return data if isinstance(data, dict) else None

    def put(self, key: str, response: dict[str, Any]) -> None:
        """Store ``response`` under ``key``."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}.", dir=str(path.parent))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(response, fh, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
