"""The learner's ``torch.distributed``: each call a frame to the router, nothing else.

A rank holds no process group: the guard points ``torch.distributed.send``
(and the other calls a plan allows) at the methods of one `Api` per rank,
and each method writes a frame (``frames.py``) on the rank's pipe to the
harness, whose router (``router.py``) matches, forwards, reduces and
counts, and answers when the call completes. The signatures are
``torch.distributed``'s, so the learner's plain ``dist.send(t, dst)`` reads
as it always did; sends and receives behave as on gloo (a send completes
when its receive is posted), so a ring of blocking sends deadlocks here as
it would there.

Nothing here counts anything the grade uses: the router does, outside this
process. What this side adds to a frame (the chunk a sent tensor is, for
the animation; whether the call was made inside backward) is a hint the
report may show. A tensor that is not a plain CPU tensor (``device="meta"``,
a sparse one) is refused here for a clear message, and the frame that says
so ends the case at the router; the router's own bounds on sizes are what
hold whatever a rank writes.

The router never answers with an error: whatever breaks the protocol ends
the case instead (``router.py``), so a call either completes or never does.
"""

from __future__ import annotations

import os
import time
import warnings

import frames
import torch
import torch.distributed as dist

# The calls an Api can stand in for; a plan allows a subset.
WRAPPED = ("send", "recv", "isend", "irecv", "all_reduce", "broadcast", "all_gather", "barrier", "get_rank",
           "get_world_size")


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's elements as raw bytes (contiguous, in its own dtype)."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def from_bytes(data: bytes, like: torch.Tensor) -> torch.Tensor:
    """Raw bytes as a tensor of ``like``'s dtype and shape."""
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return flat.view(like.dtype).reshape(like.shape)


class Channel:
    """This rank's two pipes to the router: frames out, completions in."""

    def __init__(self, up: int, down: int):
        self.up, self.down = up, down
        self.reader = frames.Reader()
        self.done: dict[int, tuple[dict, bytes]] = {}  # completions not yet waited for
        self.commands: list[tuple[dict, bytes]] = []  # frames from the harness (load, go, stop)

    def send(self, header: dict, payload: bytes = b"") -> None:
        view = memoryview(frames.encode(header, payload))
        while view:
            view = view[os.write(self.up, view):]

    def _read(self, block: bool) -> bool:
        """Read what the router sent; False at end of file or when nothing was there (non-blocking)."""
        os.set_blocking(self.down, block)
        try:
            data = os.read(self.down, 1 << 20)
        except BlockingIOError:
            return False
        finally:
            os.set_blocking(self.down, True)
        if not data:
            raise EOFError("the harness closed this rank's pipe")
        for header, payload in self.reader.feed(data):
            if header.get("t") == "done" and isinstance(header.get("id"), int):
                self.done[header["id"]] = (header, payload)
            else:
                self.commands.append((header, payload))
        return True

    def completion(self, op_id: int, *, block: bool = True) -> tuple[dict, bytes] | None:
        while op_id not in self.done:
            if not self._read(block) and not block:
                return None
        return self.done.pop(op_id)

    def command(self) -> tuple[dict, bytes]:
        while not self.commands:
            self._read(True)
        return self.commands.pop(0)


MAX_DEPTH = 64  # stack levels `Api.learner_line` looks through for the learner's file


class Work:
    """What isend/irecv/all_reduce(async_op=True) return: ``wait`` blocks until the router answers.

    ``said``: the call's own frame told the router already that this rank waits for it
    (a blocking call, `Api._frame`), so `wait` sends no wait frame of its own."""

    def __init__(self, api: Api, op_id: int, into: torch.Tensor | list | None, *, said: bool = False):
        self._api, self._id, self._into, self._said = api, op_id, into, said
        self._result: tuple[dict, bytes] | None = None
        self.source = None

    def _finish(self, done: tuple[dict, bytes]) -> None:
        header, payload = done
        self._result = done
        self.source = header.get("src")
        if isinstance(self._into, list):  # all_gather: the ranks' tensors, one after another
            offset = 0
            with torch.no_grad():
                for out in self._into:
                    n = out.numel() * out.element_size()
                    out.copy_(from_bytes(payload[offset:offset + n], out))
                    offset += n
        elif self._into is not None and payload:
            with torch.no_grad():
                self._into.copy_(from_bytes(payload, self._into))

    def wait(self, timeout=None) -> bool:  # noqa: ARG002 - torch's signature; the harness times cases
        if self._result is None:
            channel = self._api.channel
            if not self._said:
                channel.send({"t": "wait", "id": self._id, "line": self._api.learner_line()})
            self._finish(channel.completion(self._id))
        return True

    def is_completed(self) -> bool:
        if self._result is None:
            done = self._api.channel.completion(self._id, block=False)
            if done is None:
                return False
            self._finish(done)
        return True

    def _source_rank(self) -> int | None:
        return self.source


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _op_name(op) -> str:
    for candidate, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg"), (dist.ReduceOp.MAX, "max"),
                            (dist.ReduceOp.MIN, "min"), (dist.ReduceOp.PRODUCT, "product")):
        if op == candidate:
            return name
    raise ValueError(f"reduce op {op!r} is not supported in this exercise")


