"""The router: the trusted other end of every rank's ``torch.distributed``.

A rank holds no process group and no socket: its ``dist.send``,
``dist.recv``, ``isend``, ``irecv``, ``all_reduce``, ``broadcast``,
``all_gather`` and ``barrier`` (the ones its exercise allows, see ``api.py``) write a frame (``frames.py``) on
its pipe to the harness, and this router, in the harness process, which
runs no learner code, is non-dumpable and holds the only copy of the
cases, does what the call asks:

- a send waits here until the destination posts a matching receive (same
  source or any, same tag, in the order posted: MPI's rule, and gloo's);
  then the payload goes to the receiver and both calls complete. A send
  with no receive posted does not complete, so blocking sends in a ring
  deadlock as they do on gloo, and the report says who waited for whom.
- a collective (all-reduce, broadcast, all-gather, barrier) completes when
  every rank has called its next one, and only if all made the same call
  with the same size, dtype, op and source (else each gets the error): the
  router reduces the payloads itself (sum, avg, max, min, product), sends
  the source's tensor to the others, or every rank's tensor, in rank
  order, to all. Counted as on the wire: a broadcast's source sends its
  bytes once and each other rank receives them; in an all-gather each rank
  sends its tensor and receives the others'.

Everything the grade rests on is recorded here, outside the learner's
processes: per rank the bytes it sent and received, and a record per call
(``op``, ``peer``, ``bytes``, the order, ``t_start`` when the router got it
and ``t_end`` when it completed). Given a node map for the case (the
harness's, from the case: hierarchical-allreduce), each send also says which
class of link it took (``link``: "intra" inside a node, "inter" between
nodes), and the bytes each rank sent are also counted per class. A rank's word is taken only for what the
report shows and the grade does not depend on: which call it is blocked in
(``wait``), the chunk a sent tensor is (the animation's label), whether a
call was made inside backward, when it made an all-reduce (``t_rank``, its own
clock reading, for the report's timeline), and the step markers of a
training driver.

A rank that writes a frame the protocol does not allow (not a frame, a
field of the wrong type, an unknown peer, a reused id, more than
`MAX_CALLS` calls or `MAX_IN_FLIGHT` bytes waiting in one case) has broken
it: the router stops reading it and the harness reports the case as that
rank's crash, with the reason.
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import time

import frames

MAX_CALLS = 4096  # per rank and case: far above what any exercise needs (a ring of 4: 6 sends)
MAX_IN_FLIGHT = 64 << 20  # bytes a rank may have sent that no receive took yet
# The dtypes an all_reduce may carry, with their element sizes.
DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
          "int8": 1, "uint8": 1}
REDUCE_OPS = ("sum", "avg", "max", "min", "product")
P2P = ("send", "isend", "recv", "irecv")
COLLECTIVE = ("all_reduce", "broadcast", "all_gather", "barrier")


class ProtocolError(ValueError):
    """What a rank wrote that the protocol does not allow; the message goes in the report."""


def _int(header: dict, key: str, *, low: int | None = None, high: int | None = None,
         optional: bool = False) -> int | None:
    value = header.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"{key} must be an integer")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ProtocolError(f"{key}={value} is out of range")
    return value


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
        self.broken: list[str | None] = [None] * world
        self.inbox: list[list[dict]] = [[] for _ in range(world)]
        for rank, fd in enumerate(ups):
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, ("up", rank))
        for fd in downs:
            os.set_blocking(fd, False)
        self.reset()

    # -- per case

    def reset(self, node_of: list[int] | None = None) -> None:
        """Forget the last case's calls: counts, records, and whatever was left waiting.

        ``node_of`` (from the harness, for an exercise with a node map): the node of
        each rank, so that each send is counted as crossing between nodes or not."""
        w = self.world
        if node_of is not None and (len(node_of) != w or not all(isinstance(n, int) for n in node_of)):
            raise ValueError(f"a node map must name the node of each of the {w} ranks")
        self.node_of = node_of
        self.sent, self.received = [0] * w, [0] * w
        self.sent_by: list[dict[str, int]] = [{"intra": 0, "inter": 0} for _ in range(w)]
        self.calls: list[list[dict]] = [[] for _ in range(w)]
        self.ops: list[dict[int, dict]] = [{} for _ in range(w)]  # id -> record, per rank
        self.in_flight = [0] * w
        self.unexpected: list[list[dict]] = [[] for _ in range(w)]  # sends to this rank, unmatched
        self.posted: list[list[dict]] = [[] for _ in range(w)]  # receives this rank posted, unmatched
        self.collective: list[list[dict]] = [[] for _ in range(w)]  # all_reduce/barrier, in call order
        self.waiting: list[dict | None] = [None] * w

    def traffic(self, rank: int) -> dict:
        """What the router saw of ``rank`` in this case: the grade's only source of counts. With a
        node map, also the bytes its sends carried inside its node and to other nodes."""
        seen = {"sent": self.sent[rank], "received": self.received[rank], "calls": self.calls[rank]}
        if self.node_of is not None:
            seen["sent_by_link"] = dict(self.sent_by[rank])
        return seen

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
            except (frames.FrameError, ProtocolError) as exc:
                self.broken[rank] = str(exc)[:300]
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
        if kind in P2P or kind in COLLECTIVE:
            self._call(rank, kind, header, payload)
        elif kind == "wait":
            op = header.get("id")
            self.waiting[rank] = self.ops[rank].get(op) if isinstance(op, int) else None
            if self.waiting[rank] is not None:
                self.waiting[rank].setdefault("t_wait", time.perf_counter())
        elif kind == "unwait":
            self.waiting[rank] = None
        elif kind == "mark":
            self._record(rank, {"op": "step", "step": _int(header, "step", low=0, high=1 << 20)})
        elif isinstance(kind, str) and payload == b"":
            self.inbox[rank].append(header)  # the harness's business: ready, result, crash...
        else:
            raise ProtocolError("a frame of no known kind")

    def _record(self, rank: int, rec: dict) -> dict:
        if len(self.calls[rank]) >= MAX_CALLS:
            raise ProtocolError(f"more than {MAX_CALLS} calls in one case")
        rec.setdefault("t_start", time.perf_counter())
        rec.setdefault("t_end", None)
        self.calls[rank].append(rec)
        return rec

    def _call(self, rank: int, kind: str, header: dict, payload: bytes) -> None:
        if kind not in self.allowed:
            raise ProtocolError(f"dist.{kind} is not available in this exercise")
        op_id = _int(header, "id", low=0)
        if op_id in self.ops[rank]:
            raise ProtocolError(f"call id {op_id} used twice")
        hint_bw = header.get("bw") is True
        if kind in ("send", "isend"):
            peer = _int(header, "dst", low=0, high=self.world - 1)
            if peer == rank:
                raise ProtocolError("a send to itself")
            chunk = header.get("chunk")
            chunk = chunk if isinstance(chunk, int) and not isinstance(chunk, bool) \
                and 0 <= chunk < self.world else None
            rec = self._record(rank, {"op": kind, "peer": peer, "bytes": len(payload), "chunk": chunk,
                                      "tag": _int(header, "tag"), "in_backward": hint_bw})
            self.sent[rank] += len(payload)
            if self.node_of is not None:
                rec["link"] = "intra" if self.node_of[rank] == self.node_of[peer] else "inter"
                self.sent_by[rank][rec["link"]] += len(payload)
            self.in_flight[rank] += len(payload)
            if self.in_flight[rank] > MAX_IN_FLIGHT:
                raise ProtocolError(f"more than {MAX_IN_FLIGHT} bytes sent that no rank received")
            item = {"src": rank, "id": op_id, "payload": payload, "rec": rec}
            self.ops[rank][op_id] = rec
            match = next((r for r in self.posted[peer]
                          if r["src"] in (None, rank) and r["rec"]["tag"] == rec["tag"]), None)
            if match is None:
                self.unexpected[peer].append(item)
            else:
                self.posted[peer].remove(match)
                self._deliver(item, peer, match)
        elif kind in ("recv", "irecv"):
            src = _int(header, "src", low=0, high=self.world - 1, optional=True)
            if src == rank:
                raise ProtocolError("a receive from itself")
            rec = self._record(rank, {"op": kind, "peer": src, "bytes": _int(header, "n", low=0),
                                      "chunk": None, "tag": _int(header, "tag"), "in_backward": hint_bw})
            item = {"src": src, "id": op_id, "rec": rec}
            self.ops[rank][op_id] = rec
            match = next((s for s in self.unexpected[rank]
                          if src in (None, s["src"]) and s["rec"]["tag"] == rec["tag"]), None)
            if match is None:
                self.posted[rank].append(item)
            else:
                self.unexpected[rank].remove(match)
                self._deliver(match, rank, item)
        else:  # all_reduce, broadcast, all_gather, barrier
            dtype, op, src, size = None, None, None, len(payload)
            if kind in ("all_reduce", "all_gather", "broadcast"):
                dtype = header.get("dtype")
                if dtype not in DTYPES:
                    raise ProtocolError(f"a {kind} of an unknown dtype")
            if kind == "all_reduce":
                op = header.get("op")
                if op not in REDUCE_OPS:
                    raise ProtocolError("an all_reduce of an unknown dtype or op")
            elif kind == "broadcast":
                src, size = _int(header, "src", low=0, high=self.world - 1), _int(header, "n", low=0)
                if len(payload) != (size if src == rank else 0):
                    raise ProtocolError("a broadcast's payload must be the source's tensor, and only the source's")
            if dtype is not None and size % DTYPES[dtype]:
                raise ProtocolError(f"a {kind} of {size} bytes is no whole number of {dtype}")
            said = header.get("ts")  # when the rank says it made the call: drawn, never graded
            rec = self._record(rank, {"op": kind, "peer": src, "bytes": size, "chunk": None,
                                      "dtype": dtype, "reduce": op, "in_backward": hint_bw,
                                      "t_rank": said if isinstance(said, float) and math.isfinite(said) else None})
            self.ops[rank][op_id] = rec
            self.sent[rank] += len(payload)
            if kind in ("broadcast", "all_gather"):  # held here until every rank has called
                self.in_flight[rank] += len(payload)
                if self.in_flight[rank] > MAX_IN_FLIGHT:
                    raise ProtocolError(f"more than {MAX_IN_FLIGHT} bytes sent that no rank received")
            self.collective[rank].append({"id": op_id, "payload": payload, "rec": rec})
            self._collectives()

    def _deliver(self, send: dict, dst: int, recv: dict) -> None:
        """A matched pair: the payload to the receiver, both calls complete."""
        now = time.perf_counter()
        src, payload = send["src"], send["payload"]
        self.in_flight[src] -= len(payload)
        send["rec"]["t_end"] = recv["rec"]["t_end"] = now
        recv["rec"]["peer"] = src
        want = recv["rec"]["bytes"]
        if want != len(payload):
            error = f"message size mismatch: rank {src} sent {len(payload)} bytes, the receive expected {want}"
            self.send_to(dst, {"t": "done", "id": recv["id"], "error": error})
            self.send_to(src, {"t": "done", "id": send["id"], "error": error})
            return
        self.received[dst] += len(payload)
        self.send_to(dst, {"t": "done", "id": recv["id"], "src": src}, payload)
        self.send_to(src, {"t": "done", "id": send["id"]})

    def _collectives(self) -> None:
        """Complete every round of all_reduce/barrier for which every rank has called."""
        while all(self.collective):
            round_ = [queue.pop(0) for queue in self.collective]
            recs = [item["rec"] for item in round_]
            now = time.perf_counter()
            for rec in recs:
                rec["t_end"] = now
            first = recs[0]
            for rank, item in enumerate(round_):
                if item["rec"]["op"] in ("broadcast", "all_gather"):
                    self.in_flight[rank] -= len(item["payload"])
            error = _mismatch(recs)
            if error is None and first["op"] == "all_gather" and first["bytes"] * self.world > frames.MAX_PAYLOAD:
                error = f"an all_gather of {first['bytes'] * self.world} bytes in all, more than {frames.MAX_PAYLOAD}"
            if error is not None:
                for rank, item in enumerate(round_):
                    item["rec"]["error"] = error[:300]  # the router's record: the report may name it
                    if error.startswith("ranks disagree on the broadcast's source"):
                        item["rec"]["sources"] = [r["peer"] for r in recs]
                    self.send_to(rank, {"t": "done", "id": item["id"], "error": error[:300]})
                continue
            payloads = [i["payload"] for i in round_]
            if first["op"] == "barrier":
                result = b""
            elif first["op"] == "all_reduce":
                result = _reduce(payloads, first["dtype"], first["reduce"])
            elif first["op"] == "broadcast":
                result = payloads[first["peer"]]
            else:
                result = b"".join(payloads)
            for rank, item in enumerate(round_):
                if first["op"] == "broadcast":  # the source gets no payload back; the others, its tensor
                    got = b"" if rank == first["peer"] else result
                    self.received[rank] += len(got)
                    self.send_to(rank, {"t": "done", "id": item["id"], "src": first["peer"]}, got)
                    continue
                # all_gather: what came from the other ranks (a rank's own tensor never left it)
                self.received[rank] += len(result) - (len(payloads[rank]) if first["op"] == "all_gather" else 0)
                self.send_to(rank, {"t": "done", "id": item["id"]}, result)


def _mismatch(recs: list[dict]) -> str | None:
    """Why one round of collectives cannot complete, or None: every rank must make the same
    call with the same size and dtype (and op, and source): torch.distributed's rule, which
    gloo leaves to hang or to garble and the router says."""
    first = recs[0]
    if any(r["op"] != first["op"] for r in recs):
        return "ranks called different collectives: " + ", ".join(r["op"] for r in recs)
    if first["op"] == "broadcast" and any(r["peer"] != first["peer"] for r in recs):
        return "ranks disagree on the broadcast's source: " + ", ".join(
            f"rank {i}: src {r['peer']}" for i, r in enumerate(recs))
    if any((r["bytes"], r["dtype"], r["reduce"]) != (first["bytes"], first["dtype"], first["reduce"])
           for r in recs):
        return f"{first['op']} mismatch between ranks: " + ", ".join(
            f"rank {i}: {r['bytes']} bytes of {r['dtype']}" + (f" ({r['reduce']})" if r["reduce"] else "")
            for i, r in enumerate(recs))
    return None


def _reduce(payloads: list[bytes], dtype: str, op: str) -> bytes:
    """The reduction of the ranks' buffers, in rank order, as torch computes it."""
    import torch

    kind = getattr(torch, dtype)
    stacked = torch.stack([torch.frombuffer(bytearray(p), dtype=kind) for p in payloads])
    if op in ("sum", "avg"):
        out = stacked.sum(0)
        if op == "avg":
            out = out / len(payloads) if kind.is_floating_point else out // len(payloads)
    elif op == "product":
        out = stacked.prod(0)
    else:
        out = stacked.amax(0) if op == "max" else stacked.amin(0)
    return out.to(kind).contiguous().view(torch.uint8).numpy().tobytes()
