#!/usr/bin/env bash
# The PyTorch reference's step kernel by kernel and its GEMMs alone (bench/device/torch_step_trace.py),
# at TORCH_TRACE_B (default 64), torch.compile unless TORCH_TRACE_EAGER=1. About 60 s (the compile).
#   run(command="GIT_SHA=<sha> CLOCKS=1 bash bench/device/round.sh torch_trace:120 trace:120")
# Comes back as $OUT/torch_trace.tar.gz: torch_trace/{torch-step.md, torch-step.json, log.txt}.
set -uo pipefail
OUT=${OUT:-/tmp/torch-trace-out}; D=$OUT/torch_trace; mkdir -p "$D"
export PYTHONUNBUFFERED=1
timeout ${TORCH_TRACE_T:-110} python3 bench/device/torch_step_trace.py --out "$D" --B "${TORCH_TRACE_B:-64}" \
  ${TORCH_TRACE_EAGER:+--eager} 2>&1 | tee "$D/log.txt" | tail -45
tar czf "$OUT/torch_trace.tar.gz" -C "$OUT" torch_trace && rm -rf "$D"
