#!/usr/bin/env bash
# cupy_raw's hand-written GEMMs on the H200, checked then timed (issue 13):
#   matmul  bench/device/cupy_raw_matmul.py check capture bench --rows $GEMM_ROWS (default 16384):
#           every variant checked against float64 and in a captured graph, then fwd / dx / dW of the
#           five GPT-2 linears beside cuBLASLt                                        (~100 s)
#   probe   bench/tune/cupy_raw_wgmma_probe.py (gemm_wgmma's variants beside cuBLASLt) (~40 s)
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh cupy_gemm:200")
# GEMM_PROBE=0 leaves the probe out, GEMM_MATMUL=0 the check and bench; PROBE_ARGS go to the probe
# (e.g. "--variants tree,no_store,pingpong,pingpong_128x128"). Comes back as $OUT/cupy_gemm.tar.gz: cupy_gemm/{matmul.txt,
# probe.json, probe.txt}.
set -uo pipefail
OUT=${OUT:-/tmp/cupy-gemm-out}; D=$OUT/cupy_gemm; mkdir -p "$D"
export PYTHONUNBUFFERED=1
if [[ ${GEMM_MATMUL:-1} != 0 ]]; then
  timeout ${GEMM_T:-130} python3 bench/device/cupy_raw_matmul.py check capture bench --rows "${GEMM_ROWS:-16384}" \
    > "$D/matmul.txt" 2>&1; echo "matmul rc=$?"; tail -25 "$D/matmul.txt"
fi
if [[ ${GEMM_PROBE:-1} != 0 ]]; then
  timeout ${PROBE_T:-60} python3 bench/tune/cupy_raw_wgmma_probe.py --out "$D/probe.json" ${PROBE_ARGS:-} > "$D/probe.txt" 2>&1
  echo "probe rc=$?"; tail -20 "$D/probe.txt"
fi
tar czf "$OUT/cupy_gemm.tar.gz" -C "$OUT" cupy_gemm && rm -rf "$D"
