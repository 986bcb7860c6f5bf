import torch
import torch.distributed as dist


def exchange(send, into, right, left):
    """Send to `right` and receive from `left` at once; a ring of blocking sends would deadlock."""
    request = dist.isend(send, dst=right)
    dist.recv(into, src=left)
    request.wait()


def reduce_scatter(chunks, ring):
    """Ring reduce-scatter over the ranks `ring`; returns the index of the chunk this rank now owns."""
    n, p = len(ring), ring.index(dist.get_rank())
    right, left = ring[(p + 1) % n], ring[(p - 1) % n]
    incoming = torch.empty_like(chunks[0])  # the first chunk is the largest
    for s in range(n - 1):
        send_c, recv_c = (p - s) % n, (p - s - 1) % n
        into = incoming[: chunks[recv_c].numel()]
        exchange(chunks[send_c], into, right, left)
        chunks[recv_c].add_(into)
    return (p + 1) % n


def all_gather(chunks, ring):
    """Ring all-gather over `ring`: the rank at position p owns chunk p + 1 and passes it on."""
    n, p = len(ring), ring.index(dist.get_rank())
    right, left = ring[(p + 1) % n], ring[(p - 1) % n]
    for s in range(n - 1):
        exchange(chunks[(p + 1 - s) % n], chunks[(p - s) % n], right, left)


def hierarchical_allreduce(tensor, nodes):
    """Sum `tensor` over all ranks, in place: inside the node, across the nodes, inside again."""
    rank = dist.get_rank()
    mine = next(ranks for ranks in nodes if rank in ranks)
    rail = [ranks[mine.index(rank)] for ranks in nodes]  # the ranks at this rank's position
    chunks = list(torch.tensor_split(tensor.view(-1), len(mine)))
    owned = reduce_scatter(chunks, mine)  # 1. this rank now holds its node's sum of one chunk
    if len(rail) > 1:  # 2. only that chunk crosses, on this rank's rail
        pieces = list(torch.tensor_split(chunks[owned], len(rail)))
        reduce_scatter(pieces, rail)
        all_gather(pieces, rail)
    all_gather(chunks, mine)  # 3. every rank gets every chunk
    return tensor
