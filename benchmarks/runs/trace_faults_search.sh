#!/usr/bin/env bash
# One device call (nvidia-h200-x2): trace-point overhead, the hanging faults again (the trace
# code changed), then gemm_allgather's baseline, PyTorch async-TP and an offline search, all in
# the same call, and the session exported as a bundle. Results under $OUT.
set -u
STEP_TAIL=14
source "$(dirname "$0")/common.sh"
SEARCH_S=${SEARCH_S:-330}
python3 benchmarks/render_strategy.py gemm_allgather peer_pipeline /tmp/pp_ipc4.cu mover=ipc chunks=4 own_rows=parallel
step trace-overhead 100 python3 benchmarks/trace_overhead.py --gpus 0,1 --runs 1 --out "$OUT/trace_overhead.json" \
  workloads/gemm_allgather/candidates/lsa_allgather.cu /tmp/pp_ipc4.cu
step selftest-hangs 110 python3 -m cuco_tui.cli selftest --faults --only hang,missing_signal,skip_barrier,infinite_loop
step baseline 60 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1 --json
step yardstick 90 torchrun --nproc_per_node=2 .whl/yardstick_ag_gemm.py
cp -f ag_gemm_w2.json "$OUT/" 2>/dev/null
step search "$SEARCH_S" python3 -m cuco_tui.cli search --workload gemm_allgather --generations 18 --agent offline \
  --gpus 0,1 --seed 1 --session /tmp/sess/gemm_allgather-offline-h200x2
python3 -c "from cuco_tui.lineage import SessionRepo, export_bundle; export_bundle(SessionRepo.open('/tmp/sess/gemm_allgather-offline-h200x2'), '$OUT/gemm_allgather-offline-h200x2.bundle')"
python3 -m cuco_tui.cli show /tmp/sess/gemm_allgather-offline-h200x2 > "$OUT/show.txt" 2>&1; tail -n 30 "$OUT/show.txt"
