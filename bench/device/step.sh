#!/usr/bin/env bash
# The GPU training step on the H200 (euler_core/step.py), in one stage of a device call:
#   step_check.py   the captured CUDA graph against the eager step (bitwise, small GPT and 124M), then
#                   GPT-2 124M bf16 --backend triton tokens/s at B=16 (graph and eager), 32, 64   (~150 s)
#   conformance     the model row for triton in float32, bfloat16, float16                      (~40 s)
# SMOKE=1: fewer steps. Comes back as $OUT/step.tar.gz (step.jsonl, conformance.txt, log.txt).
set -uo pipefail
D=$OUT/step; mkdir -p "$D"
export PYTHONUNBUFFERED=1
timeout ${STEP_BUDGET:-240} python3 bench/device/step_check.py --out "$D" ${SMOKE:+--smoke} 2>&1 | tee "$D/log.txt" | tail -15
timeout 120 euler conformance --backend triton --check model_step > "$D/conformance.txt" 2>&1
tail -12 "$D/conformance.txt"
tar czf "$OUT/step.tar.gz" -C "$OUT" step && rm -rf "$D"
