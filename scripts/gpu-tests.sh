#!/usr/bin/env bash
# Run the GPU tests (marker `gpu`) on a machine with NVIDIA GPUs: with one GPU, those that need one
# (references against float64, the attention library, ranks sharing the GPU); the rest need 2 or more.
# Usage: [CUCO_TEST_CACHE_DIR=a build cache to share] scripts/gpu-tests.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# The cudnn-frontend headers for the harness attention library, where they were staged for a GPU
# image that lacks them (benchmarks/runs/stage_attention_headers.sh).
if [ -d .whl/cudnn_frontend/include ] && [ -z "${CUCO_CUDNN_FRONTEND_INCLUDE:-}" ]; then
  export CUCO_CUDNN_FRONTEND_INCLUDE=$PWD/.whl/cudnn_frontend/include
fi
nvidia-smi -L
# -n 0: one process (pyproject runs two workers), so no two GPU tests take the GPUs at once.
exec python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider "$@"
