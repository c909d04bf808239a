#!/usr/bin/env bash
# cupy_raw's hand-written GEMMs on the H200, checked then timed (issue 13):
#   split   (GEMM_SPLIT=1 only, first) bench/tune/cupy_raw_step_gemm_sweep.py at $SPLIT_ROWS (65536) rows:
#           dW's split-K slice counts (each with its finish) and lm_head's forward configurations,
#           checked then timed beside cuBLASLt; SPLIT_SWEEPS narrows them (split, lm_head)   (~90 s)
#   matmul  bench/device/cupy_raw_matmul.py check capture bench --rows $GEMM_ROWS (default 16384):
#           every variant checked against float64 and in a captured graph, then fwd / dx / dW of the
#           five GPT-2 linears beside cuBLASLt                                        (~100 s)
#   probe   bench/tune/cupy_raw_wgmma_probe.py (gemm_wgmma's variants beside cuBLASLt) (~40 s)
#   sanitize  compute-sanitizer memcheck and racecheck, side by side, on cupy_raw_matmul.py sanitize
#           (every GEMM kernel once at small awkward shapes), after the timings         (~60 s)
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh cupy_gemm:200")
# GEMM_PROBE=0 leaves the probe out, GEMM_MATMUL=0 the check and bench, GEMM_SANITIZE=0 the sanitizers,
# GEMM_SPLIT=1 adds the step-shape sweep; PROBE_ARGS go to the probe
# (e.g. "--variants tree,no_store,pingpong,pingpong_128x128"). Comes back as $OUT/cupy_gemm.tar.gz: cupy_gemm/{matmul.txt,
# probe.json, probe.txt, split.json, split.txt, memcheck.txt, racecheck.txt}.
set -uo pipefail
OUT=${OUT:-/tmp/cupy-gemm-out}; D=$OUT/cupy_gemm; mkdir -p "$D"
export PYTHONUNBUFFERED=1
if [[ ${GEMM_SPLIT:-0} != 0 ]]; then
  timeout ${SPLIT_T:-120} python3 bench/tune/cupy_raw_step_gemm_sweep.py --rows "${SPLIT_ROWS:-65536}" --sweeps "${SPLIT_SWEEPS:-split,lm_head}" --out "$D/split.json" \
    > "$D/split.txt" 2>&1; echo "split rc=$?"; cat "$D/split.txt"
fi
if [[ ${GEMM_MATMUL:-1} != 0 ]]; then
  timeout ${GEMM_T:-130} python3 bench/device/cupy_raw_matmul.py check capture bench --rows "${GEMM_ROWS:-16384}" \
    > "$D/matmul.txt" 2>&1; echo "matmul rc=$?"; tail -25 "$D/matmul.txt"
fi
if [[ ${GEMM_PROBE:-1} != 0 ]]; then
  timeout ${PROBE_T:-60} python3 bench/tune/cupy_raw_wgmma_probe.py --out "$D/probe.json" ${PROBE_ARGS:-} > "$D/probe.txt" 2>&1
  echo "probe rc=$?"; tail -20 "$D/probe.txt"
fi
if [[ ${GEMM_SANITIZE:-1} != 0 ]]; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck; do
    timeout ${SANITIZE_T:-120} "$SAN" --tool $tool --error-exitcode 3 python3 bench/device/cupy_raw_matmul.py sanitize \
      > "$D/$tool.txt" 2>&1 &
  done
  wait
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$D/memcheck.txt" "$D/racecheck.txt"; tail -2 "$D/memcheck.txt"
fi
tar czf "$OUT/cupy_gemm.tar.gz" -C "$OUT" cupy_gemm && rm -rf "$D"
