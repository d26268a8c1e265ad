#!/usr/bin/env bash
# One device call (one GPU, or two): what the twenty-first session built without a GPU (issue 33),
# correctness first.
#   1. the MoE reference's refactored pointer kernels (owed since the twentieth session);
#   2. the imported programs' GPU tests: every mapped program's seed against the program with the
#      ranks sharing GPU 0 (attention programs on cp_attention's seed, static-routing expert layers
#      on the generated seed), cp_attention's templates against the causal GQA program, the keyword
#      dims reference; with two GPUs also each seed timed against its program and the expert seed's
#      per-peer pipelines (kPerPeer 1 and 2);
#   3. with two GPUs, the bounds of one attention and one expert program (`cuco baseline`: their
#      parts are new, and an imported program's bound no longer counts the program itself).
# Needs .whl with the cudnn-frontend headers (benchmarks/runs/stage_attention_headers.sh).
set -u
STEP_TAIL=30
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
GPUS=$(nvidia-smi -L | wc -l)
step moe-ref "${MOE_S:-150}" python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu -rs \
  tests/workloads/moe_dispatch_combine/test_moe_gpu.py
step imported "${TESTS_S:-420}" python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu -rs \
  tests/workload/test_program_gpu.py -k "attention or moe_ or keyword or fsdp"
if [ "$GPUS" -ge 2 ]; then
  for p in cp_attention_gqa_causal moe_by_source; do
    step "import-$p" 120 python3 -m cuco_tui.cli workload import "tests/workload/programs/$p.py" --world 2 \
      --dir /tmp/imported
    step "baseline-$p" 180 python3 -m cuco_tui.cli baseline --workload "/tmp/imported/$p" --gpus 0,1
  done
fi
