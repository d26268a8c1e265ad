"""What the GPUs' links deliver under the traffic patterns the overlap kernels make, in one
process over every visible GPU (peer access enabled): the ceilings the bound
max(compute, bytes / peer bandwidth) assumes, checked under concurrency.

Patterns, each with the copy engines (cudaMemcpyPeerAsync) and, for pulls and pushes, with
store/load kernels of a few CTAs (16-byte accesses, grid-stride):
  one-way     GPU 0 -> GPU 1 alone (what `cuco baseline` measures as the peer copy)
  pair        0 <-> 1 both ways at once
  ring        every GPU pushes to r+1 at once (an all-gather's step)
  all-to-all  every GPU pushes to every other at once, one stream per pair (an all-gather at once)
and the same ring / all-to-all with a bf16 GEMM running on every GPU meanwhile (contention).
Per pattern: GB/s into each GPU (bytes received / the slowest incoming stream's time), median of
the repetitions, and the spread. All streams of a pattern wait on one gate event, so they start
together; each stream's time is read from its own events.

    python3 benchmarks/link_ceilings.py [--mib 256] [--reps 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import cupy as cp

SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) { }
}
extern "C" __global__ void move(const uint4* __restrict__ src, uint4* __restrict__ dst, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}
"""


class Gpus:
    def __init__(self, mib: int) -> None:
        self.n = cp.cuda.runtime.getDeviceCount()
        if self.n < 2:
            sys.exit("link_ceilings: needs 2 or more GPUs")
        self.nbytes = mib << 20
        self.src, self.dst, self.streams, self.kernels, self.gemm = [], [], [], [], []
        for d in range(self.n):
            with cp.cuda.Device(d):
                for p in range(self.n):
                    if p != d and cp.cuda.runtime.deviceCanAccessPeer(d, p):
                        try:
                            cp.cuda.runtime.deviceEnablePeerAccess(p)
                        except cp.cuda.runtime.CUDARuntimeError:
                            pass  # already enabled
                self.src.append(cp.random.random(self.nbytes // 4, dtype=cp.float32))
                # One receive slot per source, so concurrent pushes never overlap.
                self.dst.append([cp.empty(self.nbytes // 4, dtype=cp.float32) for _ in range(self.n)])
                self.streams.append([cp.cuda.Stream(non_blocking=True) for _ in range(self.n + 1)])
                mod = cp.RawModule(code=SPIN)
                self.kernels.append((mod.get_function("spin"), mod.get_function("move")))
                a = cp.random.random((8192, 8192), dtype=cp.float32).astype(cp.float16)
                self.gemm.append((a, a.T.copy()))
        cp.cuda.runtime.deviceSynchronize()

    def run(self, pairs: list[tuple[int, int]], mover: str, ctas: int, with_gemm: bool) -> dict[int, float]:
        """One repetition: every (src, dst) pair moves nbytes at once. GB/s into each receiver."""
        with cp.cuda.Device(0):
            gate_stream = self.streams[0][self.n]
            self.kernels[0][0]((1,), (1,), (cp.int64(2_000_000),), stream=gate_stream)  # ~1 ms: all queue behind it
            gate = cp.cuda.Event(disable_timing=True)
            gate.record(gate_stream)
        timed = []
        used = [0] * self.n
        for s, d in pairs:
            dev = s if mover in ("ce", "push") else d  # who issues: the sender's copy engine or kernel, or the puller
            with cp.cuda.Device(dev):
                st = self.streams[dev][used[dev]]  # a stream of its own per pair: nothing serializes
                used[dev] += 1
                st.wait_event(gate)
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(st)
                src, dst = self.src[s], self.dst[d][s]
                if mover == "ce":
                    cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, d, src.data.ptr, s, self.nbytes, st.ptr)
                else:
                    self.kernels[dev][1]((ctas,), (512,), (src, dst, cp.int64(self.nbytes // 16)), stream=st)
                e1.record(st)
                timed.append((d, e0, e1))
        if with_gemm:
            for d in range(self.n):
                with cp.cuda.Device(d):
                    st = self.streams[d][self.n]
                    if d != 0:
                        st.wait_event(gate)
                    with st:
                        a, b = self.gemm[d]
                        for _ in range(6):
                            a @ b
        for d in range(self.n):
            with cp.cuda.Device(d):
                cp.cuda.runtime.deviceSynchronize()
        slowest: dict[int, float] = {}
        for d, e0, e1 in timed:
            slowest[d] = max(slowest.get(d, 0.0), cp.cuda.get_elapsed_time(e0, e1))
        received = {d: sum(1 for _, x in pairs if x == d) * self.nbytes for d in slowest}
        return {d: received[d] / (ms * 1e6) for d, ms in slowest.items()}


def patterns(n: int) -> dict[str, list[tuple[int, int]]]:
    return {
        "one-way": [(0, 1)],
        "pair": [(0, 1), (1, 0)],
        "ring": [(r, (r + 1) % n) for r in range(n)],
        "all-to-all": [(s, d) for s in range(n) for d in range(n) if s != d],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="bytes per stream, MiB")
    ap.add_argument("--reps", type=int, default=7, help="repetitions per pattern (median reported)")
    ap.add_argument("--ctas", default="8,16,32", help="CTA counts of the store/load kernels")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    g = Gpus(args.mib)
    rows = []
    movers = [("ce", 0)] + [(m, int(c)) for m in ("push", "pull") for c in args.ctas.split(",")]
    for name, pairs in patterns(g.n).items():
        for mover, ctas in movers:
            for with_gemm in (False, True) if name in ("ring", "all-to-all") else (False,):
                g.run(pairs, mover, ctas, with_gemm)  # warm-up
                reps = [g.run(pairs, mover, ctas, with_gemm) for _ in range(args.reps)]
                per_gpu = [min(r.values()) for r in reps]  # the slowest receiver of each repetition
                q = statistics.quantiles(per_gpu, n=4) if len(per_gpu) > 1 else [per_gpu[0]] * 3
                rows.append({"pattern": name, "mover": mover, "ctas": ctas, "gemm": with_gemm,
                             "gbps_median": statistics.median(per_gpu), "gbps_q1": q[0], "gbps_q3": q[2],
                             "world": g.n, "mib": args.mib})
    print(f"{'pattern':<11} {'mover':<5} {'ctas':>4} {'gemm':<5} {'GB/s in (slowest GPU)':>22}  q1-q3")
    for r in rows:
        print(f"{r['pattern']:<11} {r['mover']:<5} {r['ctas'] or '-':>4} {str(r['gemm']):<5} "
              f"{r['gbps_median']:>22.1f}  {r['gbps_q1']:.1f}-{r['gbps_q3']:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
