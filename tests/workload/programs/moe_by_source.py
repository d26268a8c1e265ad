"""Expert parallelism as fixed-capacity (GShard-style) dispatch writes it: each rank's tokens come laid
out [W, E/W, C, H] (destination rank, its local expert, capacity slot), an all-to-all trades the rank
blocks, and each local expert multiplies its slots from every source by a weight held as nn.Linear
holds it, [F, H]; the results go back by the inverse all-to-all."""
import torch
import torch.distributed as dist

SHAPES = {"verify": dict(C=8, H=64, F=96, E=4), "bench": dict(C=512, H=4096, F=1024, E=8)}


def make_inputs(rank, world, *, C, H, F, E, dtype=torch.bfloat16, device="cuda"):
    tokens = torch.randn(E * C, H, dtype=dtype, device=device)
    experts = torch.randn(E // world, F, H, dtype=dtype, device=device) / H ** 0.5
    return tokens, experts


@torch.no_grad()
def solution(tokens, experts):
    world = dist.get_world_size()
    arrived = torch.empty_like(tokens)
    dist.all_to_all_single(arrived, tokens)
    slots = arrived.view(world, experts.shape[0], -1, tokens.shape[1])  # [source, expert, slot, H]
    out = torch.matmul(slots, experts.transpose(1, 2)).reshape(tokens.shape[0], -1)
    back = torch.empty_like(out)
    dist.all_to_all_single(back, out)
    return back
