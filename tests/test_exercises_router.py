"""The router (labs/exercises/runtime/router.py) in one process: pipes, frames, no sandbox.

The grade's counts come from here, so the rules are tested one by one: a
send completes only when its receive is posted (gloo's behaviour, which
makes a ring of blocking sends deadlock), payloads arrive whole and in
order, the bytes are counted on the router's side, an all-reduce is
reduced here, and a rank that writes anything the protocol does not allow
(garbage, a call its exercise does not allow, a reused id, a send to
itself, more calls than any exercise needs) ends the case with the reason,
which no rank is told. The closed-router property and each channel it
closes are tested in ``test_exercises_redteam.py``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import pytest
import torch

RUNTIME = Path(__file__).resolve().parent.parent / "labs" / "exercises" / "runtime"
sys.path.insert(0, str(RUNTIME))

import frames  # noqa: E402 - the harness's flat imports, as inside the sandbox
import router as routing  # noqa: E402
from api import from_bytes, tensor_bytes  # noqa: E402


class Rank:
    """One end of a rank's pipes, driven by hand."""

    def __init__(self):
        self.up_r, self.up_w = os.pipe()
        self.down_r, self.down_w = os.pipe()
        self.reader = frames.Reader()

    def write(self, header: dict, payload: bytes = b"") -> None:
        os.write(self.up_w, frames.encode(header, payload))

    def read(self) -> list[tuple[dict, bytes]]:
        os.set_blocking(self.down_r, False)
        try:
            return self.reader.feed(os.read(self.down_r, 1 << 20))
        except BlockingIOError:
            return []


# Bounds roomy enough for the hand-made frames below (a case's own come from its driver).
ROOMY = routing.Bounds(message_bytes=1 << 16, tags=8, empty_messages=True)


@pytest.fixture
def world():
    def make(n: int, allowed=("send", "isend", "recv", "irecv", "all_reduce", "barrier"), bounds=ROOMY):
        ranks = [Rank() for _ in range(n)]
        r = routing.Router(n, [x.up_r for x in ranks], [x.down_w for x in ranks], allowed=allowed)
        r.reset(bounds)
        made.append((r, ranks))
        return r, ranks

    made = []
    yield make
    for r, ranks in made:
        r.close()
        for x in ranks:
            for fd in (x.up_r, x.up_w, x.down_r, x.down_w):
                with contextlib.suppress(OSError):
                    os.close(fd)


def pump(r, times: int = 3, wait: float = 0.05) -> None:
    """Let the router move frames ``times`` times, each for at most ``wait`` s (the ranks
    here are this process's pipes: what they wrote is already there)."""
    for _ in range(times):
        r.pump(time.monotonic() + wait)


def test_a_send_completes_only_when_its_receive_is_posted_and_the_payload_arrives_whole(world):
    r, (a, b) = world(2)
    t = torch.arange(5, dtype=torch.float32)
    a.write({"t": "send", "id": 1, "dst": 1, "tag": 0, "chunk": None}, tensor_bytes(t))
    pump(r)
    assert a.read() == [] and b.read() == []  # no receive yet: the send waits, as on gloo
    assert r.traffic(0)["sent"] == 20 and r.traffic(1)["received"] == 0
    b.write({"t": "recv", "id": 7, "src": 0, "tag": 0, "n": 20})
    pump(r)
    [(done_a, _)] = a.read()
    [(done_b, payload)] = b.read()
    assert done_a == {"t": "done", "id": 1} and done_b == {"t": "done", "id": 7, "src": 0}
    assert torch.equal(from_bytes(payload, torch.empty(5)), t)
    assert r.traffic(1)["received"] == 20
    [send] = r.traffic(0)["calls"]
    assert send["op"] == "send" and send["peer"] == 1 and send["bytes"] == 20 and send["t_end"] is not None


def test_messages_between_two_ranks_match_in_order_and_tags_apart(world):
    r, (a, b, c) = world(3)
    for i in range(3):
        a.write({"t": "isend", "id": i + 1, "dst": 2, "tag": 0 if i < 2 else 1}, bytes([i]) * 4)
    b.write({"t": "isend", "id": 1, "dst": 2, "tag": 0}, b"\x09" * 4)
    pump(r)
    got = []
    for i, (src, tag) in enumerate([(0, 1), (0, 0), (1, 0), (0, 0)]):
        c.write({"t": "recv", "id": i + 1, "src": src, "tag": tag, "n": 4})
        pump(r)
        got += [(h.get("src"), p) for h, p in c.read()]
    # Tag 1 first, then tag 0 in the order sent (non-overtaking from one source), rank 1's apart.
    assert got == [(0, b"\x02" * 4), (0, b"\x00" * 4), (1, b"\x09" * 4), (0, b"\x01" * 4)]
    assert r.traffic(2)["received"] == 16 and r.traffic(0)["sent"] == 12
    assert r.finish() is None  # everything matched


