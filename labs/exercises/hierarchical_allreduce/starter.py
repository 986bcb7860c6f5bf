import torch
import torch.distributed as dist


def hierarchical_allreduce(tensor, nodes):
    """Sum `tensor` over all ranks, in place, in three phases that follow the node map.

    nodes: the ranks of each node, e.g. [[0, 1], [2, 3]] or [[0, 2], [1, 3]].
    """
    rank = dist.get_rank()
    mine = next(ranks for ranks in nodes if rank in ranks)  # the ranks of this rank's node
    j = mine.index(rank)  # this rank's position in its node
    rail = [ranks[j] for ranks in nodes]  # one rank per node, each at position j
    chunks = torch.tensor_split(tensor.view(-1), len(mine))  # views: writing a chunk writes the tensor
    # TODO 1. Reduce-scatter inside the node: a ring over `mine`, len(mine) - 1 steps; afterwards
    #         this rank holds its node's sum of one chunk.
    # TODO 2. All-reduce that chunk across the nodes: a ring over `rail` (reduce-scatter, then all-gather).
    # TODO 3. All-gather inside the node: a ring over `mine`, so every rank has every chunk.
    raise NotImplementedError(f"rank {rank}: node {mine}, rail {rail}, {len(chunks)} chunks")
