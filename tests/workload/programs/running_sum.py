"""A row sum taken one column at a time after an all-reduce: in bf16 every step rounds the running
total, so the program's own answer drifts from float64 by a few percent of its rms (the import
must leave a candidate that rounds otherwise room for that)."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(M=16, H=512), "bench": dict(M=2048, H=512)}


def make_inputs(rank, world, *, M, H, dtype=torch.bfloat16, device="cuda"):
    return (torch.rand(M, H, dtype=dtype, device=device),)


@torch.no_grad()
def solution(x):
    y = x.clone()
    dist.all_reduce(y)
    total = torch.zeros_like(y[:, 0])
    for column in y.unbind(dim=1):
        total = total + column
    return total
