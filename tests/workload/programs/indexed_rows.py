"""Rows of a table picked by integer indices (an int64 input, as labels and token ids are), masked by
a bool input, then summed over the ranks."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(V=32, D=16, T=8), "bench": dict(V=32000, D=4096, T=4096)}


def make_inputs(rank, world, *, V, D, T, dtype=torch.bfloat16, device="cuda"):
    table = torch.randn(V, D, dtype=dtype, device=device)
    idx = torch.randint(0, V, (T,), device=device)
    keep = torch.rand(T, device=device) < 0.7
    return table, idx, keep


@torch.no_grad()
def solution(table, idx, keep):
    rows = torch.where(~keep[:, None], 0.0, table[idx])  # ~ of a bool, not of a byte
    dist.all_reduce(rows)
    return rows
