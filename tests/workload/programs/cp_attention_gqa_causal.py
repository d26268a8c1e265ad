"""Causal context-parallel attention as training code often writes it: tensors [B, S/W, heads, D]
(flash-attn's layout), grouped-query heads repeated for the product, K and V gathered into one
stacked tensor, and the causal mask built from the rank's offset in the sequence."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

SHAPES = {"verify": dict(B=2, S=512, NH=4, NKV=2, D=64),
          "bench": dict(B=1, S=16384, NH=32, NKV=8, D=128)}


def make_inputs(rank, world, *, B, S, NH, NKV, D, dtype=torch.bfloat16, device="cuda"):
    q = torch.randn(B, S // world, NH, D, dtype=dtype, device=device)
    k = torch.randn(B, S // world, NKV, D, dtype=dtype, device=device)
    v = torch.randn(B, S // world, NKV, D, dtype=dtype, device=device)
    return q, k, v


def _gather_seq(x, world):
    stacked = torch.empty((world,) + tuple(x.shape), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(stacked, x.contiguous())
    b, sl, h, d = x.shape
    return stacked.permute(1, 0, 2, 3, 4).reshape(b, world * sl, h, d)


@torch.no_grad()
def solution(q, k, v):
    world, rank = dist.get_world_size(), dist.get_rank()
    sl, group = q.shape[1], q.shape[2] // k.shape[2]
    keys = _gather_seq(k, world).transpose(1, 2).repeat_interleave(group, dim=1)
    values = _gather_seq(v, world).transpose(1, 2).repeat_interleave(group, dim=1)
    pos = rank * sl + torch.arange(sl, device=q.device)
    mask = torch.arange(world * sl, device=q.device)[None, :] <= pos[:, None]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask)
    return out.transpose(1, 2)
