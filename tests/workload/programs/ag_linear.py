"""Column-parallel linear of sequence parallelism: the rows are gathered, then multiplied by this rank's
columns of a weight held as nn.Linear holds it, [N/W, K], with a bias."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

# M and N divide by 64 x 8 ranks and K by 64: gemm_allgather's device and fused templates apply too.
SHAPES = {"verify": dict(M=512, K=128, N=512), "verify-wide": dict(M=1024, K=64, N=1536),
          "llama-qkv": dict(M=8192, K=4096, N=6144)}


def make_inputs(rank, world, *, M, K, N, dtype=torch.bfloat16, device="cuda"):
    x = torch.randn(M // world, K, dtype=dtype, device=device)
    w = torch.randn(N // world, K, dtype=dtype, device=device) / K ** 0.5
    b = torch.randn(N // world, dtype=dtype, device=device)
    return x, w, b


@torch.no_grad()
def solution(x, w, b):
    world = dist.get_world_size()
    full = torch.empty(x.shape[0] * world, x.shape[1], dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(full, x)
    return F.linear(full, w, b)
