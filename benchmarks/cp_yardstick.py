"""Yardstick for cp_attention's compute: PyTorch's fused attention (FlashAttention and cuDNN
backends of scaled_dot_product_attention) doing exactly the work of the slowest rank of a
W-rank context-parallel step, on one GPU, for every bench shape of the manifest.

Rank r holds the queries of positions [r*S/W, (r+1)*S/W). Non-causal, it attends to all S keys
(one call). Causal, the last rank does the most: every earlier key without a mask, plus its own
chunk causally; timed as those two calls (the merge of their partial results, a few element-wise
passes over [S/W, H, D], is left out, so the yardstick is a little optimistic).

  python benchmarks/cp_yardstick.py [--world 2] [--reps 10] [--out FILE.json]

Needs torch with CUDA (the GPU host has it); compare its times with the `attention alone` part of
`workload_bench.py -w cp_attention` measured in the same call."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from cuco_tui.workload.manifest import load_workload


def time_ms(torch, fn, reps: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def rank_work(torch, F, dims: dict, world: int, gqa: bool):
    """The slowest rank's attention calls, as one closure."""
    S, H, HKV, D, causal = dims["S"], dims["H"], dims["HKV"], dims["D"], dims["CAUSAL"]
    sl = S // world
    dev, bf = "cuda", torch.bfloat16
    q = torch.randn(1, H, sl, D, device=dev, dtype=bf)

    def kv(n):
        k = torch.randn(1, HKV, n, D, device=dev, dtype=bf)
        v = torch.randn(1, HKV, n, D, device=dev, dtype=bf)
        if not gqa and HKV != H:  # the backend lacks GQA: repeat the heads (costs memory, not time)
            k, v = k.repeat_interleave(H // HKV, 1), v.repeat_interleave(H // HKV, 1)
        return k, v

    kw = {"enable_gqa": True} if gqa and HKV != H else {}
    if not causal:
        k, v = kv(S)
        return lambda: F.scaled_dot_product_attention(q, k, v, **kw)
    k_own, v_own = kv(sl)
    k_prev, v_prev = kv(S - sl)
    if world == 1:
        return lambda: F.scaled_dot_product_attention(q, k_own, v_own, is_causal=True, **kw)

    def both():
        F.scaled_dot_product_attention(q, k_prev, v_prev, **kw)
        F.scaled_dot_product_attention(q, k_own, v_own, is_causal=True, **kw)
    return both


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    w = load_workload("cp_attention")
    rows = []
    for shape in w.bench_shapes:
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            row = {"shape": shape.name, "dims": shape.dims, "world": args.world, "backend": name}
            try:
                with sdpa_kernel([backend]):
                    try:
                        fn = rank_work(torch, F, shape.dims, args.world, gqa=True)
                        fn()
                    except (RuntimeError, TypeError):
                        fn = rank_work(torch, F, shape.dims, args.world, gqa=False)
                    ts = time_ms(torch, fn, args.reps)
                row.update(median_ms=statistics.median(ts), min_ms=min(ts), max_ms=max(ts), n=len(ts))
            except Exception as e:  # a backend that refuses the shape: say so, keep going
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
