import torch.distributed as dist


def broadcast(tensor, src):
    """Make `tensor` on every rank equal to `tensor` on rank `src`, in place, with point-to-point calls.

    A binomial tree: number the ranks from src (v = rank - src mod n). In
    round k every rank that already has the data (v < 2**k) sends it to
    v + 2**k. After ceil(log2 n) rounds everyone has it; each rank receives
    the tensor exactly once.
    """
    world = dist.get_world_size()
    rank = dist.get_rank()
    v = (rank - src) % world
    step = 1
    while step < world:
        if v < step and v + step < world:
            dist.send(tensor, dst=(v + step + src) % world)
        elif step <= v < 2 * step:
            dist.recv(tensor, src=(v - step + src) % world)
        step *= 2
    return tensor
