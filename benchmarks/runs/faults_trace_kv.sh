#!/usr/bin/env bash
# One device call (nvidia-h200-x2): the GPU tests, the fault suite, the trace-point overhead
# and kv_transfer's baseline, seed and strategy templates. Results under $OUT.
set -u
STEP_TAIL=25
source "$(dirname "$0")/common.sh"
nvidia-smi -L | tee "$OUT/gpus.txt"
step gpu-tests 170 scripts/gpu-tests.sh -q
step selftest 210 python3 -m cuco_tui.cli selftest --faults
python3 benchmarks/render_strategy.py gemm_allgather peer_pipeline /tmp/pp_ipc4.cu mover=ipc chunks=4 own_rows=parallel
step trace-overhead 120 python3 benchmarks/trace_overhead.py --gpus 0,1 --runs 1 --out "$OUT/trace_overhead.json" \
  workloads/gemm_allgather/candidates/lsa_allgather.cu /tmp/pp_ipc4.cu
step kv-bench 170 python3 benchmarks/workload_bench.py -w kv_transfer --gpus 0,1 --templates --knob-sweep --out "$OUT/kv"
