"""The router: the trusted other end of every rank's ``torch.distributed``, closed by design.

A rank holds no process group and no socket: its ``dist.send``,
``dist.recv``, ``isend``, ``irecv``, ``all_reduce``, ``broadcast``,
``all_gather`` and ``barrier`` (the ones its exercise allows, see ``api.py``)
write a frame (``frames.py``) on its pipe to the harness, and this router, in
the harness process, which runs no learner code, is non-dumpable and holds
the only copy of the cases, does what the call asks:

- a send waits here until its destination posts the matching receive: one
  that names this rank as its source and the same tag, in the order posted
  (MPI's rule, and gloo's); then the payload goes to the receiver and both
  calls complete. A send with no receive posted does not complete, so
  blocking sends in a ring deadlock as they do on gloo, and the report says
  who waited for whom.
- a collective (all-reduce, broadcast, all-gather, barrier) completes when
  every rank has made its next one: the router reduces the payloads itself
  (sum, avg, max, min, product), sends the source's tensor to the others,
  or every rank's tensor, in rank order, to all. Counted as on the wire: a
  broadcast's source sends its bytes once and each other rank receives
  them; in an all-gather each rank sends its tensor and receives the others'.

**The closed-router property.** What the router writes to rank r is a
function of the frames r wrote and of the payloads it delivered to r and
counted there, and of nothing else: a completion is ``{"t": "done", "id"}``
(with ``"src"``, the source r itself named, for a receive or a broadcast)
and the payload r asked for, of the size r declared. No error text, size,
tag, source or count of another rank ever reaches r. Whatever would need
one ends the case instead, as a protocol failure (`failure`) that the
report names in the learner's language and no rank is told about:

- a frame that is not one, a field of the wrong type, an unknown peer, a
  reused id, a call the exercise does not allow, a call outside a case;
- a tensor that is not on the CPU (the api says so in the frame);
- a receive from any source (``src=None``: no exercise needs one, and its
  completion would say which rank sent first);
- a tag outside ``0 .. Bounds.tags - 1``; a message, receive or collective
  tensor larger than ``Bounds.message_bytes``; a point-to-point message of
  zero bytes where the case cannot need one (``Bounds.empty_messages``);
- a send that meets a receive of another size, and ranks that make
  different collective calls (another op, size, dtype, reduction or source);
- at the end of the case (`finish`), a receive, a send or a collective that
  nothing matched;
- more than `MAX_CALLS` calls or `MAX_IN_FLIGHT` bytes waiting.

The bounds come per case from the exercise's driver (``driver.bounds``, in
the harness, from the case alone). What is left to a rank is when its
calls complete (timing): a few bits per case, never a pass.

Three more calls serve the save-and-resume exercise, whose driver (not the
learner's code) makes them, and keep the property:

- ``checkpoint_put`` stores the rank's checkpoint (bytes) here, at most
  ``Bounds.checkpoint_bytes`` (more ends the case: the checkpoint folder is
  bounded); ``checkpoint_get`` answers the rank with what *its own rank*
  stored last in this case, which the harness carries over when it kills a
  case's ranks and restarts them (`carry`): a rank's own frames, nothing else.
- ``fetch`` answers the rows of the case's data set (``reset``'s ``data``,
  made by the harness) at the indices the rank named, at most
  ``Bounds.fetch_rows`` of them: the data feeder, so the record of which
  samples each rank drew is the router's, not the rank's word.
- with ``Bounds.hold_step`` set, a rank that marks that step (``mark``) is
  held: nothing it writes afterwards is done or answered, so it blocks at
  its next call, and the harness kills it there (``harness._restart``).

Everything the grade rests on is recorded here, outside the learner's
processes: per rank the bytes it sent and received, and a record per call
(``op``, ``peer``, ``bytes``, ``tag``, the order, ``t_start`` when the router
got it and ``t_end`` when it completed); with a node map for the case
(``Bounds.node_of``, the harness's), each send's class of link (``link``:
"intra" inside a node, "inter" between nodes) and each rank's bytes per
class. A rank's word is taken only for
what the report shows and the grade does not depend on: which call it is
blocked in (``wait``), the chunk a sent tensor is (the animation's label),
whether a call was made inside backward, when it made an all-reduce
(``t_rank``, its own clock reading, for the report's timeline), and the
step markers of a training driver.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import selectors
import time
from dataclasses import dataclass

import frames

MAX_CALLS = 4096  # per rank and case: far above what any exercise needs (a ring of 4: 6 sends)
MAX_IN_FLIGHT = 64 << 20  # bytes a rank may have sent that no receive took yet
MAX_INBOX = 16  # a rank's frames for the harness not taken yet (an honest one has at most two)
# The dtypes an all_reduce may carry, with their element sizes.
DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
          "int8": 1, "uint8": 1}
REDUCE_OPS = ("sum", "avg", "max", "min", "product")
P2P = ("send", "isend", "recv", "irecv")
COLLECTIVE = ("all_reduce", "broadcast", "all_gather", "barrier")
STORE = ("fetch", "checkpoint_put", "checkpoint_get")  # the save-and-resume driver's (see above)


@dataclass(frozen=True)
class Bounds:
    """What one case can need, from its driver (``driver.bounds``): anything beyond ends it.

    ``message_bytes``: the most one message, receive or collective tensor may carry;
    ``tags``: the tags allowed are ``0 .. tags - 1``; ``empty_messages``: whether a
    point-to-point message of zero bytes is allowed (a ring over a tensor that splits
    into an empty chunk needs one); ``node_of``: the node of each rank, where the case
    has a node map (the harness's, from the case; never a rank's)."""

    message_bytes: int
    tags: int
    empty_messages: bool = False
    # The node of each rank, for an exercise with a node map (hierarchical-allreduce): each
    # send is then recorded as staying inside a node or crossing ("link"), and counted per class.
    node_of: tuple[int, ...] | None = None
    checkpoint_bytes: int = 0  # the most one rank's checkpoint may hold (0: no checkpoint store)
    fetch_rows: int = 0  # the most rows one fetch may name (0: no data feeder)
    hold_step: int | None = None  # a rank that marks this step is held (killed by the harness)


class ProtocolError(ValueError):
    """What a rank wrote that the protocol does not allow: the case ends with it.

    ``key`` names the message in ``content/exercises/<lang>/feedback.yaml``; ``values``
    (numbers, op names) fill it. The report shows it; no rank is told."""

    def __init__(self, key: str, **values):
        super().__init__(key)
        self.key, self.values = key, values


def _int(header: dict, key: str, *, low: int | None = None, high: int | None = None) -> int:
    """The integer field ``key`` of a rank's frame, within [low, high]; else the frame is refused."""
    value = header.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError("protocol_frame")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ProtocolError("protocol_frame")
    return value


