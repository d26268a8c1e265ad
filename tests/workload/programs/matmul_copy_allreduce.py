"""A K-split matmul whose partial product is copied into the buffer that the all-reduce sums in
place (the product itself is kept): matmul → all-reduce through a copy."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(M=64, K=96, N=80), "bench": dict(M=4096, K=8192, N=4096)}


def make_inputs(rank, world, *, M, K, N, dtype=torch.bfloat16, device="cuda"):
    x = torch.randn(M, K // world, dtype=dtype, device=device)
    w = torch.randn(K // world, N, dtype=dtype, device=device) / K ** 0.5
    return x, w


@torch.no_grad()
def solution(x, w):
    partial = torch.matmul(x, w)
    total = partial.clone()
    dist.all_reduce(total)
    return total
