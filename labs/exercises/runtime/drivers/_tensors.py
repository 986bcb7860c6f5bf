"""What the tensor drivers (ring all-reduce, broadcast) share: inputs from a seed, outputs as JSON."""

from __future__ import annotations

import math

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64,
          "bfloat16": torch.bfloat16}


def make_input(case: dict, rank: int) -> torch.Tensor:
    """This rank's input for ``case``, the same on every run: from (seed, rank)."""
    gen = torch.Generator().manual_seed(int(case["seed"]) * 1000 + rank)
    shape = tuple(case["shape"])
    dtype = DTYPES[case["dtype"]]
    if dtype.is_floating_point:
        data = torch.randn(shape, generator=gen, dtype=torch.float64)
    else:
        data = torch.randint(-1000, 1000, shape, generator=gen)
    return data.to(dtype)


def bounds(case: dict, world: int) -> dict:
    """What a case of a tensor exercise can need (``router.Bounds``): messages of at most the
    whole tensor, tags below 2n (one per step of a ring, per round or per rank), and a
    message of zero bytes only where the tensor, cut into n chunks of ceil(m/n) elements
    (or fewer than n), leaves a chunk empty."""
    numel = math.prod(case["shape"])
    per = -(-numel // world)
    return {"message_bytes": numel * torch.empty(0, dtype=DTYPES[case["dtype"]]).element_size(),
            "tags": 2 * world, "empty_messages": (world - 1) * per >= numel}


def as_list(tensor: torch.Tensor) -> list:
    """The values, flat, as JSON numbers (bfloat16 through float64, which holds it exactly)."""
    t = tensor.detach().reshape(-1)
    if t.dtype == torch.bfloat16:
        t = t.double()
    return t.tolist()


def _partitions(flat: torch.Tensor, world: int) -> list[list[torch.Tensor]]:
    """The ways learners split a buffer into ``world`` chunks: ``torch.tensor_split``
    (sizes differ by at most one, the larger first), ``torch.chunk`` (ceil-sized,
    the last one short) and floor-sized chunks with the remainder in the last."""
    n = flat.numel()
    floor = n // world
    bounds = [i * floor for i in range(world)] + [n]
    return [list(torch.tensor_split(flat, world)), list(torch.chunk(flat, world)),
            [flat[bounds[i]:bounds[i + 1]] for i in range(world)]]


def locate(tensor: torch.Tensor, buffer: torch.Tensor, world: int) -> int | None:
    """Which chunk of ``buffer`` ``tensor`` is, if any, for the ring animation.

    First by memory: a view of the buffer that is chunk i of one of the usual
    splits (:func:`_partitions`) is chunk i. Then by value: a copy of a
    ``tensor_split`` chunk's current contents. None for anything else, e.g.
    the whole buffer, which the animation draws as a whole-buffer send.
    """
    flat = buffer.reshape(-1)
    if tensor.numel() == flat.numel() and world > 1:
        return None
    try:
        ptr = tensor.data_ptr()
    except RuntimeError:
        return None
    partitions = _partitions(flat, world)
    for chunks in partitions:
        for i, chunk in enumerate(chunks):
            if chunk.numel() == tensor.numel() and chunk.numel() and chunk.data_ptr() == ptr:
                return i
    for i, chunk in enumerate(partitions[0]):
        if chunk.numel() == tensor.numel() and chunk.dtype == tensor.dtype \
                and torch.equal(chunk, tensor.reshape(-1)):
            return i
    return None


def snapshot(tensor: torch.Tensor) -> dict:
    """What the in-place check needs to know about a tensor: where it lives, its shape and dtype."""
    return {"ptr": tensor.untyped_storage().data_ptr(), "shape": list(tensor.shape),
            "dtype": str(tensor.dtype).removeprefix("torch.")}


def outcome(before: dict, tensor: torch.Tensor, returned) -> dict:
    """The driver's result for a tensor the learner should have changed in place."""
    after = snapshot(tensor)
    result = {"values": as_list(tensor), "shape": after["shape"], "dtype": after["dtype"],
              "same_storage": after["ptr"] == before["ptr"], "returned": None}
    if isinstance(returned, torch.Tensor) and returned is not tensor:
        result["returned"] = {"values": as_list(returned), "shape": list(returned.shape),
                              "dtype": str(returned.dtype).removeprefix("torch.")}
    return result


def run_in_place(case: dict, world: int, submission, state: dict, default: str, *args) -> dict:
    """Call the learner's in-place collective on a fresh copy of this rank's input
    (``default`` unless the case names another function), remembering the buffer
    for :func:`locate`, and return what the checks need."""
    tensor = state["input"].clone()
    state["buffer"], state["world"] = tensor, world  # what locate() compares a sent tensor with
    before = snapshot(tensor)
    returned = getattr(submission, case.get("function", default))(tensor, *args)
    return outcome(before, tensor, returned)
