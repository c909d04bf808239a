#!/usr/bin/env bash
# Issue 15's check that taking the tuning switches out of the triton kernels (one config table per
# kernel; tests/test_triton_launch_configs.py shows every launch at GPT-2's shapes unchanged on the
# CPU) made nothing slower on the H200, from the repo root, in about 260 s (at most 270):
#   as a round stage:   run(command="GIT_SHA=<sha> bash bench/device/round.sh i15:280", timeout_s=300)
#   on the CPU first:   DRY=1 PYTHON=.venv/bin/python bash bench/device/i15.sh
#   narrower:           BENCH_CAP=180 STAGE_CAP=205 (the bench's cap; the conformance gets what is left of the stage's)
#
#   bench        euler bench ops --backend torch,triton --baseline torch at the committed triton
#                records' shapes and settings (reports/triton-h200/bench/{main,attention,
#                layernorm-matmul}/run.json: --shapes gpt2,gpt2-b32 (B*T = 16384, 32768) --dtype
#                bfloat16 --min-time 0.2 --no-cache; torch listed first, as there: it must be
#                imported before Triton), the ops those records hold; no conformance pass inside
#                (the stage below runs it); the committed records took ~180 s of measuring in three
#                runs; records are written as they are measured, so a run cut by the cap still
#                compares what it has; DRY: numba beside naive at the small shapes, float32, --quick
#                                                                                 (~190 s, cap 210)
#   compare      bench/device/compare_bench.py: each triton median now against the committed one
#                (now / committed, > 1 slower), beside the same ratio of its torch baseline timed in
#                both runs (the card's drift); `slower` where a ratio is past 3% and past its
#                baseline's; DRY: against reports/bench-cpu                              (~1 s)
#   conformance  euler conformance --backend triton for the ops whose configuration code changed
#                (matmul, matmul_gelu, classifier_crossentropy, layernorm, layernorm_residual,
#                attention, crossentropy): one process per op, side by side, in whatever time the
#                bench left (~60 s; an op cut short says so; fused.sh and bench/triton_h200.sh run the
#                whole suite); DRY: numba, three ops
#
# What comes back: ONE file, $OUT/i15.tar.gz, holding i15/log.txt (everything printed),
# i15/bench/ (records.jsonl, run.json), i15/compare.txt and i15/conformance/<op>.txt. stdout ends
# with the comparison table (one line per op and shape: fwd / bwd, now us, committed us, ratio,
# the baseline's ratio), its summary line, and one line of conformance counts.
set -uo pipefail
OUT=${OUT:-/tmp/i15-out}
DIR="$OUT/i15"
mkdir -p "$DIR/conformance"
PY=${PYTHON:-python3}
EULER="$PY -m euler_core.cli"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$DIR/log.txt"; }
start=$(date +%s)

OPS=embedding,layernorm,matmul,attention,gelu,residual,crossentropy,adamw   # the committed records' ops
if [[ -n ${DRY:-} ]]; then
  BACKENDS=naive,numba; BASELINE=naive; VARIANTS=numba; SHAPES=small; DTYPE=float32; TIMING=--quick
  COMMITTED=reports/bench-cpu; CONF_BACKEND=numba; CONF_OPS="gelu residual layernorm"
else
  BACKENDS=torch,triton; BASELINE=torch; VARIANTS=triton; SHAPES=gpt2,gpt2-b32; DTYPE=bfloat16
  TIMING="--min-time 0.2"
  COMMITTED="reports/triton-h200/bench/main reports/triton-h200/bench/attention reports/triton-h200/bench/layernorm-matmul"
  CONF_BACKEND=triton; CONF_OPS="matmul matmul_gelu classifier_crossentropy layernorm layernorm_residual attention crossentropy"
fi

log "env (git ${GIT_SHA:-unknown}${DRY:+, DRY})"
{
  if [[ -z ${DRY:-} ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    $PY -c "import cupy, triton, torch; print('cupy', cupy.__version__, 'triton', triton.__version__, 'torch', torch.__version__)"
  fi
} 2>&1 | tee -a "$DIR/log.txt"
if [[ -z ${DRY:-} ]] && ! command -v euler > /dev/null; then  # bench/device/round.sh installs the checkout already
  timeout 40 $PY -m pip install -q --no-deps --no-build-isolation -e . -e bench/euler-torch-reference \
    >> "$DIR/log.txt" 2>&1 || log "pip install failed"
fi

log "bench: $BACKENDS (baseline $BASELINE), ops $OPS, shapes $SHAPES, $DTYPE"
timeout --kill-after=5 ${BENCH_CAP:-210} $EULER bench ops --backend $BACKENDS --baseline $BASELINE --ops $OPS --shapes $SHAPES \
  --dtype $DTYPE $TIMING --no-conformance --no-cache --out "$DIR/bench" >> "$DIR/log.txt" 2>&1 \
  || log "bench exited with status $? (the records measured so far are compared)"
tail -3 "$DIR/log.txt"

log "compare: $VARIANTS now against $COMMITTED"
$PY bench/device/compare_bench.py "$DIR/bench" --committed $COMMITTED --variants $VARIANTS > "$DIR/compare.txt" 2>&1 \
  || log "compare: nothing compared (see compare.txt)"
tee -a "$DIR/log.txt" < "$DIR/compare.txt"

left=$(( ${STAGE_CAP:-268} - ($(date +%s) - start) ))  # STAGE_CAP: the stage's own cap, less the packing
log "conformance: $CONF_BACKEND, $(echo $CONF_OPS | wc -w) ops, ${left}s"
if (( left > 10 )); then
  for op in $CONF_OPS; do
    timeout $left $EULER conformance --backend $CONF_BACKEND --op $op --quiet > "$DIR/conformance/$op.txt" 2>&1 &
  done
  wait
fi
summary=$(for f in "$DIR"/conformance/*.txt; do
  [[ -e $f ]] || continue
  line=$(grep -oE '[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$f" | tail -1)
  echo "$(basename "$f" .txt): ${line:-no result (timed out or crashed)}"
done)
echo "$summary" > "$DIR/conformance-summary.txt"
tee -a "$DIR/log.txt" < "$DIR/conformance-summary.txt" > /dev/null

echo "== comparison (again, for the last lines of the output)"
cat "$DIR/compare.txt"
echo "== conformance: $(echo "$summary" | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
tar czf "$OUT/i15.tar.gz" -C "$OUT" i15 && rm -rf "$DIR"
echo "== the one file back: $OUT/i15.tar.gz ($(( $(date +%s) - start ))s)"
