"""The learner's ``torch.distributed``: the real calls, counted and announced.

The guard points ``torch.distributed.send`` (and the other calls a plan
allows) at the methods of one `Api` per rank, so that the learner's plain
``dist.send(t, dst)`` is what it always was, plus three things the grading
needs: the bytes each rank sent and received (the ring's bandwidth check),
a record per call (the learner's own ring animation), and, before a call
can block, a note to the harness parent saying what this rank now waits for
(what a deadlock report shows). See ``drivers/__init__.py`` for the record
format.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

# The calls an Api can stand in for; a plan allows a subset.
WRAPPED = ("send", "recv", "isend", "irecv", "all_reduce", "barrier", "get_rank", "get_world_size")


def _nbytes(tensor) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


class _Work:
    """A Work from isend/irecv/all_reduce(async_op=True) whose ``wait`` is announced and timed."""

    def __init__(self, api: Api, work, record: dict):
        self._api, self._work, self._record = api, work, record

    def wait(self, *args, **kwargs):
        self._api._announce(self._record)
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            self._record["t_end"] = time.perf_counter()
            self._api._done()

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def __getattr__(self, name):  # anything else a Work has (exception, source_rank, ...)
        return getattr(self._work, name)


class Api:
    """Counting wrappers around the real point-to-point calls (and all_reduce) of one rank.

    ``notify`` sends a dict to the harness parent; it is how "waiting in
    recv from rank 1" reaches the deadlock report. ``locate(tensor)`` (set
    per case by the driver) names the chunk a sent tensor is, for the trace.
    """

    def __init__(self, notify):
        self._notify = notify
        # The real functions, taken before the guard replaces the module's names.
        self._real = {name: getattr(dist, name) for name in WRAPPED}
        self.reset()

    def reset(self, locate=None) -> None:
        self.calls: list[dict] = []
        self.sent = 0
        self.received = 0
        self.locate = locate

    @staticmethod
    def in_backward() -> bool:
        """True while autograd's engine runs a backward (so: inside a gradient hook)."""
        return torch._C._current_autograd_node() is not None

    # -- bookkeeping

    def _record(self, op: str, tensor, peer, *, sent: bool, received: bool) -> dict:
        n = _nbytes(tensor)
        chunk = None
        if sent and self.locate is not None:
            chunk = self.locate(tensor)
        rec = {"op": op, "peer": None if peer is None else int(peer), "bytes": n,
               "numel": int(tensor.numel()), "dtype": str(tensor.dtype).removeprefix("torch."),
               "chunk": chunk, "in_backward": self.in_backward(),
               "t_start": time.perf_counter(), "t_end": None}
        if sent:
            self.sent += n
        if received:
            self.received += n
        self.calls.append(rec)
        return rec

    def _announce(self, rec: dict) -> None:
        self._notify({"type": "wait", "op": rec["op"], "peer": rec["peer"], "bytes": rec["bytes"]})

    def _done(self) -> None:
        self._notify({"type": "unwait"})

    def _blocking(self, rec: dict, call, *args, **kwargs):
        self._announce(rec)
        try:
            return call(*args, **kwargs)
        finally:
            rec["t_end"] = time.perf_counter()
            self._done()

    # -- the calls, with torch.distributed's own signatures

    def send(self, tensor, dst=None, group=None, tag=0, group_dst=None):
        # Through the real isend + wait, not the real send: torch's send and
        # recv call the module's isend/irecv, which now are ours and would
        # count the bytes twice.
        rec = self._record("send", tensor, dst if dst is not None else group_dst, sent=True, received=False)
        work = self._real["isend"](tensor, dst, group, tag, group_dst=group_dst)
        self._blocking(rec, work.wait)

    def recv(self, tensor, src=None, group=None, tag=0, group_src=None):
        rec = self._record("recv", tensor, src if src is not None else group_src, sent=False, received=True)
        work = self._real["irecv"](tensor, src, group, tag, group_src=group_src)
        self._blocking(rec, work.wait)
        if src is not None:
            return src
        return group_src if group_src is not None else work._source_rank()

    def isend(self, tensor, dst=None, group=None, tag=0, group_dst=None):
        rec = self._record("isend", tensor, dst if dst is not None else group_dst, sent=True, received=False)
        work = self._real["isend"](tensor, dst, group, tag, group_dst=group_dst)
        return _Work(self, work, rec)

    def irecv(self, tensor, src=None, group=None, tag=0, group_src=None):
        rec = self._record("irecv", tensor, src if src is not None else group_src, sent=False, received=True)
        work = self._real["irecv"](tensor, src, group, tag, group_src=group_src)
        return _Work(self, work, rec)

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        # A ring all-reduce moves 2(n-1)/n of the tensor each way; here we
        # count the tensor once each way, which is what a learner's
        # bandwidth reasoning needs: how much each call asked to reduce.
        rec = self._record("all_reduce", tensor, None, sent=True, received=True)
        if async_op:
            work = self._real["all_reduce"](tensor, op=op, group=group, async_op=True)
            return _Work(self, work, rec)
        return self._blocking(rec, self._real["all_reduce"], tensor, op=op, group=group)

    def barrier(self, group=None, **_options):  # async_op, device_ids: a barrier here always blocks
        rec = {"op": "barrier", "peer": None, "bytes": 0, "numel": 0, "dtype": None, "chunk": None,
               "in_backward": self.in_backward(), "t_start": time.perf_counter(), "t_end": None}
        self.calls.append(rec)
        return self._blocking(rec, self._real["barrier"], group=group)

    def get_rank(self, group=None):
        return self._real["get_rank"](group)

    def get_world_size(self, group=None):
        return self._real["get_world_size"](group)