def _shown_int(value: int) -> int | str:
    """An integer from a rank's frame as a failure shows it: itself, or "> 10^15" for the
    thousands of digits JSON allows (a size or tag no case is near)."""
    return value if -10**15 <= value <= 10**15 else ("> 10^15" if value > 0 else "< -10^15")


def _device(header: dict) -> str | None:
    """The device a rank's api named for the call's tensor when it is not the CPU, else None."""
    device = header.get("device", "cpu")
    if device == "cpu":
        return None
    return device if isinstance(device, str) and re.fullmatch(r"[a-z_]{1,20}", device) else "?"


class Router:
    """The ranks of one group (world size), their pipes, and what they did in the current case."""

    def __init__(self, world: int, ups: list[int], downs: list[int], allowed=P2P + ("all_reduce", "barrier")):
        self.world = world
        self.allowed = set(allowed)  # the calls the exercise allows: any other frame breaks the protocol
        self.ups, self.downs = ups, downs
        self.sel = selectors.DefaultSelector()
        self.readers = [frames.Reader() for _ in range(world)]
        self.outbox = [bytearray() for _ in range(world)]
        self.eof = [False] * world
        for rank, fd in enumerate(ups):
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, ("up", rank))
        for fd in downs:
            os.set_blocking(fd, False)
        self.reset(None)

    # -- per case

    def reset(self, bounds: Bounds | None, data: tuple[list[bytes], list[bytes]] | None = None) -> None:
        """Forget the last case's calls (counts, records, whatever was left waiting) and
        start the next one under ``bounds``; None: no case runs, and any call ends it.
        ``data``: the rows a ``fetch`` answers with, each row's bytes (inputs, labels)."""
        w = self.world
        self.bounds = bounds
        self.data = data
        self.store: list[bytes | None] = [None] * w  # each rank's last checkpoint in this case
        self.held = [False] * w
        self.failure: dict | None = None  # {"key", "values"}: the case's protocol failure
        self.sent, self.received = [0] * w, [0] * w
        self.node_of = bounds.node_of if bounds is not None else None
        if self.node_of is not None and len(self.node_of) != w:
            raise ValueError(f"a node map must name the node of each of the {w} ranks")
        self.sent_by: list[dict[str, int]] = [{"intra": 0, "inter": 0} for _ in range(w)]
        self.calls: list[list[dict]] = [[] for _ in range(w)]
        self.ops: list[dict[int, dict]] = [{} for _ in range(w)]  # id -> record, per rank
        self.in_flight = [0] * w
        self.unexpected: list[list[dict]] = [[] for _ in range(w)]  # sends to this rank, unmatched
        self.posted: list[list[dict]] = [[] for _ in range(w)]  # receives this rank posted, unmatched
        self.collective: list[list[dict]] = [[] for _ in range(w)]  # collectives, in call order
        self.waiting: list[dict | None] = [None] * w
        # Frames for the harness left from before this case (a second "result"): none of this one's.
        self.inbox: list[list[dict]] = [[] for _ in range(w)]

    def carry(self, other: Router) -> None:
        """Take ``other``'s checkpoints of this case: the ranks that restart a killed case's ranks."""
        self.store = list(other.store)

    def traffic(self, rank: int) -> dict:
        """What the router saw of ``rank`` in this case: the grade's only source of counts. With a
        node map, also the bytes its sends carried inside its node and to other nodes."""
        seen = {"sent": self.sent[rank], "received": self.received[rank], "calls": self.calls[rank]}
        if self.node_of is not None:
            seen["sent_by_link"] = dict(self.sent_by[rank])
        return seen

    def finish(self) -> dict | None:
        """The end of a case every rank returned from: a receive, send or collective that
        nothing matched is a protocol failure (the first, in rank order). The failure, or None."""
        if self.failure is not None:
            return self.failure
        for rank in range(self.world):
            for item in self.posted[rank]:
                rec = item["rec"]
                self._fail(ProtocolError("protocol_unmatched_recv", rank=rank, op=rec["op"], peer=rec["peer"],
                                         bytes=rec["bytes"], tag=rec["tag"]))
                return self.failure
        for dst in range(self.world):
            for item in self.unexpected[dst]:
                rec = item["rec"]
                self._fail(ProtocolError("protocol_unmatched_send", rank=item["src"], op=rec["op"], peer=dst,
                                         bytes=rec["bytes"], tag=rec["tag"]))
                return self.failure
        for rank in range(self.world):
            if self.collective[rank]:
                self._fail(ProtocolError("protocol_unmatched_collective", rank=rank,
                                         op=self.collective[rank][0]["rec"]["op"]))
                return self.failure
        return None

    def _fail(self, error: ProtocolError, rank: int | None = None) -> None:
        """End the case with ``error`` (the first one counts); from now on no rank is answered."""
        if self.failure is None:
            values = dict(error.values)
            if rank is not None:
                values.setdefault("rank", rank)
            self.failure = {"key": error.key, "values": values}

    # -- pipes

    def send_to(self, rank: int, header: dict, payload: bytes = b"") -> None:
        """Queue a frame for ``rank``; `pump` writes it as its pipe takes it."""
        if self.eof[rank] and not self.outbox[rank]:
            return
        self.outbox[rank] += frames.encode(header, payload)
        self._flush(rank)

    def _flush(self, rank: int) -> None:
        box = self.outbox[rank]
        while box:
            try:
                n = os.write(self.downs[rank], box)
            except BlockingIOError:
                break
            except OSError:  # the rank is gone: nobody will read it
                box.clear()
                break
            del box[:n]

    def pump(self, deadline: float) -> None:
        """Move frames both ways for at most until ``deadline`` (0.2 s at a time)."""
        for rank in range(self.world):
            self._flush(rank)
        timeout = max(0.0, min(deadline - time.monotonic(), 0.2))
        if any(self.outbox):
            timeout = min(timeout, 0.01)
        for key, _ in self.sel.select(timeout=timeout):
            _, rank = key.data
            try:
                data = os.read(key.fd, 1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._close(rank)
                continue
            try:
                for header, payload in self.readers[rank].feed(data):
                    self._handle(rank, header, payload)
            except frames.FrameError:
                self._fail(ProtocolError("protocol_frame"), rank)
                self._close(rank)
            except ProtocolError as exc:
                self._fail(exc, rank)
                self._close(rank)

    def _close(self, rank: int) -> None:
        self.eof[rank] = True
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(self.ups[rank])

    def take(self, rank: int, kinds: tuple[str, ...]) -> dict | None:
        for i, msg in enumerate(self.inbox[rank]):
            if msg.get("t") in kinds:
                return self.inbox[rank].pop(i)
        return None

    def close(self) -> None:
        self.sel.close()

    # -- the calls

    def _handle(self, rank: int, header: dict, payload: bytes) -> None:
        kind = header.get("t")
        if self.held[rank]:
            return  # held for the kill: nothing it writes is done or answered
        if kind in P2P or kind in COLLECTIVE or kind in STORE:
            if self.failure is None:  # after a failure the case is over: nothing more is done
                self._call(rank, kind, header, payload)
                if header.get("wait") is True:  # a blocking call: its frame is its wait frame too
                    self._wait(rank, header)
        elif kind == "wait":
            self._wait(rank, header)
        elif kind == "mark":
            step = _int(header, "step", low=0, high=1 << 20)
            self._record(rank, {"op": "step", "step": step})
            hold = self.bounds.hold_step if self.bounds is not None else None
            if hold is not None and step >= hold:
                self.held[rank] = True
        elif isinstance(kind, str) and payload == b"":
            if len(self.inbox[rank]) >= MAX_INBOX:
                raise ProtocolError("protocol_frame")
            self.inbox[rank].append(header)  # the harness's business: ready, result, crash...
        else:
            raise ProtocolError("protocol_frame")

    def _wait(self, rank: int, header: dict) -> None:
        """``rank`` waits for its call ``header["id"]``: when it began (``t_wait``), and, while the
        call is not complete, what it is blocked in (`waiting`, cleared when the call completes)."""
        rec = self.ops[rank].get(header.get("id")) if isinstance(header.get("id"), int) else None
        if rec is None:
            return
        rec.setdefault("t_wait", time.perf_counter())
        if rec["t_end"] is None:
            self.waiting[rank] = rec
            line = header.get("line")  # the rank's word, for the deadlock report only
            if isinstance(line, int) and not isinstance(line, bool) and 0 < line < 1 << 20:
                rec["line"] = line

    def _record(self, rank: int, rec: dict) -> dict:
        if len(self.calls[rank]) >= MAX_CALLS:
            raise ProtocolError("protocol_calls", limit=MAX_CALLS)
        rec.setdefault("t_start", time.perf_counter())
        rec.setdefault("t_end", None)
        self.calls[rank].append(rec)
        return rec

    def _answer(self, rank: int, item: dict, payload: bytes = b"") -> None:
        """Complete one of ``rank``'s calls. The header is made of that call's own frame
        (its id, the source it named): nothing of another rank's but the payload."""
        header = {"t": "done", "id": item["id"]}
        if item["rec"]["op"] in ("recv", "irecv", "broadcast"):
            header["src"] = item["rec"]["peer"]
        if self.waiting[rank] is item["rec"]:
            self.waiting[rank] = None  # no longer blocked in it
        self.received[rank] += len(payload)
        self.send_to(rank, header, payload)

    def _bounded(self, rank: int, op: str, size: int) -> None:
        """A message, receive or collective tensor of ``size`` bytes must fit the case."""
        if size > self.bounds.message_bytes:
            raise ProtocolError("protocol_message_size", rank=rank, op=op, bytes=_shown_int(size),
                                limit=self.bounds.message_bytes)

    def _tag(self, rank: int, op: str, header: dict) -> int:
        tag = _int(header, "tag")
        if not 0 <= tag < self.bounds.tags:
            raise ProtocolError("protocol_tag", rank=rank, op=op, tag=_shown_int(tag), last=self.bounds.tags - 1)
        return tag

    def _call(self, rank: int, kind: str, header: dict, payload: bytes) -> None:
        if kind not in self.allowed:
            raise ProtocolError("protocol_call_refused", op=kind)
        if self.bounds is None:
            raise ProtocolError("protocol_outside_case", op=kind)
        if (device := _device(header)) is not None:
            raise ProtocolError("protocol_device", op=kind, device=device)
        op_id = _int(header, "id", low=0)
        if op_id in self.ops[rank]:
            raise ProtocolError("protocol_frame")
        hint_bw = header.get("bw") is True
        if kind in ("send", "isend"):
            self._send(rank, kind, op_id, header, payload, hint_bw)
        elif kind in ("recv", "irecv"):
            self._recv(rank, kind, op_id, header, hint_bw)
        elif kind in STORE:
            self._store(rank, kind, op_id, header, payload)
        else:
            self._collective(rank, kind, op_id, header, payload, hint_bw)

    def _store(self, rank: int, kind: str, op_id: int, header: dict, payload: bytes) -> None:
        """A checkpoint kept or given back (this rank's own), or rows of the case's data."""
        rec = {"op": kind, "peer": None, "bytes": len(payload), "chunk": None, "in_backward": False}
        if kind == "checkpoint_put":
            if len(payload) > self.bounds.checkpoint_bytes:
                raise ProtocolError("protocol_checkpoint_size", rank=rank, bytes=len(payload),
                                    limit=self.bounds.checkpoint_bytes)
            self.store[rank] = payload
            answer = b""
        elif payload:
            raise ProtocolError("protocol_frame")
        elif kind == "checkpoint_get":
            answer = self.store[rank] or b""
            rec["bytes"] = len(answer)
        else:  # fetch
            rows = header.get("idx")
            if self.data is None or not isinstance(rows, list) or not 0 < len(rows) <= self.bounds.fetch_rows:
                raise ProtocolError("protocol_frame")
            inputs, labels = self.data
            if any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(inputs) for i in rows):
                raise ProtocolError("protocol_frame")
            answer = b"".join(inputs[i] for i in rows) + b"".join(labels[i] for i in rows)
            rec.update(indices=list(rows), bytes=len(answer))
        self.ops[rank][op_id] = self._record(rank, rec)
        rec["t_end"] = time.perf_counter()
        self.send_to(rank, {"t": "done", "id": op_id}, answer)  # at once: nothing to wait for

    def _send(self, rank: int, kind: str, op_id: int, header: dict, payload: bytes, hint_bw: bool) -> None:
        peer = _int(header, "dst", low=0, high=self.world - 1)
        if peer == rank:
            raise ProtocolError("protocol_frame")
        tag = self._tag(rank, kind, header)
        self._bounded(rank, kind, len(payload))
        if not payload and not self.bounds.empty_messages:
            raise ProtocolError("protocol_zero_bytes", op=kind, peer=peer)
        chunk = header.get("chunk")
        chunk = chunk if isinstance(chunk, int) and not isinstance(chunk, bool) \
            and 0 <= chunk < self.world else None
        rec = self._record(rank, {"op": kind, "peer": peer, "bytes": len(payload), "chunk": chunk,
                                  "tag": tag, "in_backward": hint_bw})
        self.sent[rank] += len(payload)
        if self.node_of is not None:  # the class of link this send took, from the harness's map
            rec["link"] = "intra" if self.node_of[rank] == self.node_of[peer] else "inter"
            self.sent_by[rank][rec["link"]] += len(payload)
        self.in_flight[rank] += len(payload)
        if self.in_flight[rank] > MAX_IN_FLIGHT:
            raise ProtocolError("protocol_in_flight", limit=MAX_IN_FLIGHT)
        item = {"src": rank, "id": op_id, "payload": payload, "rec": rec}
        self.ops[rank][op_id] = rec
        match = next((r for r in self.posted[peer] if r["rec"]["peer"] == rank and r["rec"]["tag"] == tag), None)
        if match is None:
            self.unexpected[peer].append(item)
        else:
            self.posted[peer].remove(match)
            self._deliver(item, peer, match)

    def _recv(self, rank: int, kind: str, op_id: int, header: dict, hint_bw: bool) -> None:
        if header.get("src") is None:
            raise ProtocolError("protocol_any_source", op=kind)
        src = _int(header, "src", low=0, high=self.world - 1)
        if src == rank:
            raise ProtocolError("protocol_frame")
        tag = self._tag(rank, kind, header)
        size = _int(header, "n", low=0)
        self._bounded(rank, kind, size)
        if not size and not self.bounds.empty_messages:
            raise ProtocolError("protocol_zero_bytes", op=kind, peer=src)
        rec = self._record(rank, {"op": kind, "peer": src, "bytes": size, "chunk": None, "tag": tag,
                                  "in_backward": hint_bw})
        item = {"src": src, "id": op_id, "rec": rec}
        self.ops[rank][op_id] = rec
        match = next((s for s in self.unexpected[rank] if s["src"] == src and s["rec"]["tag"] == tag), None)
        if match is None:
            self.posted[rank].append(item)
        else:
            self.unexpected[rank].remove(match)
            self._deliver(match, rank, item)

    def _deliver(self, send: dict, dst: int, recv: dict) -> None:
        """A matched pair: the payload to the receiver, both calls complete; or, when the
        sizes differ, the end of the case (neither side learns the other's size)."""
        src, payload = send["src"], send["payload"]
        self.in_flight[src] -= len(payload)
        want = recv["rec"]["bytes"]
        if want != len(payload):
            raise ProtocolError("protocol_size_mismatch", rank=dst, peer=src, sent=len(payload), expected=want)
        send["rec"]["t_end"] = recv["rec"]["t_end"] = time.perf_counter()
        self._answer(dst, recv, payload)
        self._answer(src, send)

    def _collective(self, rank: int, kind: str, op_id: int, header: dict, payload: bytes, hint_bw: bool) -> None:
        dtype, op, src, size = None, None, None, len(payload)
        if kind in ("all_reduce", "all_gather", "broadcast"):
            dtype = header.get("dtype")
            if dtype not in DTYPES:
                raise ProtocolError("protocol_frame")
        if kind == "all_reduce":
            op = header.get("op")
            if op not in REDUCE_OPS:
                raise ProtocolError("protocol_frame")
        elif kind == "broadcast":
            src, size = _int(header, "src", low=0, high=self.world - 1), _int(header, "n", low=0)
            if len(payload) != (size if src == rank else 0):
                raise ProtocolError("protocol_frame")  # the source's tensor, and only the source's
        self._bounded(rank, kind, size)
        if dtype is not None and size % DTYPES[dtype]:
            raise ProtocolError("protocol_frame")
        said = header.get("ts")  # when the rank says it made the call: drawn, never graded
        rec = self._record(rank, {"op": kind, "peer": src, "bytes": size, "chunk": None,
                                  "dtype": dtype, "reduce": op, "in_backward": hint_bw,
                                  "t_rank": said if isinstance(said, float) and math.isfinite(said) else None})
        self.ops[rank][op_id] = rec
        self.sent[rank] += len(payload)
        if kind in ("broadcast", "all_gather"):  # held here until every rank has called
            self.in_flight[rank] += len(payload)
            if self.in_flight[rank] > MAX_IN_FLIGHT:
                raise ProtocolError("protocol_in_flight", limit=MAX_IN_FLIGHT)
        self.collective[rank].append({"id": op_id, "payload": payload, "rec": rec})
        self._collectives()

    def _collectives(self) -> None:
        """Complete every round of collectives for which every rank has called, or end the
        case at the first round whose calls differ."""
        while all(self.collective):
            round_ = [queue.pop(0) for queue in self.collective]
            recs = [item["rec"] for item in round_]
            first = recs[0]
            for rank, item in enumerate(round_):
                if item["rec"]["op"] in ("broadcast", "all_gather"):
                    self.in_flight[rank] -= len(item["payload"])
            _check_round(recs)
            if first["op"] == "all_gather" and first["bytes"] * self.world > frames.MAX_PAYLOAD:
                raise ProtocolError("protocol_message_size", rank=0, op="all_gather",
                                    bytes=first["bytes"] * self.world, limit=frames.MAX_PAYLOAD)
            now = time.perf_counter()
            for rec in recs:
                rec["t_end"] = now
            payloads = [i["payload"] for i in round_]
            for rank, item in enumerate(round_):
                if first["op"] == "barrier":
                    got = b""
                elif first["op"] == "all_reduce":
                    got = _reduce(payloads, first["dtype"], first["reduce"])
                elif first["op"] == "broadcast":  # the source gets nothing back; the others, its tensor
                    got = b"" if rank == first["peer"] else payloads[first["peer"]]
                else:  # all_gather: every tensor, though this rank's own never left it
                    got = b"".join(payloads)
                self._answer(rank, item, got)
                if first["op"] == "all_gather":
                    self.received[rank] -= len(payloads[rank])


