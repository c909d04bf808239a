#!/usr/bin/env bash
# The triton attention's two backwards on the H200, in one stage of the round driver (bench/device/round.sh):
#
#   tiles        bench/tune/attention_tiles.py --ordered: every ordered-dQ candidate and the `ordered`
#                variant checked against float64 (each backward repeated ATT_REPEATS times, bitwise
#                equal to the first: a race in the dQ order would show), then timed beside `flash` and
#                SDPA (cuDNN, FlashAttention-2, memory-efficient) at B in ATT_BATCHES     (~150 s)
#   conformance  euler conformance for triton:ordered and triton:flash (attention, every dtype), and
#                the model step against float64 naive with attention=triton:ordered in two selections
#                and with attention=triton,matmul=cupy_raw, side by side                    (~90 s)
#
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh attention:330")
#
# Comes back: $OUT/attention.tar.gz = attention/{tiles.txt, tiles/attention.json, tiles/winner.json,
# conformance-*.txt, log.txt}. The summary (the check lines that failed, the timing table, the
# conformance verdicts) is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/attention-out}; D=$OUT/attention; mkdir -p "$D"
export PYTHONUNBUFFERED=1 EULER_GIT_SHA=${GIT_SHA:-}
PY=${PY:-python3}
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$D/log.txt"; }

log "tiles: ordered candidates, B=${ATT_BATCHES:-16,32,64}, ${ATT_REPEATS:-10} backward calls a check"
timeout "${ATT_TILES_T:-200}" "$PY" bench/tune/attention_tiles.py --ordered --batches "${ATT_BATCHES:-16,32,64}" \
  --repeats "${ATT_REPEATS:-10}" --out "$D/tiles" > "$D/tiles.txt" 2>&1
echo "tiles exit $?" | tee -a "$D/log.txt"

log "conformance: attention (ordered, flash) and the model step, side by side"
pids=()
for v in ordered flash; do
  timeout 150 euler conformance --backend "triton:$v" --op attention --quiet > "$D/conformance-attention-$v.txt" 2>&1 & pids+=($!)
done
for sel in "triton,attention=triton:ordered" "attention=triton:ordered,matmul=cupy_raw" "attention=triton,matmul=cupy_raw"; do
  timeout 150 euler conformance --backend "$sel" --check model_step --quiet > "$D/conformance-model-${sel//[=:,]/_}.txt" 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

log "done"
{
  echo "== failed checks (tiles.txt)"; grep -E "^check .* FAIL" "$D/tiles.txt" | head -20
  echo "== timings"; grep -E "^\| " "$D/tiles.txt"
  for f in "$D"/conformance-*.txt; do printf "%-70s %s\n" "$(basename "$f" .txt)" "$(grep -E "passed|failed" "$f" | tail -1)"; done
} 2>&1 | tee -a "$D/log.txt"
tar czf "$OUT/attention.tar.gz" -C "$OUT" attention
