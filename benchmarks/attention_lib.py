"""The harness attention library (cuco_attn, cuDNN SDPA) on one GPU, against PyTorch's SDPA.

Builds the library (once per machine), checks it against float64 on small shapes (output and
log-sum-exp stats, every mask), then times, on each cp_attention bench shape, the work of the
slowest rank at world size --world (the last rank: its queries see every key when causal):

  torch_flash  one torch SDPA call on the FlashAttention backend, bottom-right causal mask
               (what the cp reference does today);
  attn_br      one cuco_attn call, bottom-right causal mask;
  attn_split   two cuco_attn calls with stats: the earlier ranks' keys (no mask) and the rank's
               own chunk (top-left causal), the split a ring or overlap schedule makes; the merge
               of the two is timed apart (merge);
  balanced     causal shapes only: the most any rank computes when the queries are dealt out in
               2W half-chunks zigzag (rank r takes half-chunks r and 2W-1-r), the load balance a
               candidate can make by moving queries and outputs.

Prints one JSON line per (shape, variant) and writes them all to --out.

    python3 benchmarks/attention_lib.py --world 2 --reps 10 --out attn.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cuco_tui.toolchain import BuildCache  # noqa: E402
from cuco_tui.toolchain.attention import ensure_library  # noqa: E402
from cuco_tui.toolchain.toolchain import discover  # noqa: E402
from cuco_tui.harness import attention as attn  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402
from cp_yardstick import time_ms  # noqa: E402


def stats_row(ts: list[float]) -> dict:
    return {"median_ms": round(statistics.median(ts), 4), "min_ms": round(min(ts), 4), "max_ms": round(max(ts), 4),
            "n": len(ts)}


def exact(torch, q, k, v, mask: int):
    """float64 attention and LSE; q [s, H, D], k/v [n, HKV, D] -> o [s, H, D], lse [H, s]."""
    s, H, D = q.shape
    n, HKV, _ = k.shape
    g = H // HKV
    qd, kd, vd = (t.double().transpose(0, 1) for t in (q, k, v))
    kd, vd = kd.repeat_interleave(g, 0), vd.repeat_interleave(g, 0)
    scores = qd @ kd.transpose(1, 2) / math.sqrt(D)
    if mask:
        shift = 0 if mask == attn.CAUSAL_TOP_LEFT else n - s
        i = torch.arange(s, device=q.device)[:, None]
        j = torch.arange(n, device=q.device)[None, :]
        scores = scores.masked_fill(j > i + shift, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    return (torch.softmax(scores, -1) @ vd).transpose(0, 1), lse


def check(torch, lib) -> list[dict]:
    rows = []
    torch.manual_seed(0)
    for (s, n, H, HKV, D, mask) in [(256, 256, 4, 2, 64, attn.NO_MASK), (192, 256, 8, 2, 128, attn.CAUSAL_TOP_LEFT),
                                    (128, 384, 4, 1, 64, attn.CAUSAL_BOTTOM_RIGHT), (64, 64, 2, 2, 128, attn.NO_MASK)]:
        q = (2 * torch.randn(s, H, D, device="cuda")).bfloat16()
        k = torch.randn(n, HKV, D, device="cuda").bfloat16()
        v = torch.randn(n, HKV, D, device="cuda").bfloat16()
        o = torch.empty(s, H, D, device="cuda", dtype=torch.bfloat16)
        lse = torch.empty(H, s, device="cuda", dtype=torch.float32)
        plan = attn.Plan.create(lib, H, HKV, D, s, n, mask=mask, stats=True)
        plan.run(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), torch.cuda.current_stream().cuda_stream,
                 stats=lse.data_ptr())
        torch.cuda.synchronize()
        plan.close()
        want_o, want_lse = exact(torch, q, k, v, mask)
        err_o = ((o.double() - want_o).norm() / want_o.norm()).item()
        err_lse = (lse.double() - want_lse).abs().max().item()
        row = {"check": f"s={s} n={n} H={H} HKV={HKV} D={D} mask={mask}", "rel_l2_o": err_o, "max_abs_lse": err_lse,
               "ok": err_o < 0.01 and err_lse < 0.01}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def bench(torch, lib, dims: dict, world: int, reps: int) -> list[dict]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    S, H, HKV, D, causal = dims["S"], dims["H"], dims["HKV"], dims["D"], dims["CAUSAL"]
    sl = S // world
    n = S  # the last rank sees every key, causal or not
    stream = torch.cuda.current_stream().cuda_stream
    q = (2 * torch.randn(sl, H, D, device="cuda")).bfloat16()
    k = torch.randn(n, HKV, D, device="cuda").bfloat16()
    v = torch.randn(n, HKV, D, device="cuda").bfloat16()
    o = torch.empty_like(q)
    out: dict[str, list[float]] = {}

    gqa = {"enable_gqa": True} if HKV != H else {}
    tq, tk, tv = (t.unsqueeze(0).transpose(1, 2) for t in (q, k, v))
    mask = causal_lower_right(sl, n) if causal else None
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        ref = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, **gqa).transpose(1, 2)[0]
        out["torch_flash"] = time_ms(torch, lambda: F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, **gqa),
                                     reps)

    one = attn.Plan.create(lib, H, HKV, D, sl, n, mask=attn.CAUSAL_BOTTOM_RIGHT if causal else attn.NO_MASK)
    run_one = lambda: one.run(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), stream)  # noqa: E731
    out["attn_br"] = time_ms(torch, run_one, reps)
    run_one()
    torch.cuda.synchronize()
    agree = ((o.float() - ref.float()).norm() / ref.float().norm()).item()

    # The split a ring schedule makes: earlier keys (all visible), then the own chunk.
    prev = n - sl
    own = attn.Plan.create(lib, H, HKV, D, sl, sl, mask=attn.CAUSAL_TOP_LEFT if causal else attn.NO_MASK, stats=True)
    early = attn.Plan.create(lib, H, HKV, D, sl, prev, stats=True)
    o1, o2 = torch.empty_like(q), torch.empty_like(q)
    l1 = torch.empty(H, sl, device="cuda", dtype=torch.float32)
    l2 = torch.empty_like(l1)
    kown, vown = k[prev:], v[prev:]

    def split():
        own.run(q.data_ptr(), kown.data_ptr(), vown.data_ptr(), o1.data_ptr(), stream, stats=l1.data_ptr())
        early.run(q.data_ptr(), k.data_ptr(), v.data_ptr(), o2.data_ptr(), stream, stats=l2.data_ptr())

    def merge():
        m = torch.maximum(l1, l2)
        w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)
        tot = w1 + w2
        return (o1.float() * (w1 / tot).T[..., None] + o2.float() * (w2 / tot).T[..., None]).bfloat16()

    out["attn_split"] = time_ms(torch, split, reps)
    out["merge"] = time_ms(torch, merge, reps)
    split()
    merged = merge()
    torch.cuda.synchronize()
    agree_split = ((merged.float() - ref.float()).norm() / ref.float().norm()).item()
    for p in (one, own, early):
        p.close()

    if causal:
        half = sl // 2
        plans = {}

        def half_chunk(c: int):
            key = c
            if key not in plans:
                plans[key] = attn.Plan.create(lib, H, HKV, D, half, (c + 1) * half, mask=attn.CAUSAL_BOTTOM_RIGHT)
            return plans[key]

        worst = []
        for r in range(world):
            chunks = (r, 2 * world - 1 - r)
            fn = lambda chunks=chunks: [half_chunk(c).run(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),  # noqa: E731
                                                          stream) for c in chunks]
            ts = time_ms(torch, fn, reps)
            worst.append((statistics.median(ts), r, ts))
        out["balanced"] = max(worst)[2]
        for p in plans.values():
            p.close()

    rows = []
    for name, ts in out.items():
        row = {"variant": name, **stats_row(ts)}
        if name == "attn_br":
            row["rel_l2_vs_torch_flash"] = agree
        if name == "attn_split":
            row["rel_l2_vs_torch_flash_after_merge"] = agree_split
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch

    t0 = time.monotonic()
    library = ensure_library(discover(), BuildCache())
    print(json.dumps({"library": str(library.path), "problem": library.problem, "build_s": round(library.seconds, 1),
                      "cached": library.cached, "wall_s": round(time.monotonic() - t0, 1)}), flush=True)
    if not library.ok:
        return 1
    torch.cuda.init()
    lib = attn.loaded(library.preload())
    if lib is None:
        print(json.dumps({"error": "the library did not load"}))
        return 1
    results: list[dict] = [{"cudnn_version": lib.cuco_attn_cudnn_version(), "device": torch.cuda.get_device_name()}]
    print(json.dumps(results[0]), flush=True)
    results += check(torch, lib)
    for shape in load_workload("cp_attention").bench_shapes:
        try:
            for row in bench(torch, lib, shape.dims, args.world, args.reps):
                row = {"shape": shape.name, "world": args.world, **row}
                results.append(row)
                print(json.dumps(row), flush=True)
        except Exception as exc:  # a shape the library refuses: say so, keep going
            row = {"shape": shape.name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            results.append(row)
            print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