def test_two_blocking_sends_wait_for_each_other_and_say_so(world):
    r, (a, b) = world(2)
    a.write({"t": "send", "id": 1, "dst": 1, "tag": 0}, b"x" * 8)
    a.write({"t": "wait", "id": 1})
    b.write({"t": "send", "id": 1, "dst": 0, "tag": 0}, b"y" * 8)
    b.write({"t": "wait", "id": 1})
    pump(r)
    assert [(w["op"], w["peer"], w["bytes"]) for w in r.waiting] == [("send", 1, 8), ("send", 0, 8)]
    assert a.read() == [] and b.read() == []


def test_a_blocking_call_says_in_its_own_frame_that_it_waits_and_stops_waiting_when_answered(world):
    """A blocking call's frame carries its wait (one frame a call, not three): the router
    knows what the rank is blocked in, and forgets it when it answers the call. A wait frame
    for a call already answered (an isend's ``wait`` after its receive came) only stamps when
    the rank began to wait; the rank is not shown as blocked in it."""
    r, (a, b) = world(2)
    a.write({"t": "send", "id": 1, "dst": 1, "tag": 0, "wait": True, "line": 7}, b"x" * 8)
    pump(r)
    assert (r.waiting[0]["op"], r.waiting[0]["line"], r.waiting[1]) == ("send", 7, None)
    b.write({"t": "recv", "id": 1, "src": 0, "tag": 0, "n": 8, "wait": True, "line": 9})
    pump(r)
    assert r.waiting == [None, None] and len(a.read()) == 1 and len(b.read()) == 1
    a.write({"t": "isend", "id": 2, "dst": 1, "tag": 0}, b"y" * 4)
    b.write({"t": "recv", "id": 2, "src": 0, "tag": 0, "n": 4, "wait": True})
    pump(r)
    a.write({"t": "wait", "id": 2, "line": 11})
    pump(r)
    [isend] = [c for c in r.traffic(0)["calls"] if c["op"] == "isend"]
    assert r.waiting == [None, None] and isend["t_wait"] >= isend["t_end"] and "line" not in isend
    assert r.finish() is None


def test_a_size_mismatch_ends_the_case_and_neither_side_hears_of_it(world):
    r, (a, b) = world(2)
    a.write({"t": "isend", "id": 1, "dst": 1, "tag": 0}, b"x" * 8)
    b.write({"t": "irecv", "id": 1, "src": 0, "tag": 0, "n": 4})
    pump(r)
    assert a.read() == [] and b.read() == [] and r.traffic(1)["received"] == 0
    assert r.failure == {"key": "protocol_size_mismatch", "values": {"rank": 1, "peer": 0, "sent": 8, "expected": 4}}


def test_all_reduce_is_reduced_by_the_router_and_counted_once_each_way(world):
    r, ranks = world(3)
    for i, x in enumerate(ranks):
        t = torch.full((4,), float(i + 1))
        x.write({"t": "all_reduce", "id": 1, "dtype": "float32", "op": "sum"}, tensor_bytes(t))
        pump(r)
        if i < 2:
            assert x.read() == []  # not every rank has called yet
    for i, x in enumerate(ranks):
        [(h, payload)] = x.read()
        assert h["id"] == 1 and torch.equal(from_bytes(payload, torch.empty(4)), torch.full((4,), 6.0))
        assert r.traffic(i)["sent"] == 16 and r.traffic(i)["received"] == 16
    avg = [torch.tensor([2.0, 4.0]), torch.tensor([4.0, 8.0]), torch.tensor([0.0, 0.0])]
    for x, t in zip(ranks, avg, strict=True):
        x.write({"t": "all_reduce", "id": 2, "dtype": "float32", "op": "avg"}, tensor_bytes(t))
    pump(r)
    assert torch.equal(from_bytes(ranks[0].read()[0][1], torch.empty(2)), torch.tensor([2.0, 4.0]))


def test_an_all_reduce_of_different_sizes_ends_the_case_and_no_rank_hears_of_it(world):
    r, (a, b) = world(2)
    a.write({"t": "all_reduce", "id": 1, "dtype": "float32", "op": "sum"}, b"\0" * 8)
    b.write({"t": "all_reduce", "id": 1, "dtype": "float32", "op": "sum"}, b"\0" * 4)
    pump(r)
    assert a.read() == [] and b.read() == []
    assert r.failure["key"] == "protocol_collective_mismatch"
    assert r.failure["values"]["calls"] == "rank 0: all_reduce(float32, 8 B, sum); rank 1: all_reduce(float32, 4 B, sum)"


