"""A row-parallel matmul whose partial sums are all-reduced, then SiLU and a residual: the order of
the epilogue's steps matters (silu(y) + r is not silu(y + r))."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

SHAPES = {"verify": dict(M=256, K=256, N=128), "bench": dict(M=4096, K=8192, N=4096)}


def make_inputs(rank, world, *, M, K, N, dtype=torch.bfloat16, device="cuda"):
    x = torch.randn(M, K // world, dtype=dtype, device=device)
    w = torch.randn(K // world, N, dtype=dtype, device=device) / K ** 0.5
    residual = torch.randn(M, N, dtype=dtype, device=device)
    return x, w, residual


@torch.no_grad()
def solution(x, w, residual):
    y = x @ w
    dist.all_reduce(y)
    return F.silu(y) + residual
