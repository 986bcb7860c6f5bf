"""A fair gate: at most N at once, the others served in order of arrival.

``academy.accounts`` puts every Argon2 hash through one (a burst of sign-ins
at the start of a class must neither take every core and the memory nor let
late arrivals overtake those who have waited for seconds).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

# A caller that has waited this long for its turn at Argon2 is told so (``on_wait``):
# the page says "busy, retrying" instead of waiting in silence.
BUSY_NOTICE_S = 0.5


class FairGate:
    """At most ``slots`` holders at once; the others wait in a line, first come first
    served, each at most ``timeout`` seconds (then ``acquire`` is False and its place
    goes to the next). A free-for-all semaphore lets a late arrival overtake one that
    has waited for seconds; here nobody is overtaken.

    ``on_wait`` is called once (outside the lock) when a caller has waited
    :data:`BUSY_NOTICE_S` without its turn; it keeps its place in the line.
    """

    def __init__(self, slots: int):
        self.slots = max(1, slots)
        self._active = 0
        self._line: deque[object] = deque()
        self._cond = threading.Condition()

    def acquire(self, timeout: float, on_wait: Callable[[], None] | None = None) -> bool:
        now = time.monotonic()
        deadline = now + timeout
        notice_at = now + BUSY_NOTICE_S if on_wait is not None else math.inf
        ticket = object()
        with self._cond:
            self._line.append(ticket)
            try:
                while self._line[0] is not ticket or self._active >= self.slots:
                    now = time.monotonic()
                    if now >= deadline:
                        return False
                    if now >= notice_at:
                        notice_at = math.inf
                        self._cond.release()
                        try:
                            on_wait()
                        finally:
                            self._cond.acquire()
                        continue
                    self._cond.wait(min(deadline, notice_at) - now)
                self._active += 1
                return True
            finally:
                self._line.remove(ticket)
                self._cond.notify_all()  # the next in line may go (or the line moved up)

    def release(self) -> None:
        with self._cond:
            self._active -= 1
            self._cond.notify_all()
