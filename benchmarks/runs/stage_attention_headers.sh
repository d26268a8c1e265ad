#!/usr/bin/env bash
# Copy the cudnn-frontend headers installed here (pip install 'cuco-tui[attention]') into
# .whl/cudnn_frontend/include, which the device calls carry: the GPU image has cuDNN but not the
# frontend, and the harness attention library is built there from these headers (common.sh points
# CUCO_CUDNN_FRONTEND_INCLUDE at them). The folder must be named include: the headers reach each
# other by "../include/...".
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$(python3 -c "from cuco_tui.toolchain.attention import find_cudnn; f = find_cudnn().frontend; print(f or '')")
[ -n "$src" ] || { echo "no cudnn-frontend headers here: pip install nvidia-cudnn-frontend" >&2; exit 1; }
rm -rf .whl/cudnn_frontend && mkdir -p .whl/cudnn_frontend/include
cp -r "$src"/cudnn_frontend "$src"/cudnn_frontend*.h "$src"/cudnn_backend_base.h .whl/cudnn_frontend/include/
du -sh .whl/cudnn_frontend
