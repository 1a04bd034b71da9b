"""How ``gym-repost serve`` runs: the server's settings and its access token."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_repost.errors import ConfigError

CLOSED_SESSION = "open a new connection to start again"
"""How every error of a session the server closed ends (idle, shutting down): a client
that reads it knows its connection holds no session any more and opens another
(:class:`gym_repost.serve.trl.ServedEnvironment` does)."""


class ServeConfig(BaseModel):
    """Settings of one server (``gym-repost serve``'s options)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    """Interface to listen on (``0.0.0.0`` for every interface; then set a token)."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port; 0 picks a free one (the URL passed to ``on_ready`` has the real one)."""
    max_sessions: int = Field(default=16, ge=1, le=4096)
    """Sessions (client connections) open at once; one more is refused with an error
    naming this limit."""
    session_timeout: float = Field(default=600.0, gt=0)
    """Seconds a session may stay idle (no message from its client, no step running)
    before the server closes it and releases what it holds."""
    max_steps: int = Field(default=30, ge=1)
    """Step budget of every episode (truncation)."""
    max_submissions: int = Field(default=1, ge=1)
    """Submissions allowed per episode: repair iterations + 1."""
    reward: Literal["binary", "shaped"] = "binary"
    """Reward of function tasks (test-file tasks earn their metric blend)."""
    token: str | None = Field(default=None, repr=False)
    """When set, every request must carry it (``Authorization: Bearer TOKEN``, or as the
    password of the URL, ``http://user:TOKEN@host:port``); others are refused with 401."""


def read_token(path: str | Path) -> str:
    """The access token kept in ``path`` (its first line, surrounding blanks removed).

    Raises:
        ConfigError: the file cannot be read, or holds no token.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--token-file {path}: cannot read it ({exc})") from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise ConfigError(f"--token-file {path}: the file is empty; write the token on its first line")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(f"--token-file {path}: the token must be one word of printable characters")
    return token
