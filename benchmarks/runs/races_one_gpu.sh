#!/usr/bin/env bash
# One device call on one GPU (nvidia-h100-x1), every rank of a group sharing it: L2's perturbed
# schedules (issue 25). In order, each step's results under $OUT as soon as it ends:
#   build      the faults and the schedule perturber, in parallel (benchmarks/race_check.py build)
#   faults-w2  the fault suite's code on the race faults (with the replay of each failing seed) and
#              the hangs that name their waits, 2 ranks (race_check.py faults)
#   luck       the race faults with the perturbed schedules off, 2 and 4 ranks: today's verdict
#   check      every workload's seed, hand-written candidates and templates at default knobs under
#              the perturbed schedules, 2 and 4 ranks, with the seconds they add (shared_gpu_check.py,
#              which builds what it checks in parallel first)
#   faults-w4  the race faults and cycle_of_three, 4 ranks
# and a table of everything at the end (race_check.py summary; JSON in $OUT/races.json).
#   bash benchmarks/runs/races_one_gpu.sh          # about 8 minutes on a fresh H100 (each step has a limit)
set -u
STEP_TAIL=12
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
R="python3 benchmarks/race_check.py"
step build "${BUILD_S:-120}" $R build --out "$OUT" --jobs 15
step faults-w2 "${FAULTS2_S:-150}" $R faults --out "$OUT" --world 2
step luck "${LUCK_S:-70}" $R luck --out "$OUT" --worlds 2,4 --jobs 3
step check "${CHECK_S:-240}" python3 benchmarks/shared_gpu_check.py --out "$OUT/check" --jobs 3 --build-jobs 15 \
  --worlds 2,4
step faults-w4 "${FAULTS4_S:-150}" $R faults --out "$OUT" --world 4
TAIL=60 step summary 60 $R summary --out "$OUT" --check "$OUT/check/shared_gpu_check.json"
