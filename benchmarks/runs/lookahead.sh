#!/usr/bin/env bash
# Issue 34 item 1 (nvidia-h100-x4): the look-ahead's worth, on one host in one call: search_ab.sh
# with the look-ahead (the default) on GPUs 0,1 and --no-lookahead on GPUs 2,3 (docs/performance.md,
# 2026-11-27, fourteenth session).
#   R=$OUT; OUT=/tmp/o SEARCH_S=240 bash benchmarks/runs/lookahead.sh; tar czf $R/t.tgz -C /tmp/o .
A=lookahead A_FLAGS="" B=no-lookahead B_FLAGS=--no-lookahead exec bash "$(dirname "$0")/search_ab.sh"
