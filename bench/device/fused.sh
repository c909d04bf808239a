#!/usr/bin/env bash
# The fused ops of issue 12 (layernorm_residual, matmul_gelu, classifier_crossentropy) on the H200,
# triton backend, from the repo root, in about 75 s (at most 185):
#   alone:              run(command="bash bench/device/fused.sh", timeout_s=200)
#   as a round stage:   run(command="GIT_SHA=<sha> bash bench/device/round.sh fused:190", carry=[".h200"])
#   on the CPU first:   SMOKE=1 PYTHON=.venv/bin/python bash bench/device/fused.sh
#
#   install      pip install -e . (no deps), unless bench/device/round.sh installed it   (~5 s, cap 40)
#   conformance  euler conformance --backend triton --op OP --dtype DT for the three ops in float32,
#                float16 and bfloat16: nine processes side by side (each compiles its own kernels);
#                SMOKE: the naive backend                                                 (~25 s, cap 55)
#   bench        bench/device/fused_bench.py: at N = 16384 and 32768 rows (B*T), C = 768, Vp = 50304,
#                bf16 activations and float32 parameter gradients: each fused op checked against its
#                unfused composition (both triton; the classifier's fused and unfused results each
#                against the composition in float64 on the GPU), then timed as CUDA-graph replays (10
#                calls in one graph of euler_core.graph.CapturedGraph, median of 5 replays), with its
#                memory (arena buffers, pool bytes held from forward to backward, pool peak); at
#                N = 16384 also matmul_gelu under five other launch configurations and the
#                classifier at chunks of 2048, 4096 and 16384 rows (8192, the default, is the
#                main row); SMOKE: the interpreter at tiny shapes                          (~45 s, cap 90)
#
# What comes back: ONE file, $OUT/fused.tar.gz, holding fused/log.txt (everything printed),
# fused/conformance/<op>-<dtype>.txt (the tables) and fused/results.json (one record per
# measurement). stdout ends with the bench's summary table, the classifier's two verdicts against
# float64, then the conformance counts again:
#   op, N, what (forward / backward / forward+backward / eval forward / chunk size / config), fused
#   ms, unfused ms, speedup (unfused / fused), held MB fused/unfused, total MB (arena + peak), check
#   ("agrees" = fused matches unfused, or for the classifier float64, within 2x the bf16 tolerance;
#   otherwise the first difference), and GRAPH / TIMING notes when a replay differed from the eager
#   run or a capture failed.
set -uo pipefail
OUT=${OUT:-/tmp/fused-out}
DIR="$OUT/fused"
mkdir -p "$DIR/conformance"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$DIR/log.txt"; }

log "env"
{
  if [[ -z ${SMOKE:-} ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    $PY -c "import cupy, triton; print('cupy', cupy.__version__, 'triton', triton.__version__)"
  fi
} 2>&1 | tee -a "$DIR/log.txt"
if [[ -z ${SMOKE:-} ]] && ! command -v euler > /dev/null; then  # bench/device/round.sh installs the checkout already
  timeout 40 $PY -m pip install -q --no-deps --no-build-isolation -e . >> "$DIR/log.txt" 2>&1 || log "pip install failed"
fi

OPS="layernorm_residual matmul_gelu classifier_crossentropy"
log "conformance: $OPS"
backend=triton; [[ -n ${SMOKE:-} ]] && backend=naive
for op in $OPS; do
  for dt in float32 float16 bfloat16; do
    [[ -n ${SMOKE:-} && $dt != float32 ]] && continue
    timeout 55 $PY -m conformance --backend $backend --op $op --dtype $dt --quiet \
      > "$DIR/conformance/$op-$dt.txt" 2>&1 &
  done
done
wait
for f in "$DIR"/conformance/*.txt; do
  echo "$(basename "$f" .txt): $(grep -E 'passed, .* failed' "$f" || echo 'no result (timed out or crashed: see the file)')"
done > "$DIR/conformance-summary.txt"
tee -a "$DIR/log.txt" < "$DIR/conformance-summary.txt"

log "bench: fused vs unfused"
OUT_DIR="$DIR" timeout 90 $PY bench/device/fused_bench.py 2>&1 | tee -a "$DIR/log.txt" | grep -v '^{' \
  || log "bench exited with an error (see log.txt)"

echo "== conformance (again, for the last lines of the output)"
cat "$DIR/conformance-summary.txt"
tar czf "$OUT/fused.tar.gz" -C "$OUT" fused && rm -rf "$DIR"
echo "== the one file back: $OUT/fused.tar.gz"
