import torch
import torch.distributed as dist


def ring_allreduce(tensor):
    """Sum `tensor` over all ranks, in place, with a ring of point-to-point messages."""
    world = dist.get_world_size()
    rank = dist.get_rank()
    right, left = (rank + 1) % world, (rank - 1) % world
    flat = tensor.view(-1)  # the same memory, flat: what we add into lands in `tensor`
    chunks = torch.tensor_split(flat, world)  # n views whose sizes differ by at most one
    incoming = torch.empty_like(chunks[0])  # chunk 0 is the largest

    def exchange(send, into):
        # isend first: if every rank did a blocking send, no one would be receiving.
        request = dist.isend(send, dst=right)
        dist.recv(into, src=left)
        request.wait()

    # Reduce-scatter: after step s the chunk a rank sends next holds s + 2 ranks' numbers.
    for s in range(world - 1):
        send_c, recv_c = (rank - s) % world, (rank - s - 1) % world
        into = incoming[: chunks[recv_c].numel()]
        exchange(chunks[send_c], into)
        chunks[recv_c].add_(into)

    # Rank r now owns the finished chunk r + 1. All-gather: pass finished chunks on,
    # each received straight into its place.
    for s in range(world - 1):
        send_c, recv_c = (rank + 1 - s) % world, (rank - s) % world
        exchange(chunks[send_c], chunks[recv_c])
    return tensor
