#!/usr/bin/env bash
# One device call on ONE GPU (nvidia-h100-x1 or nvidia-h200): record the example session of
# failures (benchmarks/example_failures.py): gemm_allgather with its two ranks sharing GPU 0, a
# scripted agent proposing the workload's broken candidates (compile error, wrong values,
# unwritten output, NaN, illegal address, a cycle of waits, a missing signal, an endless loop)
# between good ones, every one through the real cascade and committed; the session records the
# GPU, driver, CUDA and NCCL. Results under $OUT: the bundle for sessions/examples/, the table
# (example_failures.txt), `cuco show` of the session and of its deadlock, and the run's log.
#   bash benchmarks/runs/example_failures.sh            (about 5 minutes; EXAMPLE_S bounds it)
set -u
STEP_TAIL=30
source "$(dirname "$0")/common.sh"
TAIL=40 step example-failures "${EXAMPLE_S:-540}" python3 benchmarks/example_failures.py --out "$OUT" --gpu 0 \
  --session /tmp/sess/gemm_allgather-failures
python3 -m cuco_tui.cli show /tmp/sess/gemm_allgather-failures > "$OUT/show.txt" 2>&1; head -n 30 "$OUT/show.txt"
deadlock=$(grep -m1 -oE '^c[0-9]{4} .*deadlock' "$OUT/example_failures.txt" | cut -d' ' -f1)
[ -n "$deadlock" ] && python3 -m cuco_tui.cli show /tmp/sess/gemm_allgather-failures "$deadlock" \
  > "$OUT/show-$deadlock.txt" 2>&1
ls -la "$OUT"
