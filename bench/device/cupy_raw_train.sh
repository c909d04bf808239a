#!/usr/bin/env bash
# GPT-2 124M trained with the cupy_raw backend on the H200 (issue 13's training rows), one stage of
# the round driver. Run from the repository root:
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh cupy_raw_train:280", carry=[".h200"])
#
#   model  `euler conformance --check model_step` with each selection (loss and every gradient against
#          float64 naive, float32/bfloat16/float16)                                        (~10 s each, cap 60)
#   loss   `euler train --preset gpt2 --tokenizer gpt2` on .h200/pydocs (Python's documentation as
#          GPT-2 tokens, bench/device/train_data.sh), B=16, T=1024, 60 steps, the validation loss every
#          20: with --backend cupy_raw, then --backend attention=triton,matmul=cupy_raw    (~40 s each, cap 90)
#   bench  `euler bench train` at B=16: triton (the default), cupy_raw, and
#          attention=triton,matmul=cupy_raw side by side, beside torch.compile            (~120 s, cap 150)
# SELECTIONS, BENCH_SELECTIONS (space-separated; none: no bench) and REFS ("" for none) narrow a re-run.
# DRY=1 runs the same on the CPU with naive at the micro preset (PY=.venv/bin/python DRY=1 OUT=/tmp/x bash ...).
#
# Comes back: ONE file, $OUT/cupy_raw_train.tar.gz = cupy_raw_train/{log.txt, model-*.txt, loss-*.log, bench/{records.jsonl,
# run.json, train.md}}. The summary printed last: the validation losses and the throughput table.
set -uo pipefail
OUT=${OUT:-/tmp/cupy_raw_train-out}; D=$OUT/cupy_raw_train; mkdir -p "$D"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 EULER_GIT_SHA=${GIT_SHA:-}
PY=${PY:-python3}
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$D/log.txt"; }

if [[ -n ${DRY:-} ]]; then
  SELECTIONS=(naive numba) BENCH=(--backend naive --backend numba) PRESET=micro
  DATA=(--tokenizer bytes) B=2 T=64 STEPS=6 EVERY=3 BS=2 REFS=""
else
  read -ra SELECTIONS <<< "${SELECTIONS:-cupy_raw attention=triton,matmul=cupy_raw}"   # SELECTIONS="..." picks
  BENCH=(); for sel in ${BENCH_SELECTIONS:-triton cupy_raw attention=triton,matmul=cupy_raw}; do BENCH+=(--backend "$sel"); done
  PRESET=gpt2
  DATA=(--train-data ".h200/pydocs/pydocs_train_*.bin" --val-data ".h200/pydocs/pydocs_val_*.bin" --tokenizer gpt2)
  B=16 T=1024 STEPS=60 EVERY=20 BS=16 REFS=${REFS-compile}
fi

for sel in "${SELECTIONS[@]}"; do
  name=${sel//[=,]/-}
  log "conformance: the model step with --backend $sel against float64 naive, every dtype"
  timeout 60 "$PY" -m euler_core.cli conformance --backend "$sel" --check model_step > "$D/model-$name.txt" 2>&1
  tail -4 "$D/model-$name.txt" | tee -a "$D/log.txt"
  log "loss: --backend $sel, $PRESET, B=$B T=$T, $STEPS steps"
  timeout 90 "$PY" -m euler_core.cli train --backend "$sel" --preset "$PRESET" "${DATA[@]}" --batch-size $B \
    --seq-len $T --steps $STEPS --warmup 10 --lr 6e-4 --eval-every $EVERY --eval-batches 4 --checkpoint-every 0 \
    --sample-tokens 32 --no-progress --out "$D/run-$name" > "$D/loss-$name.log" 2>&1
  echo "exit $?" >> "$D/loss-$name.log"
  grep -iE "val|finished|error|exit" "$D/loss-$name.log" | tail -8 | tee -a "$D/log.txt"
  rm -rf "$D/run-$name"   # the checkpoint is not worth a file of the 8 that come back
done

if [[ ${BENCH_SELECTIONS:-} != none ]]; then
  log "bench: ${BENCH[*]} at B=$BS${REFS:+, beside torch $REFS}"
  timeout 150 "$PY" -m euler_core.cli bench train "${BENCH[@]}" --preset "$PRESET" --batch-sizes "$BS" --warmup 3 \
    --steps 10 --no-cold --peak-size small ${REFS:+--reference $REFS} --out "$D/bench" >> "$D/log.txt" 2>&1
  echo "bench exit $?" | tee -a "$D/log.txt"
fi

tar czf "$OUT/cupy_raw_train.tar.gz" -C "$OUT" cupy_raw_train && rm -rf "$D"
echo "=================== summary"
S=$(mktemp -d); tar xzf "$OUT/cupy_raw_train.tar.gz" -C "$S"
for f in "$S"/cupy_raw_train/loss-*.log; do echo "-- $(basename "$f")"; grep -iE "val loss|finished|Error" "$f" | tail -5; done
sed -n '/^## Throughput/,/^pool \/ reserved/p' "$S/cupy_raw_train/bench/train.md" 2>/dev/null | grep '^|'
rm -rf "$S"
