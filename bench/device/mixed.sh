#!/usr/bin/env bash
# Mixed precision and CUDA-graph safety of the triton kernels, on the H200 (issue 12), in ~80-135 s.
#
# What it checks (one GPU, 16 cores; the first two stages side by side):
#   conformance  euler conformance --backend triton --op OP --dtype bfloat16 --dtype float16, one
#                process per op (9): every case check with float32 parameter-gradient buffers (the
#                mixed mode), a float32 activation buffer refused, reject, ...   (~30-60 s each, cap 100)
#   capture      bench/device/mixed_capture.py --part ops: each op's forward + backward (matmul at all
#                five GPT-2 linear shapes; adamw's mixed update; sumsq) at B=8, T=1024, bf16, captured
#                through euler_core.graph.CapturedGraph (its stream, a private memory pool), replayed
#                into NaN-poisoned buffers and compared bit for bit with an eager call, then again after
#                new values are written into the same inputs; eager vs replay ms (rough: timed beside
#                the conformance processes)                                              (~40-80 s, cap 100)
#   sort         mixed_capture.py --part sort, alone on the GPU afterwards: the embedding backward's
#                radix sort at N = 65536 / 131072 (eager and replayed) beside cupy.argsort, which it
#                replaced, and the whole embedding backward on uniform and Zipf ids     (~15 s, cap 30)
# Run from the repo root (no GPT-2 ranks needed), alone or as a stage of bench/device/round.sh:
#   run(command="bash bench/device/mixed.sh", timeout_s=300)
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh mixed:150", carry=[".h200"])
#   DRY=1 bash bench/device/mixed.sh      # a CPU machine: the capture script's logic under the
#                                         # interpreter, and the interpreted kernels' conformance (float16)
# What comes back: ONE file, $OUT/mixed.tar.gz (mixed/log.txt: environment and summary;
# mixed/conformance-OP.txt; mixed/capture.txt, capture.json, sort.txt, sort.json). The summary is
# printed last: per op "N passed, N failed", the capture table (graph-safe / capture failed /
# replay differs, with the op and the error), the sort's times.
set -uo pipefail
OUT=${OUT:-/tmp/mixed-out}
DIR=$OUT/mixed; mkdir -p "$DIR"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$DIR/log.txt"; }
OPS="embedding layernorm matmul attention gelu residual crossentropy adamw sumsq"

log "env"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  python3 -c "import sys, numpy, cupy, triton; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'triton', triton.__version__)" 2>&1
} | tee -a "$DIR/log.txt"

if [[ -n ${DRY:-} ]]; then
  PY=${PY:-.venv/bin/python}
  log "dry run (CPU): capture script under the interpreter; conformance of the interpreted kernels, float16"
  timeout 120 $PY bench/device/mixed_capture.py --dry --out "$DIR/capture.json" > "$DIR/capture.txt" 2>&1 &
  timeout 120 $PY -m pytest -q tests/test_triton_interpreter.py -k "float16 and (embedding or layernorm or matmul)" \
    > "$DIR/conformance-interpreted.txt" 2>&1 &
  wait
else
  command -v euler > /dev/null ||  # bench/device/round.sh installs the checkout already
    python3 -m pip install -q --no-deps --no-build-isolation -e . >> "$DIR/log.txt" 2>&1 || log "pip install failed"
  log "conformance (one process per op, bf16 + fp16) and capture (one process), side by side"
  for op in $OPS; do
    timeout 100 euler conformance --backend triton --op $op --dtype bfloat16 --dtype float16 --quiet \
      > "$DIR/conformance-$op.txt" 2>&1 &
  done
  timeout 100 python3 bench/device/mixed_capture.py --part ops --out "$DIR/capture.json" > "$DIR/capture.txt" 2>&1 &
  wait
  log "embedding sort timing (alone on the GPU)"
  timeout 30 python3 bench/device/mixed_capture.py --part sort --out "$DIR/sort.json" > "$DIR/sort.txt" 2>&1
fi
log "done"

{
  echo; echo "## conformance (bf16 + fp16, float32 parameter gradients)"
  for f in "$DIR"/conformance-*.txt; do
    printf "%-28s %s\n" "$(basename "$f" .txt)" "$(grep -E "passed, .* failed|[0-9]+ (passed|failed)" "$f" | tail -1)"
  done
  grep -h -A3 "^FAILED" "$DIR"/conformance-*.txt | head -40
  echo; echo "## capture (bf16, B=8, T=1024): graph replay vs eager, bit for bit (ms timed beside conformance: rough)"
  sed -n '/^case /,$p' "$DIR/capture.txt"
  grep -E "Error|Traceback" "$DIR/capture.txt" | head -5
  if [[ -f $DIR/sort.txt ]]; then
    echo; echo "## embedding backward: radix sort vs cupy.argsort (ms), whole backward, uniform / Zipf ids"
    grep "^embedding sort" "$DIR/sort.txt" | tail -4; grep -E "Error|Traceback" "$DIR/sort.txt" | head -5
  fi
} | tee -a "$DIR/log.txt"
tar czf "$OUT/mixed.tar.gz" -C "$OUT" mixed && rm -rf "$DIR"
