"""Data parallelism's gradient step: each rank's gradient of a least-squares loss with respect to a
shared weight, by autograd inside solution, averaged over the ranks with an all-reduce. No
@torch.no_grad(): the program needs autograd."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(B=24, D=16, O=8), "bench": dict(B=8192, D=4096, O=1024)}


def make_inputs(rank, world, *, B, D, O, dtype=torch.bfloat16, device="cuda"):
    x = torch.randn(B, D, dtype=dtype, device=device)
    y = torch.randn(B, O, dtype=dtype, device=device)
    w = torch.randn(D, O, dtype=dtype, device=device) / D ** 0.5
    return x, y, w


def solution(x, y, w):
    w = w.detach().requires_grad_(True)
    ((x @ w - y) ** 2).sum().backward()
    grad = w.grad
    dist.all_reduce(grad)
    return grad / dist.get_world_size()
