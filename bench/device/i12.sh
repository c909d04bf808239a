#!/usr/bin/env bash
# Issue 12's new fused pieces on the H200, checked and timed alone (the whole step is train.sh's):
#   conformance  euler conformance --backend triton --op crossentropy_onepass and --op matmul_gelu
#                (both of its variants), then the model step (loss and every gradient against float64
#                naive) in bfloat16 and float32 for the selections of I12_SELS        (~60 s)
#   sweep        bench/tune/crossentropy_onepass_sweep.py at B*T = 65536 and 16384  (~40 s)
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh i12:170 ...", carry=[".h200"])
# I12_OPS (default "crossentropy_onepass matmul_gelu"), I12_CONF_T (seconds a conformance run, 60),
# I12_MODEL=0 / I12_SWEEP=0 leave the model steps / the sweep out; I12_MATMUL=<plan> adds
# bench/tune/matmul_sweep.py --plan <plan> (b64: the backward GEMMs at 65536 rows, ~90 s).
# Comes back as $OUT/i12.tar.gz: i12/{conformance-*.txt, model-step.txt, onepass-sweep.json,
# matmul-<plan>.json, log.txt}.
set -uo pipefail
OUT=${OUT:-/tmp/i12-out}; D=$OUT/i12; mkdir -p "$D"
export PYTHONUNBUFFERED=1
SELS=${I12_SELS:-"triton triton,crossentropy_onepass=triton triton,crossentropy_onepass=triton,matmul_gelu=triton:epilogue"}
for op in ${I12_OPS-crossentropy_onepass matmul_gelu}; do
  timeout ${I12_CONF_T:-60} euler conformance --backend triton --op $op > "$D/conformance-$op.txt" 2>&1
  echo "conformance $op: $(tail -2 "$D/conformance-$op.txt" | head -1)" | tee -a "$D/log.txt"
done
if [[ ${I12_MODEL:-1} != 0 ]]; then
timeout 60 python3 - $SELS > "$D/model-step.txt" 2>&1 <<'PY'
import sys
from conformance.arrays import CheckFailed, CheckSkipped
from conformance.model import check_model_step
for selection in sys.argv[1:]:
    for dtype in ("bfloat16", "float32"):
        try:
            check_model_step(selection, dtype=dtype)
            print(f"PASSED {selection} {dtype}", flush=True)
        except (CheckFailed, CheckSkipped) as e:
            print(f"{type(e).__name__} {selection} {dtype}: {e}", flush=True)
PY
cat "$D/model-step.txt" | tee -a "$D/log.txt"
fi
[[ ${I12_SWEEP:-1} != 0 ]] && timeout 80 python3 bench/tune/crossentropy_onepass_sweep.py --out "$D/onepass-sweep.json" 2>&1 | tee -a "$D/log.txt" | tail -16
[[ -n ${I12_MATMUL:-} ]] && timeout ${I12_MATMUL_T:-150} python3 bench/tune/matmul_sweep.py --plan "$I12_MATMUL" \
  --out "$D/matmul-$I12_MATMUL.json" 2>&1 | tee -a "$D/log.txt" | tail -24
tar czf "$OUT/i12.tar.gz" -C "$OUT" i12 && rm -rf "$D"
