"""Secrets kept outside the repository, created on first use, owner-only."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from app.settings import get_settings


def secrets_dir() -> Path:
    path = Path(get_settings().secrets_dir)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def session_secret() -> bytes:
    """The key that signs browser session tokens."""
    path = secrets_dir() / "session.key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    return path.read_text().strip().encode()
