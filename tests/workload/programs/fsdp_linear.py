"""A linear layer under FSDP (ZeRO-3): each rank holds its T/W rows of the tokens x and a shard of the weight,
[N/W, K] in nn.Linear's layout; the shards are gathered into the whole weight before the product."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

SHAPES = {"verify": dict(T=1024, K=64, N=512), "bench": dict(T=16384, K=4096, N=8192)}


def make_inputs(rank, world, *, T, K, N, dtype=torch.bfloat16, device="cuda"):
    x = torch.randn(T // world, K, dtype=dtype, device=device)
    w = torch.randn(N // world, K, dtype=dtype, device=device) / K ** 0.5
    return x, w


@torch.no_grad()
def solution(x, w):
    full = torch.empty(w.shape[0] * dist.get_world_size(), w.shape[1], dtype=w.dtype, device=w.device)
    dist.all_gather_into_tensor(full, w)
    return F.linear(x, full)
