"""A program that needs a dim beside its tensors: the gathered rows cut into H heads by reshape, a
softmax over each head's features. solution takes H as a keyword-only argument, which the tool gives
the shape's value at every call."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(M=64, H=4, D=8), "bench": dict(M=4096, H=32, D=128)}


def make_inputs(rank, world, *, M, H, D, dtype=torch.bfloat16, device="cuda"):
    return torch.randn(M // world, H * D, dtype=dtype, device=device)


@torch.no_grad()
def solution(x, *, H):
    full = torch.empty(x.shape[0] * dist.get_world_size(), x.shape[1], dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(full, x)
    return full.view(full.shape[0], H, -1).softmax(-1).reshape(full.shape)
