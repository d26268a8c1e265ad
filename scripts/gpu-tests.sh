#!/usr/bin/env bash
# Run the GPU tests (marker `gpu`) on a machine with NVIDIA GPUs (2 or more for most).
# Usage: scripts/gpu-tests.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
nvidia-smi -L
exec python3 -m pytest -m gpu -v -p no:cacheprovider "$@"
