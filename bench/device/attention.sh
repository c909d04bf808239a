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
#   ablation     bench/tune/attention_ordered_ablation.py: the ordered backward with one mechanism
#                removed at a time (the wait, the publish, the atomics, ...), timed beside both
#                backwards at B in ATT_ABLATION_BATCHES                                    (~150 s)
#   ncu          Nsight Compute (--set full) on one launch each of the ordered and the flash
#                backward at B=32 (bench/device/attention_launches.py), details pages as text (~80 s)
# ATT_STAGES picks them (default "tiles conformance").
#
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh attention:330")
#   run(command="GIT_SHA=<sha> ATT_STAGES='ablation ncu' bash bench/device/round.sh attention:300")
#
# Comes back: $OUT/attention.tar.gz = attention/{tiles.txt, tiles/attention.json, tiles/winner.json,
# conformance-*.txt, ablation.txt, ncu-*.txt, log.txt}. The summary (the check lines that failed,
# the timing tables, the conformance verdicts, ncu's headline figures) is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/attention-out}; D=$OUT/attention; mkdir -p "$D"
export PYTHONUNBUFFERED=1 EULER_GIT_SHA=${GIT_SHA:-}
PY=${PY:-python3}
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$D/log.txt"; }

STAGES=${ATT_STAGES:-tiles conformance}
has() { [[ " $STAGES " == *" $1 "* ]]; }

if has tiles; then
log "tiles: ordered candidates, B=${ATT_BATCHES:-16,32,64}, ${ATT_REPEATS:-10} backward calls a check"
timeout "${ATT_TILES_T:-200}" "$PY" bench/tune/attention_tiles.py --ordered --batches "${ATT_BATCHES:-16,32,64}" \
  --repeats "${ATT_REPEATS:-10}" --out "$D/tiles" > "$D/tiles.txt" 2>&1
echo "tiles exit $?" | tee -a "$D/log.txt"
fi

if has conformance; then
log "conformance: attention (ordered, flash) and the model step, side by side"
pids=()
for v in ordered flash; do
  timeout 150 euler conformance --backend "triton:$v" --op attention --quiet > "$D/conformance-attention-$v.txt" 2>&1 & pids+=($!)
done
for sel in "triton,attention=triton:ordered" "attention=triton:ordered,matmul=cupy_raw" "attention=triton,matmul=cupy_raw"; do
  timeout 150 euler conformance --backend "$sel" --check model_step --quiet > "$D/conformance-model-${sel//[=:,]/_}.txt" 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
fi

if has ablation; then
  log "ablation: B=${ATT_ABLATION_BATCHES:-16,64}"
  timeout "${ATT_ABLATION_T:-200}" "$PY" bench/tune/attention_ordered_ablation.py --batches "${ATT_ABLATION_BATCHES:-16,64}" \
    > "$D/ablation.txt" 2>&1
  echo "ablation exit $?" | tee -a "$D/log.txt"
fi

if has ncu; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for impl in triton_ordered triton; do
    kernel=$([[ $impl == triton_ordered ]] && echo _attn_backward_ordered || echo '_attn_backward$')
    log "ncu: $impl ($kernel)"
    timeout 120 "$NCU" --clock-control none --set full --import-source no -k "regex:$kernel" --launch-skip 1 \
      --launch-count 1 -f -o "$D/ncu-$impl" "$PY" bench/device/attention_launches.py "$impl" > "$D/ncu-$impl.log" 2>&1
    echo "ncu exit $?" | tee -a "$D/log.txt"
    "$NCU" -i "$D/ncu-$impl.ncu-rep" --page details > "$D/ncu-$impl.txt" 2>&1 && rm -f "$D/ncu-$impl.ncu-rep"
  done
fi

log "done"
{
  echo "== failed checks (tiles.txt)"; grep -E "^check .* FAIL" "$D/tiles.txt" | head -20
  echo "== timings"; grep -E "^\| " "$D/tiles.txt"
  for f in "$D"/conformance-*.txt; do [[ -f $f ]] && printf "%-70s %s\n" "$(basename "$f" .txt)" "$(grep -E "passed|failed" "$f" | tail -1)"; done
  [[ -f $D/ablation.txt ]] && { echo "== ablation"; grep -E "^\| " "$D/ablation.txt"; }
  for f in "$D"/ncu-*.txt; do
    [[ -f $f ]] && { echo "== $(basename "$f")"; grep -E "Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued" "$f" | head -14; }
  done
} 2>&1 | tee -a "$D/log.txt"
tar czf "$OUT/attention.tar.gz" -C "$OUT" attention
