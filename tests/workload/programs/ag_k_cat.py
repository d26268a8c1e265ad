"""Row-parallel input, whole weight: each rank holds x [M, K/W], a slice of the reduction dim; the
slices are gathered into a list and concatenated along dim 1, then multiplied by the whole weight."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(M=96, K=128, N=80), "bench": dict(M=4096, K=8192, N=4096)}


def make_inputs(rank, world, *, M, K, N, dtype=torch.bfloat16, device="cuda"):
    x = torch.randn(M, K // world, dtype=dtype, device=device)
    w = torch.randn(K, N, dtype=dtype, device=device) / K ** 0.5
    return x, w


@torch.no_grad()
def solution(x, w):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x)
    return torch.matmul(torch.cat(parts, dim=1), w)