class Api:
    """This rank's stand-ins for the calls a plan allows; see the module docstring.

    ``locate(tensor)`` (set per case by the driver) names the chunk a sent
    tensor is, for the animation.
    """

    def __init__(self, channel: Channel, rank: int, world: int, source: str | None = None):
        self.channel, self.rank, self.world = channel, rank, world
        self._next = 0
        self.locate = None
        self.source = source  # the learner's file (its path as the harness loaded it)

    def reset(self, locate=None) -> None:
        self.locate = locate

    @staticmethod
    def in_backward() -> bool:
        """True while autograd's engine runs a backward (so: inside a gradient hook)."""
        return torch._C._current_autograd_node() is not None

    def learner_line(self) -> int | None:
        """The line of the learner's file innermost on this rank's stack: where the call that is
        about to block was made (a deadlock report names it). Only shown, never graded: the
        learner's code runs in this process and could put anything on its stack.

        No frame object is touched: the guard refuses frames while the learner's code is on
        the stack, and rightly. ``warnings.warn`` names the file and line ``stacklevel``
        frames up from C, with no audit event; each level is asked in turn (a warning
        recorded, never shown) until one is in the learner's file or the stack ends."""
        if self.source is None:
            return None
        for level in range(2, MAX_DEPTH):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                warnings.warn("where", stacklevel=level)
            if not caught or caught[0].filename == "sys":  # past the outermost frame
                return None
            if caught[0].filename == self.source:
                return caught[0].lineno
        return None

    def mark(self, step: int) -> None:
        """Tell the router a training step begins (how the report groups calls into steps)."""
        self.channel.send({"t": "mark", "step": int(step)})

    # -- plumbing

    def _id(self) -> int:
        self._next += 1
        return self._next

    def _frame(self, header: dict, blocking: bool) -> dict:
        """A call's frame; for a call that blocks until it completes, with its wait frame folded
        in (``wait``, and the learner's line for a deadlock report): one frame per call, so one
        wake-up of the router, where a wait frame of its own (and an end-of-wait one) cost two more."""
        return dict(header, wait=True, line=self.learner_line()) if blocking else header

    def _peer(self, peer, group_peer, what: str) -> int:
        peer = group_peer if peer is None else peer
        if not isinstance(peer, int) or isinstance(peer, bool) or not 0 <= peer < self.world:
            raise ValueError(f"{what} must be a rank between 0 and {self.world - 1}, not {peer!r}")
        if peer == self.rank:
            raise ValueError(f"{what} {peer} is this rank itself")
        return peer

    def _tensor(self, tensor, op: str) -> torch.Tensor:
        """``tensor`` if it is a plain (strided) CPU tensor. Any other (a meta tensor holds no
        data, yet says it has a size) is refused: the frame that names its device ends the
        case at the router, and the learner's code gets the same reason as an exception."""
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
        if tensor.device.type != "cpu" or tensor.layout != torch.strided:
            where = tensor.device.type if tensor.device.type != "cpu" else str(tensor.layout).removeprefix("torch.")
            self.channel.send({"t": op, "id": self._id(), "device": where})
            raise RuntimeError(f"dist.{op} takes CPU tensors only here, not a {where} tensor")
        return tensor

    def _post_send(self, op: str, tensor, dst, tag) -> Work:
        tensor = self._tensor(tensor, op)
        op_id = self._id()
        chunk = self.locate(tensor) if self.locate is not None else None
        self.channel.send(self._frame({"t": op, "id": op_id, "dst": dst, "tag": int(tag), "chunk": chunk,
                                       "bw": self.in_backward()}, op == "send"), tensor_bytes(tensor))
        return Work(self, op_id, None, said=op == "send")

    def _post_recv(self, op: str, tensor, src, tag) -> Work:
        tensor = self._tensor(tensor, op)
        op_id = self._id()
        self.channel.send(self._frame({"t": op, "id": op_id, "src": src, "tag": int(tag),
                                       "n": tensor.numel() * tensor.element_size(), "bw": self.in_backward()},
                                      op == "recv"))
        return Work(self, op_id, tensor, said=op == "recv")

    # -- the calls, with torch.distributed's own signatures

    def send(self, tensor, dst=None, group=None, tag=0, group_dst=None):  # noqa: ARG002 - group: one world
        self._post_send("send", tensor, self._peer(dst, group_dst, "dst"), tag).wait()

    def recv(self, tensor, src=None, group=None, tag=0, group_src=None):  # noqa: ARG002
        peer = None if src is None and group_src is None else self._peer(src, group_src, "src")
        work = self._post_recv("recv", tensor, peer, tag)
        work.wait()
        return work.source

    def isend(self, tensor, dst=None, group=None, tag=0, group_dst=None):  # noqa: ARG002
        return self._post_send("isend", tensor, self._peer(dst, group_dst, "dst"), tag)

    def irecv(self, tensor, src=None, group=None, tag=0, group_src=None):  # noqa: ARG002
        peer = None if src is None and group_src is None else self._peer(src, group_src, "src")
        return self._post_recv("irecv", tensor, peer, tag)

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):  # noqa: ARG002
        tensor = self._tensor(tensor, "all_reduce")
        op_id = self._id()
        self.channel.send(self._frame({"t": "all_reduce", "id": op_id, "dtype": _dtype(tensor),
                                       "op": _op_name(op), "bw": self.in_backward(),
                                       "ts": time.perf_counter()}, not async_op),  # ts: the report's timeline
                          tensor_bytes(tensor))
        work = Work(self, op_id, tensor, said=not async_op)
        if async_op:
            return work
        work.wait()
        return None

    def broadcast(self, tensor, src=None, group=None, async_op=False, group_src=None):  # noqa: ARG002
        """Rank ``src``'s tensor into ``tensor`` on every rank: ``src`` sends its bytes, the others
        say how many they expect; the router checks that every rank names the same ``src``."""
        tensor = self._tensor(tensor, "broadcast")
        peer = group_src if src is None else src
        if not isinstance(peer, int) or isinstance(peer, bool) or not 0 <= peer < self.world:
            raise ValueError(f"src must be a rank between 0 and {self.world - 1}, not {peer!r}")
        op_id = self._id()
        mine = peer == self.rank
        self.channel.send(self._frame({"t": "broadcast", "id": op_id, "src": peer, "dtype": _dtype(tensor),
                                       "n": tensor.numel() * tensor.element_size(), "bw": self.in_backward()},
                                      not async_op), tensor_bytes(tensor) if mine else b"")
        work = Work(self, op_id, None if mine else tensor, said=not async_op)
        if async_op:
            return work
        work.wait()
        return None

    def all_gather(self, tensor_list, tensor, group=None, async_op=False):  # noqa: ARG002
        """Every rank's ``tensor`` into ``tensor_list[r]``, on every rank (all the same size)."""
        tensor = self._tensor(tensor, "all_gather")
        if not isinstance(tensor_list, list | tuple) or len(tensor_list) != self.world:
            raise ValueError(f"tensor_list must be a list of {self.world} tensors, one per rank")
        outs = [self._tensor(t, "all_gather") for t in tensor_list]
        size = tensor.numel() * tensor.element_size()
        if any(t.numel() * t.element_size() != size or t.dtype != tensor.dtype for t in outs):
            raise ValueError("every tensor in tensor_list must have the size and dtype of tensor")
        op_id = self._id()
        self.channel.send(self._frame({"t": "all_gather", "id": op_id, "dtype": _dtype(tensor),
                                       "bw": self.in_backward()}, not async_op), tensor_bytes(tensor))
        work = Work(self, op_id, outs, said=not async_op)
        if async_op:
            return work
        work.wait()
        return None

    def barrier(self, group=None, async_op=False, device_ids=None):  # noqa: ARG002
        op_id = self._id()
        self.channel.send(self._frame({"t": "barrier", "id": op_id, "bw": self.in_backward()}, not async_op))
        work = Work(self, op_id, None, said=not async_op)
        if async_op:
            return work
        work.wait()
        return None

    # -- the save-and-resume driver's calls (not torch.distributed's: no learner code needs them)

    def _store(self, header: dict, payload: bytes = b"") -> bytes:
        op_id = self._id()  # the driver's call, not the learner's: no line to look for
        self.channel.send({**header, "id": op_id, "wait": True}, payload)
        work = Work(self, op_id, None, said=True)
        work.wait()
        return work._result[1]

    def checkpoint_put(self, data: bytes) -> None:
        """Keep ``data`` as this rank's checkpoint (in the harness, which gives it back to this
        rank's successor after a restart: `checkpoint_get`)."""
        self._store({"t": "checkpoint_put"}, data)

    def checkpoint_get(self) -> bytes:
        """This rank's last checkpoint in the case (b"" when there is none)."""
        return self._store({"t": "checkpoint_get"})

    def fetch(self, indices: list[int]) -> bytes:
        """The rows of the case's data set at ``indices``, as the harness feeds them: every
        row's inputs, then every row's labels (the driver knows their sizes)."""
        return self._store({"t": "fetch", "idx": [int(i) for i in indices]})

    def get_rank(self, group=None):  # noqa: ARG002
        return self.rank

    def get_world_size(self, group=None):  # noqa: ARG002
        return self.world
