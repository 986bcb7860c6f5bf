"""Secrets kept outside the repository, created on first use, owner-only."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from academy.settings import get_settings


def secrets_dir() -> Path:
    """The secrets folder, created if missing and made 0700 even when it existed with
    another mode (the server calls this at start-up: review 2026-12-04 I-5). One whose
    mode cannot be changed (not ours, read-only) is refused if others may enter it."""
    path = Path(get_settings().secrets_dir)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.chmod(path, 0o700)
    except OSError as err:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise RuntimeError(f"the secrets folder {path} is open to others (mode {mode:o}) and could "
                               f"not be made 0700: {err}") from err
    return path


def session_secret() -> bytes:
    """The key that signs browser session tokens.

    Two first requests may race to create it: each writes a complete key to a
    private temporary file and links it into place; the loser of the link
    reads the winner's key, so nobody ever sees a half-written (empty) key.
    """
    folder = secrets_dir()
    path = folder / "session.key"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".session-", suffix=".tmp")  # 0600
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    key = path.read_text().strip()
    if not key:
        raise RuntimeError(f"{path} is empty: delete it to make a new session key")
    return key.encode()
