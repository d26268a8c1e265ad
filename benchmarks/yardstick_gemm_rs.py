"""Yardstick for GEMM + ReduceScatter on one host, in one run (torchrun, one process per GPU):
GEMM alone, NCCL reduce-scatter alone, sequential (GEMM then reduce-scatter) and PyTorch async-TP
`torch.ops.symm_mem.fused_matmul_reduce_scatter`. Each rank holds A_r [M, K/W] and B_r [K/W, N]
(bf16) and computes rows [r*M/W, (r+1)*M/W) of sum_r A_r @ B_r, as gemm_reducescatter does.
Times: CUDA events, ranks aligned by a barrier before each repetition, the slowest rank's median.
Shapes: the workload's bench shapes (its manifest), or M,K,N arguments.

  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
  torchrun --nproc_per_node=W benchmarks/yardstick_gemm_rs.py [M,K,N ...]

Rank 0 prints a JSON line per shape and a table, and writes $OUT/rs_gemm_w{W}.json (or ./)."""

import json
import math
import os
import sys
import tomllib
from pathlib import Path

import torch
import torch.distributed as dist

MANIFEST = Path(__file__).resolve().parents[1] / "workloads" / "gemm_reducescatter" / "manifest.toml"


def bench(fn, reps=30, warm=5):
    """(median, min, max) ms of the slowest rank (the rank whose median is largest)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    mine = (ts[len(ts) // 2], ts[0], ts[-1])
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return max(every, key=lambda t: t[0])


def shapes_from(argv):
    if argv:
        return [("M,K,N", *(int(v) for v in a.split(","))) for a in argv]
    bench_shapes = tomllib.loads(MANIFEST.read_text())["bench"]
    return [(s["name"], s["M"], s["K"], s["N"]) for s in bench_shapes]


def table(out):
    head = ["shape", "M,K,N", "GEMM", "reduce-scatter", "sequential", "max(GEMM,RS)", "async-TP", "async-TP speedup",
            "async-TP err"]
    lines = [f"PyTorch {out['torch']} on {out['world']} x {out['gpu']}: ms, median of the slowest rank",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec in out["shapes"]:
        asynctp = rec.get("asynctp")
        lines.append("| " + " | ".join([
            rec["name"], f"{rec['M']},{rec['K']},{rec['N']}", f"{rec['gemm'][0]:.3f}", f"{rec['reducescatter'][0]:.3f}",
            f"{rec['sequential'][0]:.3f}", f"{rec['bound_ms']:.3f}",
            f"{asynctp[0]:.3f}" if asynctp else rec.get("asynctp_exc", "-")[:40],
            f"{rec['asynctp_speedup']:.2f}x" if asynctp else "-",
            f"{rec['asynctp_err']:.1e}" if "asynctp_err" in rec else "-"]) + " |")
    return "\n".join(lines)


def main():
    dist.init_process_group("nccl")
    r, W = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", r)))
    dev = torch.device("cuda", torch.cuda.current_device())
    g = dist.group.WORLD
    out = {"world": W, "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "shapes": []}
    try:
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group

        enable_symm_mem_for_group(g.group_name)
        have_symm = True
    except Exception as ex:  # an older PyTorch: the yardstick still times the sequential version
        have_symm = False
        out["symm_err"] = repr(ex)
    for name, M, K, N in shapes_from(sys.argv[1:]):
        torch.manual_seed(r)
        a = torch.randn(M, K // W, device=dev, dtype=torch.bfloat16)
        b = (torch.randn(K // W, N, device=dev) / math.sqrt(K)).to(torch.bfloat16)
        partial = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        y = torch.empty(M // W, N, device=dev, dtype=torch.bfloat16)
        rec = {"name": name, "M": M, "K": K, "N": N, "rs_bytes_per_rank": (W - 1) * (M // W) * N * 2}

        def seq():
            torch.matmul(a, b, out=partial)
            dist.reduce_scatter_tensor(y, partial)

        rec["gemm"] = bench(lambda: torch.matmul(a, b, out=partial))
        rec["reducescatter"] = bench(lambda: dist.reduce_scatter_tensor(y, partial))
        rec["sequential"] = bench(seq)
        seq()
        torch.cuda.synchronize()
        ref = y.float().clone()
        if have_symm:
            try:
                fn = lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, g.group_name)  # noqa: E731
                got = fn()
                torch.cuda.synchronize()
                rec["asynctp_err"] = float((got.float() - ref).abs().max() / ref.abs().max())
                rec["asynctp"] = bench(fn)
            except Exception as ex:
                rec["asynctp_exc"] = repr(ex)[:400]
        rec["bound_ms"] = max(rec["gemm"][0], rec["reducescatter"][0])
        if "asynctp" in rec:
            rec["asynctp_speedup"] = rec["sequential"][0] / rec["asynctp"][0]
        out["shapes"].append(rec)
        if r == 0:
            print(json.dumps(rec), flush=True)
        a = b = partial = y = None  # the next shape allocates afresh (closures above read these)
        torch.cuda.empty_cache()
    if r == 0:
        path = Path(os.environ.get("OUT", ".")) / f"rs_gemm_w{W}.json"
        path.write_text(json.dumps(out, indent=1))
        print(table(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
