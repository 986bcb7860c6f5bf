"""The supervisor's verdicts, on hand-made rank snapshots: no processes, no clock.

Each case describes what the ranks reported (exit codes, errors, heartbeats,
progress times) and checks the verdict a learner would read: which kind, which
rank, and the words that explain it. tests/test_labs_launch.py checks the same
rules end to end with real gloo ranks.
"""

from __future__ import annotations

import signal

import pytest

from labs.verdict import (
    FAILURE_GRACE_S,
    SILENT_AFTER_S,
    RankSnapshot,
    crashed,
    exit_text,
    hung,
    judge,
    last_progress,
    timed_out,
)

NOW = 1000.0  # a monotonic reading; every time below is relative to it


def ranks(n: int, **common) -> list[RankSnapshot]:
    """n ranks that joined the group and are working: heartbeating, recently active."""
    defaults = {"ready": True, "step": 3, "total_steps": 10, "phase": "reduce-scatter",
                "last_hb": NOW - 0.1, "progress_t": NOW - 0.5, "active_t": NOW - 0.2}
    return [RankSnapshot(rank=r, pid=100 + r, **{**defaults, **common}) for r in range(n)]


def verdict(snaps, *, now=NOW, started=NOW - 30.0, elapsed=30.0, timeout=120.0, hang_timeout=10.0):
    return judge(snaps, now=now, started=started, elapsed=elapsed, timeout=timeout,
                 hang_timeout=hang_timeout)


def peer_error(message="Connection closed by peer"):
    return {"exc": "DistBackendError", "message": message, "peer_error": True}


# --- still running, or finished ------------------------------------------------------


def test_working_ranks_get_no_verdict():
    assert verdict(ranks(4)) is None


def test_all_done_is_ok_even_if_one_rank_then_exited_badly():
    snaps = ranks(3, done=True)
    snaps[2].exit_code = 1  # sent its result, then failed on the way out: a warning, not a crash
    snaps[2].eof = True
    v = verdict(snaps)
    assert v.kind == "ok" and v.rank is None


def test_a_finished_rank_that_exited_is_not_a_failure():
    snaps = ranks(2)
    snaps[0].done, snaps[0].exit_code, snaps[0].eof = True, 0, True
    assert not snaps[0].failed
    assert verdict(snaps) is None


# --- crashes ---------------------------------------------------------------------------


def test_a_rank_that_exits_non_zero_is_blamed_with_its_last_words():
    snaps = ranks(3)
    s = snaps[1]
    s.exit_code, s.eof, s.failed_at = 13, True, NOW - 1.0
    s.last_output = "rank 1: injected crash at step 3 (reduce-scatter)"
    v = verdict(snaps)  # the others are still alive, but the grace period is over
    assert (v.kind, v.rank) == ("crash", 1)
    assert v.message.startswith("rank 1 died (exit code 13) at step 3/10 (reduce-scatter)")
    assert "its last output: 'rank 1: injected crash" in v.message


def test_a_rank_killed_by_a_signal_says_which():
    snaps = ranks(2)
    snaps[0].exit_code, snaps[0].failed_at = -signal.SIGKILL, NOW - 1.0
    v = verdict(snaps)
    assert (v.kind, v.rank) == ("crash", 0)
    assert "killed by SIGKILL" in v.message
    assert "last output" not in v.message  # nothing written: nothing quoted


def test_the_culprit_is_the_rank_without_a_peer_error_even_if_it_was_seen_later():
    snaps = ranks(3)
    snaps[0].error, snaps[0].failed_at = peer_error(), NOW - 0.9
    snaps[2].error, snaps[2].failed_at = peer_error("Connection reset by peer"), NOW - 0.8
    snaps[1].exit_code, snaps[1].eof, snaps[1].failed_at = 13, True, NOW - 0.7
    v = verdict(snaps)
    assert (v.kind, v.rank) == ("crash", 1)
    assert "Then rank(s) [0, 2] failed too: they lost their peer." in v.message


def test_among_ranks_that_raised_the_first_one_is_blamed():
    failed = ranks(3)
    for r, t in ((0, NOW - 0.3), (1, NOW - 0.6), (2, NOW - 0.4)):
        failed[r].failed_at = t
        failed[r].error = {"exc": "RuntimeError", "message": f"boom {r}", "peer_error": False}
    v = crashed(failed)
    assert (v.kind, v.rank) == ("crash", 1)
    assert v.message.startswith("rank 1 raised RuntimeError at step 3/10 (reduce-scatter): boom 1.")


def test_only_peer_errors_still_name_the_first():
    """Everyone lost a peer and nobody else reported: the first to fail is the best guess."""
    snaps = ranks(2)
    snaps[1].error, snaps[1].failed_at = peer_error(), NOW - 0.2
    snaps[0].error, snaps[0].failed_at = peer_error(), NOW - 0.1
    snaps[0].exit_code = snaps[1].exit_code = 1  # both gone: no need to wait
    assert crashed(snaps).rank == 1
    assert verdict(snaps).rank == 1


def test_within_the_grace_period_we_wait_for_the_others_reports():
    snaps = ranks(3)
    snaps[0].error, snaps[0].failed_at = peer_error(), NOW - FAILURE_GRACE_S / 2
    assert verdict(snaps) is None  # the real culprit may not have been seen yet
    assert verdict(snaps, now=NOW + FAILURE_GRACE_S).kind == "crash"


