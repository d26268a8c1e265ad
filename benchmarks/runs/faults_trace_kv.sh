#!/usr/bin/env bash
# One device call (nvidia-h200-x2): the GPU tests, the fault suite, the trace-point overhead
# and kv_transfer's baseline, seed and strategy templates. Results under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export CUCO_CACHE_DIR=${CUCO_CACHE_DIR:-/tmp/cc/build}
nvidia-smi -L | tee "$OUT/gpus.txt"
step() { local name=$1 limit=$2; shift 2; echo "== $name ($(date +%T))"; local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1; echo "== $name rc=$? in $((SECONDS - t0)) s"; tail -n 25 "$OUT/$name.txt"; }
step gpu-tests 170 scripts/gpu-tests.sh -q
step selftest 210 python3 -m cuco_tui.cli selftest --faults
python3 benchmarks/render_strategy.py gemm_allgather peer_pipeline /tmp/pp_ipc4.cu mover=ipc chunks=4 own_rows=parallel
step trace-overhead 120 python3 benchmarks/trace_overhead.py --gpus 0,1 --runs 1 --out "$OUT/trace_overhead.json" \
  workloads/gemm_allgather/candidates/lsa_allgather.cu /tmp/pp_ipc4.cu
step kv-bench 170 python3 benchmarks/workload_bench.py -w kv_transfer --gpus 0,1 --templates --knob-sweep --out "$OUT/kv"