def _check_round(recs: list[dict]) -> None:
    """One round of collectives must be the same call on every rank (op, size, dtype,
    reduction, source): torch.distributed's rule, which gloo leaves to hang or to garble.
    Else the case ends; the report lists what each rank called, and no rank learns it."""
    first = recs[0]
    if first["op"] == "broadcast" and all(r["op"] == "broadcast" for r in recs) \
            and any(r["peer"] != first["peer"] for r in recs):
        raise ProtocolError("broadcast_sources_differ", sources=", ".join(str(r["peer"]) for r in recs),
                            world_size=len(recs))
    if any((r["op"], r["bytes"], r["dtype"], r["reduce"], r["peer"])
           != (first["op"], first["bytes"], first["dtype"], first["reduce"], first["peer"]) for r in recs):
        raise ProtocolError("protocol_collective_mismatch", calls="; ".join(
            f"rank {i}: {_shown(r)}" for i, r in enumerate(recs)))


def _shown(rec: dict) -> str:
    """One collective call as the report lists it: ``all_reduce(float32, 16 B, sum)``."""
    parts = [p for p in (rec["dtype"], f"{rec['bytes']} B" if rec["op"] != "barrier" else None, rec["reduce"],
                         f"src={rec['peer']}" if rec["op"] == "broadcast" else None) if p]
    return f"{rec['op']}({', '.join(parts)})"


def _reduce(payloads: list[bytes], dtype: str, op: str) -> bytes:
    """The reduction of the ranks' buffers, in rank order, as torch computes it."""
    import torch

    kind = getattr(torch, dtype)
    stacked = torch.stack([torch.frombuffer(bytearray(p), dtype=kind) for p in payloads]) if payloads[0] \
        else torch.empty(len(payloads), 0, dtype=kind)
    if op in ("sum", "avg"):
        out = stacked.sum(0)
        if op == "avg":
            out = out / len(payloads) if kind.is_floating_point else out // len(payloads)
    elif op == "product":
        out = stacked.prod(0)
    else:
        out = stacked.amax(0) if op == "max" else stacked.amin(0)
    return out.to(kind).contiguous().view(torch.uint8).numpy().tobytes()
