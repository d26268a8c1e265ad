# Sourced by the device-call scripts here: results under $OUT, NVLink multicast off, a build
# cache shared by the steps, and `step NAME LIMIT_S CMD...` (output to $OUT/NAME.txt, its tail
# echoed: $TAIL lines for one step, else $STEP_TAIL). STEP_SIGNAL=INT ends a step at its limit as
# Ctrl-C would (a search then commits what is in flight and records its end), killed 60 s later.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export CUCO_CACHE_DIR=${CUCO_CACHE_DIR:-/tmp/cc/build}
# The GPU tests use the same cache (their own otherwise): what a step compiled, they find.
export CUCO_TEST_CACHE_DIR=$CUCO_CACHE_DIR
step() { local name=$1 limit=$2; shift 2; echo "== $name ($(date +%T))"; local t0=$SECONDS
  timeout ${STEP_SIGNAL:+-s "$STEP_SIGNAL" -k 60} "$limit" "$@" > "$OUT/$name.txt" 2>&1; echo "== $name rc=$? in $((SECONDS - t0)) s"
  tail -n "${TAIL:-${STEP_TAIL:-20}}" "$OUT/$name.txt"; }
# The cudnn-frontend headers for the harness attention library (staged into .whl/ by
# benchmarks/runs/stage_attention_headers.sh): the image has cuDNN but not the frontend.
[ -d .whl/cudnn_frontend/include ] && export CUCO_CUDNN_FRONTEND_INCLUDE=$PWD/.whl/cudnn_frontend/include
# What `cuco eval --profile` needs and the image may lack: cuda-bindings and CUPTI 13.0 from .whl/maybe.
need_cupti() {
  python3 -c "import cuda.bindings" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
    --target /tmp/site .whl/maybe/cuda_*.whl
  python3 -c "import importlib.metadata as m; m.version('nvidia-cuda-cupti')" 2>/dev/null \
    || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/maybe/nvidia_cuda_cupti*.whl; }