def test_when_every_rank_has_exited_there_is_nothing_to_wait_for():
    snaps = ranks(2)
    snaps[0].exit_code, snaps[0].failed_at = 1, NOW
    snaps[1].exit_code, snaps[1].failed_at = 1, NOW
    assert verdict(snaps).kind == "crash"


def test_a_crash_is_reported_before_a_timeout():
    snaps = ranks(2)
    snaps[1].exit_code, snaps[1].failed_at = 1, NOW - 1.0
    assert verdict(snaps, elapsed=100.0, timeout=60.0).kind == "crash"


def test_a_rank_that_closed_its_pipe_without_a_result_has_failed():
    s = RankSnapshot(rank=0, eof=True)
    assert s.alive and s.failed
    assert not RankSnapshot(rank=0).failed
    assert RankSnapshot(rank=0, error=peer_error()).failed


# --- hangs -----------------------------------------------------------------------------


def stalled(n: int) -> list[RankSnapshot]:
    """n ranks with no progress and no activity for 20 s, all waiting on peers."""
    return ranks(n, progress_t=NOW - 20.0, active_t=NOW - 20.0, waiting=True,
                 where=["distributed_c10d.py:100 recv"])


def test_the_rank_that_is_not_waiting_hung_and_the_waiting_ones_are_victims():
    snaps = stalled(3)
    snaps[2].waiting, snaps[2].where = False, ["context.py:223 _inject_failure"]
    snaps[2].active_t = NOW - 25.0
    v = verdict(snaps)
    assert (v.kind, v.rank) == ("hang", 2)
    assert "no rank made progress for 10 s" in v.message
    assert "stuck outside communication (context.py:223 _inject_failure)" in v.message
    assert "Rank(s) [0, 1] are waiting for it inside collectives." in v.message


def test_a_rank_that_stops_heartbeating_is_the_one_that_hung():
    snaps = stalled(2)
    snaps[1].last_hb = NOW - SILENT_AFTER_S - 1.0
    snaps[1].waiting = False
    snaps[0].waiting = False  # silence outweighs not waiting
    v = verdict(snaps)
    assert (v.kind, v.rank) == ("hang", 1)
    assert "stopped sending heartbeats" in v.message


def test_everyone_waiting_is_a_deadlock_with_no_culprit():
    v = verdict(stalled(4))
    assert (v.kind, v.rank) == ("hang", None)
    assert "deadlock" in v.message


def test_the_rank_frozen_longest_is_blamed_among_several_suspects():
    snaps = stalled(3)
    for r, t in ((0, NOW - 15.0), (1, NOW - 30.0), (2, NOW - 12.0)):
        snaps[r].waiting, snaps[r].active_t = False, t
    assert hung(snaps, now=NOW, hang_timeout=10.0).rank == 1


def test_no_hang_while_any_rank_is_active_or_before_the_timeout():
    snaps = stalled(3)
    snaps[0].active_t = NOW - 1.0  # burning CPU on a large message: the run is alive
    assert verdict(snaps) is None
    assert verdict(stalled(3), hang_timeout=30.0) is None


def test_no_hang_verdict_before_every_rank_has_joined():
    snaps = stalled(2)
    snaps[1].ready = False  # still starting: a slow start-up is the timeout's business
    assert verdict(snaps) is None


def test_a_finished_rank_is_neither_suspect_nor_victim():
    snaps = stalled(3)
    snaps[0].done = True
    snaps[0].waiting = False
    snaps[2].waiting = False
    v = verdict(snaps)
    assert v.rank == 2 and "[1]" in v.message and "0" not in v.message.split("Rank(s)")[1]


def test_last_progress_counts_activity_and_the_start():
    snaps = ranks(2, progress_t=None, active_t=None)
    assert last_progress(snaps, started=NOW - 3.0) == NOW - 3.0
    snaps[1].active_t = NOW - 1.0
    assert last_progress(snaps, started=NOW - 3.0) == NOW - 1.0


# --- timeouts --------------------------------------------------------------------------


def test_wall_timeout_of_a_run_that_was_still_progressing():
    snaps = ranks(2)
    snaps[0].fraction, snaps[1].fraction, snaps[1].step = 0.8, 0.3, 3
    v = verdict(snaps, elapsed=61.0, timeout=60.0)
    assert (v.kind, v.rank) == ("timeout", None)
    assert "did not finish within 60 s; rank 1 was at step 3/10" in v.message
    assert "raise --timeout" in v.message


def test_a_rank_that_never_joined_is_named_at_the_timeout():
    snaps = ranks(3)
    snaps[2].ready = False
    v = timed_out(snaps, timeout=30.0)
    assert (v.kind, v.rank) == ("timeout", 2)
    assert "never joined the process group within the 30 s timeout" in v.message


def test_no_timeout_before_the_deadline():
    assert verdict(ranks(2), elapsed=59.9, timeout=60.0) is None


# --- exit codes in words ----------------------------------------------------------------


@pytest.mark.parametrize(("code", "text"), [
    (None, "still running"), (0, "exit code 0"), (13, "exit code 13"),
    (-signal.SIGKILL, "killed by SIGKILL"), (-signal.SIGSEGV, "killed by SIGSEGV"),
    (-200, "killed by signal 200"),
])
def test_exit_text(code, text):
    assert exit_text(code) == text
