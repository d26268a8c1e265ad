"""Row-parallel linear of a sequence-parallel MLP: every rank multiplies its K/W columns of x by its
K/W rows of the weight, the partial sums are reduce-scattered over the rows, then the residual is added."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(M=256, K=256, N=128), "bench": dict(M=8192, K=8192, N=4096)}


def make_inputs(rank, world, *, M, K, N, dtype=torch.bfloat16, device="cuda"):
    x = torch.randn(M, K // world, dtype=dtype, device=device)
    w = torch.randn(K // world, N, dtype=dtype, device=device) / K ** 0.5
    residual = torch.randn(M // world, N, dtype=dtype, device=device)
    return x, w, residual


@torch.no_grad()
def solution(x, w, residual):
    partial = x @ w
    out = torch.empty(partial.shape[0] // dist.get_world_size(), partial.shape[1], dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, partial)
    return out + residual
