"""The all-reduce written by hand from point-to-point calls (notebook 17): a ring's reduce-scatter, then its all-gather.

Rank r sends only to rank r + 1 and receives only from rank r - 1 (modulo the world size). The tensor, flattened, is cut
into world-size chunks by `chunks` (the first ones one element longer when the size does not divide); after the
reduce-scatter rank r holds chunk r summed over every rank, and the all-gather gives every rank every chunk.
"""

import torch
import torch.distributed as dist


def chunks(flat: torch.Tensor, n: int) -> list[torch.Tensor]:
    """`flat` (1-D) cut into `n` consecutive views, as torch.tensor_split cuts it: sizes differ by one at most."""
    return list(torch.tensor_split(flat, n))


def ring_reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    """Chunk `rank` of `tensor` (flattened, cut by `chunks`) summed over every rank, as a new 1-D tensor; `tensor`
    itself is left unchanged. Point-to-point calls only (dist.isend / dist.irecv, or dist.batch_isend_irecv): in
    each of the world size - 1 steps, rank r sends one chunk to r + 1 and receives one from r - 1, which it adds to
    its own copy of that chunk. Any length: the grader passes 12, 10 and 1 elements, unpadded, so chunks may differ by
    one element and may be empty (1 element on 4 ranks). At world size 1: a copy of the whole tensor, flattened.
    Without a process group, torch's own error (dist.get_rank raises)."""
    ### BEGIN SOLUTION
    rank, n = dist.get_rank(), dist.get_world_size()
    parts = [part.clone() for part in chunks(tensor.detach().reshape(-1), n)]
    for step in range(n - 1):
        send, receive = (rank - step - 1) % n, (rank - step - 2) % n  # after n - 1 steps: chunk `rank` complete
        incoming = torch.empty_like(parts[receive])
        # posted together: two blocking sends, one on each rank, would each wait for the other's receive
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, parts[send], (rank + 1) % n),
                                            dist.P2POp(dist.irecv, incoming, (rank - 1) % n)]):
            work.wait()
        parts[receive] += incoming
    return parts[rank]
    ### END SOLUTION


def ring_all_gather(chunk: torch.Tensor) -> torch.Tensor:
    """Every rank's `chunk`, rank 0's first, in one new 1-D tensor on every rank. Every rank's chunk has the same
    number of elements (ring_all_reduce pads the tensor so that it does). Point-to-point calls only: in each of the
    world size - 1 steps, rank r sends to r + 1 the chunk it last received (its own first) and receives one from
    r - 1. At world size 1: a copy of `chunk`."""
    ### BEGIN SOLUTION
    rank, n = dist.get_rank(), dist.get_world_size()
    parts = [torch.empty_like(chunk.reshape(-1)) for _ in range(n)]
    parts[rank].copy_(chunk.reshape(-1))
    for step in range(n - 1):
        send, receive = (rank - step) % n, (rank - step - 1) % n
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, parts[send], (rank + 1) % n),
                                            dist.P2POp(dist.irecv, parts[receive], (rank - 1) % n)]):
            work.wait()
    return torch.cat(parts)
    ### END SOLUTION


def ring_all_reduce(tensor: torch.Tensor) -> None:
    """`tensor` summed over every rank, in place, as dist.all_reduce(tensor) does by default; returns None. Any
    shape and size: pad the flattened tensor to a multiple of the world size, ring_reduce_scatter, then
    ring_all_gather, and copy the sum (without the padding) back into `tensor`. Point-to-point calls only, through
    the two halves: the grader makes every built-in collective raise, dist.barrier included."""
    ### BEGIN SOLUTION
    n = dist.get_world_size()
    flat = tensor.detach().reshape(-1)
    padded = torch.cat([flat, flat.new_zeros(-flat.numel() % n)])
    summed = ring_all_gather(ring_reduce_scatter(padded))
    tensor.detach().copy_(summed[:flat.numel()].view_as(tensor))
    ### END SOLUTION
