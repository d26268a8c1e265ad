#!/usr/bin/env bash
# One device call (nvidia-h200-x2): every GPU test (after warming the build cache in parallel),
# the trace-point overhead measured in one process, the dashboard screenshots of a live search
# and the key-press latency benchmark beside live evaluations. Results under $OUT.
set -u
STEP_TAIL=25
source "$(dirname "$0")/common.sh"
nvidia-smi -L | tee "$OUT/gpus.txt"
step prebuild 90 python3 benchmarks/runs/prebuild.py --jobs 14
TAIL=45 step gpu-tests ${TESTS_S:-270} scripts/gpu-tests.sh -q -rA --tb=short
python3 benchmarks/render_strategy.py gemm_allgather peer_pipeline /tmp/pp_ipc4.cu mover=ipc chunks=4 own_rows=parallel
step trace-overhead 120 python3 benchmarks/trace_overhead.py --gpus 0,1 --runs 1 --out "$OUT/trace_overhead.json" \
  workloads/gemm_allgather/candidates/lsa_allgather.cu /tmp/pp_ipc4.cu
step tui-screenshots 130 python3 benchmarks/tui_screenshots.py --out "$OUT/shots" --gpus 0,1 --seconds 110
step tui-latency 100 python3 benchmarks/tui_latency.py --gpus 0,1 --evaluations 4 --presses 15 --warmup-s 20 \
  --out "$OUT/tui_latency.json"
