#!/usr/bin/env bash
# One device call (nvidia-h200-x2): the MoE reference's one-GPU tests, the trace-point overhead
# (in one process, $TRACE_RUNS evaluations per candidate), the dashboard screenshots of a live
# search, then benchmarks/runs/workload_search.sh for $WORKLOAD. Results under $OUT.
set -u
STEP_TAIL=12
source "$(dirname "$0")/common.sh"
step moe-ref-tests 90 scripts/gpu-tests.sh -q -rA --tb=short tests/workloads/moe_dispatch_combine/test_moe_gpu.py -k one_gpu
python3 benchmarks/render_strategy.py gemm_allgather peer_pipeline /tmp/pp_ipc4.cu mover=ipc chunks=4 own_rows=parallel
step trace-overhead 80 python3 benchmarks/trace_overhead.py --gpus 0,1 --runs "${TRACE_RUNS:-2}" \
  --out "$OUT/trace_overhead.json" workloads/gemm_allgather/candidates/lsa_allgather.cu /tmp/pp_ipc4.cu
step tui-screenshots 110 python3 benchmarks/tui_screenshots.py --out "$OUT/shots" --gpus 0,1 --seconds 95
bash benchmarks/runs/workload_search.sh
