#!/usr/bin/env bash
# The first profiles on GPUs (issue 34 item 4) and the evaluate GPU tests after the profile step
# (issue 30): CUPTI from .whl (benchmarks/runs/README.md says how to fill it), the GPU tests of
# tests/evaluate (the profile test among them), then `cuco eval --profile long-seq` of the seed
# (host-sequential: its exposed communication should be about the all-gather's whole time) and of
# fused_tile at the 2-GPU search's best knobs (chunks=2, tile 256x128). Two GPUs of the host.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/profile_first.sh; tar czf $R/p.tgz -C /tmp/o .
set -u
STEP_TAIL=30
source "$(dirname "$0")/common.sh"
nvidia-smi -L
# cupti-python needs cuda-bindings 13.0 and libcupti 13.0 (nvidia-cuda-cupti): the image's where it
# has them (torch's cu130 build brings libcupti), else the wheels carried in .whl/maybe.
python3 -c "import cuda.bindings" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
  --target /tmp/site .whl/maybe/cuda_*.whl
python3 -c "import importlib.metadata as m; print('nvidia-cuda-cupti', m.version('nvidia-cuda-cupti'))" 2>/dev/null \
  || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/maybe/nvidia_cuda_cupti*.whl
python3 -c "import cupti, cuda.bindings; print('cupti imports')" 2>&1 | tail -2
step prebuild "${PREBUILD_S:-100}" python3 benchmarks/runs/prebuild.py --jobs 48 gemm_allgather
step evaluate "${TESTS_S:-380}" bash scripts/gpu-tests.sh -v --tb=short -rfE -p no:randomly --durations=10 \
  --timeout=200 tests/evaluate
python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/fused.cu chunks=2 tile=256x128
TAIL=40 step profile-seed 60 python3 -m cuco_tui.cli eval workloads/gemm_allgather/seed.cu --gpus 0,1 \
  --profile long-seq --shapes long-seq
TAIL=40 step profile-fused 60 python3 -m cuco_tui.cli eval /tmp/fused.cu --workload gemm_allgather --gpus 0,1 \
  --profile long-seq --shapes long-seq
for s in seed fused; do
  t=$(grep -o 'trace: [^ ]*' "$OUT/profile-$s.txt" | head -1 | cut -d' ' -f2)
  [ -n "$t" ] && [ -f "$t" ] && cp "$t" "$OUT/profile-$s.trace.json"
done
ls -la "$OUT"
exit 0
