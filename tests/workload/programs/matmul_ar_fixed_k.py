"""A matmul whose K each rank holds in full size, whatever the world size (the product's total K grows
with W), summed over the ranks by an all-reduce of a copy: matmul → all-reduce with world-dependent
dims."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(M=64, N=80), "bench": dict(M=4096, N=4096)}
K_RANK = 96  # each rank's K


def make_inputs(rank, world, *, M, N, dtype=torch.bfloat16, device="cuda"):
    x = torch.randn(M, K_RANK, dtype=dtype, device=device)
    w = torch.randn(K_RANK, N, dtype=dtype, device=device) / (K_RANK * world) ** 0.5
    return x, w


@torch.no_grad()
def solution(x, w):
    total = torch.matmul(x, w).clone()
    dist.all_reduce(total)
    return total
