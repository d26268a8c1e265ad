"""One step of a ring: each rank sends its block to the next rank and receives the previous rank's
with batched point-to-point ops (ring attention's exchange), then adds it to its own block."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(S=16, D=24), "bench": dict(S=8192, D=1024)}


def make_inputs(rank, world, *, S, D, dtype=torch.bfloat16, device="cuda"):
    return (torch.randn(S, D, dtype=dtype, device=device),)


@torch.no_grad()
def solution(x):
    rank, world = dist.get_rank(), dist.get_world_size()
    got = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, (rank + 1) % world), dist.P2POp(dist.irecv, got, (rank - 1) % world)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return x + got
