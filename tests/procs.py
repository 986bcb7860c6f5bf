"""Process checks shared by the lab tests."""

from __future__ import annotations

import time


def gone(pid: int, wait: float = 5.0) -> bool:
    """True once ``pid`` has exited (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