@pytest.mark.parametrize("frame, key", [
    (b"\xff" * 64, "protocol_frame"),  # larger than the protocol allows
    (frames.PREFIX.pack(4, 0) + b"nope", "protocol_frame"),  # not JSON
    # N-13: nested deeper than json reads (and under a pipe's 64 KiB, so one write takes it).
    (frames.PREFIX.pack(40_000, 0) + b"[" * 20_000 + b"]" * 20_000, "protocol_frame"),
    (frames.encode({"t": "all_reduce", "id": 1, "dtype": "float32", "op": "sum"}, b"\0" * 4),
     "protocol_call_refused"),
    (frames.encode({"t": "send", "id": 1, "dst": 0, "tag": 0}, b"x"), "protocol_frame"),  # to itself
    (frames.encode({"t": "send", "id": 1, "dst": 5, "tag": 0}, b"x"), "protocol_frame"),  # no such rank
    (frames.encode({"t": "send", "id": "1", "dst": 1, "tag": 0}, b"x"), "protocol_frame"),  # not an integer
    (frames.encode({"t": "recv", "id": 1, "src": 1, "tag": 0, "n": 1})
     + frames.encode({"t": "recv", "id": 1, "src": 1, "tag": 0, "n": 1}), "protocol_frame"),  # id used twice
    (frames.encode({"t": "nonsense"}, b"payload"), "protocol_frame"),  # no known kind
])
def test_a_frame_the_protocol_does_not_allow_ends_the_case_naming_the_rank(world, frame, key):
    r, (a, _b) = world(2, allowed=("send", "isend", "recv", "irecv"))
    os.write(a.up_w, frame)
    pump(r)
    assert r.failure is not None and r.failure["key"] == key, r.failure
    assert r.failure["values"]["rank"] == 0 and r.eof[0] and not r.eof[1]


def test_more_calls_than_an_exercise_needs_end_the_case(world, monkeypatch):
    monkeypatch.setattr(routing, "MAX_CALLS", 5)
    r, (a, _b) = world(2)
    for i in range(6):
        a.write({"t": "isend", "id": i + 1, "dst": 1, "tag": 0}, b"x")
    pump(r)
    assert r.failure == {"key": "protocol_calls", "values": {"limit": 5, "rank": 0}}
    assert len(r.traffic(0)["calls"]) == 5


def test_after_a_failure_nothing_more_is_done(world):
    r, (a, b) = world(2)
    a.write({"t": "send", "id": 1, "dst": 0, "tag": 0}, b"x")  # to itself: the case ends
    pump(r)
    b.write({"t": "isend", "id": 1, "dst": 0, "tag": 0}, b"abcd")
    pump(r)
    assert r.failure["key"] == "protocol_frame" and r.traffic(1)["calls"] == [] and b.read() == []


def test_reset_forgets_the_last_case(world):
    r, (a, b) = world(2)
    a.write({"t": "isend", "id": 1, "dst": 1, "tag": 0}, b"abcd")
    pump(r)
    r.reset(ROOMY)
    assert r.traffic(0) == {"sent": 0, "received": 0, "calls": []}
    b.write({"t": "irecv", "id": 1, "src": 0, "tag": 0, "n": 4})
    pump(r)
    assert b.read() == []  # the old case's message is gone, not delivered into this one
    assert r.finish()["key"] == "protocol_unmatched_recv"


def test_frames_for_the_harness_are_bounded_and_none_outlives_its_case(world, monkeypatch):
    """A rank cannot pile up frames for the harness, nor leave a second result for the next case."""
    r, (a, b) = world(2)
    a.write({"t": "result", "value": 1})
    a.write({"t": "result", "value": 2})  # one too many: the next case must not take it
    pump(r)
    assert r.take(0, ("result",)) == {"t": "result", "value": 1}
    r.reset(ROOMY)
    assert r.take(0, ("result",)) is None
    monkeypatch.setattr(routing, "MAX_INBOX", 3)
    for i in range(4):
        b.write({"t": "whatever", "i": i})
    pump(r)
    assert r.failure is not None and r.failure["key"] == "protocol_frame" and r.failure["values"]["rank"] == 1


def test_a_call_outside_a_case_ends_it(world):
    """Before the first case (the learner's file loading) there are no bounds: any call is refused."""
    r, (a, _b) = world(2, bounds=None)
    a.write({"t": "isend", "id": 1, "dst": 1, "tag": 0}, b"abcd")
    pump(r)
    assert r.failure == {"key": "protocol_outside_case", "values": {"op": "isend", "rank": 0}}
