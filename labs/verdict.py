"""Is the run over, and whose fault was it? Pure functions over what each rank reported.

The supervisor in ``labs.launch`` keeps one `RankSnapshot` per rank (exit
code, its last heartbeat and progress, its own error report, ...) and asks
`judge` after every read; `judge` answers None (keep watching) or a `Verdict`:
every rank finished, a rank crashed, a rank hung, or the run timed out. No
processes, no clock reads: the times are passed in, so every rule below is
tested on hand-made snapshots (tests/test_labs_verdict.py).

How the culprit is named:

- Crash: a rank that exits first, or without a peer's connection error, is the
  one that crashed; the ranks whose error says their peer went away are its
  victims. After the first failure we wait `FAILURE_GRACE_S` for the others'
  reports, so the culprit can be told apart from those that merely lost it.
- Hang: when no rank reports progress, uses CPU or moves its stack for
  ``hang_timeout`` seconds, the ranks waiting inside torch.distributed (or in
  a region the lab marked as communication) are victims, and the rank that is
  not waiting, or has stopped heartbeating, is the one that hung. We use
  heartbeats rather than ``monitored_barrier``: a rank blocked in a ``recv``
  never reaches a barrier, and monitored_barrier is gloo-only.
- Timeout: the whole run took longer than ``timeout``; a rank that never
  joined the process group is named, otherwise the run was merely slow.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

HEARTBEAT_S = 0.5  # a rank reports this often; four missed beats and it counts as silent
SILENT_AFTER_S = 4 * HEARTBEAT_S
# After the first rank fails we wait this long for the others' reports, so the
# culprit can be told apart from the ranks that merely lost their peer.
FAILURE_GRACE_S = 0.5


@dataclass
class RankSnapshot:
    """What the supervisor knows about one rank; times are ``time.monotonic()`` readings."""

    rank: int
    pid: int = 0
    exit_code: int | None = None  # None: still running; negative: killed by that signal
    eof: bool = False  # its report pipe closed: the process has gone
    ready: bool = False  # it joined the process group
    done: bool = False  # it sent its result
    error: dict | None = None  # its own report of an exception: exc, message, peer_error
    failed_at: float | None = None  # when the supervisor first saw it fail
    last_output: str = ""  # the last line of its log, read when it failed
    step: int = 0
    total_steps: int = 0
    phase: str = "start"
    fraction: float = 0.0
    last_hb: float = 0.0  # its last message of any kind
    progress_t: float | None = None  # its last progress report
    active_t: float | None = None  # the last time it used CPU or moved its stack
    waiting: bool = False  # its main thread waits on peers (inside torch.distributed)
    where: list[str] = field(default_factory=list)  # its main thread's innermost frames

    @property
    def alive(self) -> bool:
        return self.exit_code is None

    @property
    def failed(self) -> bool:
        """It reported an error, or it went away without sending its result."""
        return self.error is not None or ((self.eof or not self.alive) and not self.done)


@dataclass(frozen=True)
class Verdict:
    kind: str  # "ok" | "crash" | "hang" | "timeout"
    rank: int | None  # the rank held responsible, when one can be named
    message: str


def judge(ranks: list[RankSnapshot], *, now: float, started: float, elapsed: float,
          timeout: float, hang_timeout: float,
          grace: float = FAILURE_GRACE_S) -> Verdict | None:
    """The run's verdict now, or None while it should go on.

    ``now`` and ``started`` (when watching began) are monotonic times;
    ``elapsed`` is the run's age, compared with ``timeout``.
    """
    if all(r.done for r in ranks):
        return Verdict("ok", None, "every rank finished")
    failed = [r for r in ranks if r.failed_at is not None and not r.done]
    if failed:
        settled = all(not r.alive or r.done for r in ranks)
        if settled or now - min(r.failed_at for r in failed) > grace:
            return crashed(failed)
    elif all(r.ready or r.done for r in ranks) and \
            now - last_progress(ranks, started) > hang_timeout:
        return hung(ranks, now=now, hang_timeout=hang_timeout)
    if elapsed > timeout:
        return timed_out(ranks, timeout=timeout)
    return None


def last_progress(ranks: list[RankSnapshot], started: float) -> float:
    """The last time any rank reported progress or showed activity (at least ``started``)."""
    times = [t for r in ranks for t in (r.progress_t, r.active_t) if t is not None]
    return max([started, *times])


def crashed(failed: list[RankSnapshot]) -> Verdict:
    """Blame the rank that failed on its own (not with a peer's error), and first."""
    def blame(r: RankSnapshot):
        return ((r.error or {}).get("peer_error", False), r.failed_at, r.rank)

    culprit = min(failed, key=blame)
    at = f"at step {culprit.step}" + (f"/{culprit.total_steps}" if culprit.total_steps else "")
    at += f" ({culprit.phase})"
    if culprit.error:
        message = (f"rank {culprit.rank} raised {culprit.error['exc']} {at}: "
                   f"{culprit.error['message']}")
    else:
        message = f"rank {culprit.rank} died ({exit_text(culprit.exit_code)}) {at}"
        if culprit.last_output:
            message += f"; its last output: {culprit.last_output!r}"
    others = sorted(r.rank for r in failed if r is not culprit)
    message = message.rstrip(".") + "."
    if others:
        message += f" Then rank(s) {others} failed too: they lost their peer."
    return Verdict("crash", culprit.rank, message)


def hung(ranks: list[RankSnapshot], *, now: float, hang_timeout: float) -> Verdict:
    """Blame the rank that is silent or busy outside communication while the others wait."""
    pending = [r for r in ranks if not r.done]
    silent = [r for r in pending if now - r.last_hb > SILENT_AFTER_S]
    busy = [r for r in pending if not r.waiting]
    suspects = silent or busy
    stalled = f"no rank made progress for {hang_timeout:g} s"
    if not suspects:
        return Verdict("hang", None, f"{stalled}; every rank is waiting inside a "
                                     "collective, a deadlock rather than one stuck rank.")
    # The one frozen longest (its stack stopped moving first) is the likeliest.
    culprit = min(suspects, key=lambda r: (r.active_t or 0.0, r.step, r.rank))
    how = "stopped sending heartbeats" if culprit in silent else \
        f"is stuck outside communication ({culprit.where[0] if culprit.where else '?'})"
    victims = sorted(r.rank for r in pending if r is not culprit and r.waiting)
    message = (f"rank {culprit.rank} hung at step {culprit.step}/{culprit.total_steps} "
               f"({culprit.phase}): {stalled}, and it {how}.")
    if victims:
        message += f" Rank(s) {victims} are waiting for it inside collectives."
    return Verdict("hang", culprit.rank, message)


def timed_out(ranks: list[RankSnapshot], *, timeout: float) -> Verdict:
    """Name a rank that never joined; otherwise the run was still going, only slowly."""
    late = [r for r in ranks if not r.ready and not r.done]
    if late:
        r = late[0]
        return Verdict("timeout", r.rank, f"rank {r.rank} never joined the process group "
                                          f"within the {timeout:g} s timeout.")
    slow = min((r for r in ranks if not r.done), key=lambda r: r.fraction, default=None)
    where = f"; rank {slow.rank} was at step {slow.step}/{slow.total_steps}" if slow else ""
    return Verdict("timeout", None, f"the lab did not finish within {timeout:g} s{where}. "
                                    "It was still progressing: raise --timeout or shrink the lab.")


def exit_text(code: int | None) -> str:
    """An exit status in words: "exit code 1", "killed by SIGKILL"."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
