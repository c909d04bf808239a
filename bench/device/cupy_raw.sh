#!/usr/bin/env bash
# The cupy_raw backend on the H200, in one call of the device tool (no network there, < 600 s).
#
# Round 1 (the default, ~200 s; run from the repository's root):
#   conformance  euler conformance --backend cupy_raw, one process per op (every variant, float32,
#                float16, bfloat16), and the model step with --backend cupy_raw and with
#                --backend attention=triton,matmul=cupy_raw, all side by side               (cap 170 s)
#   sanitize     compute-sanitizer memcheck and racecheck (side by side with conformance) on
#                bench/device/cupy_raw_ops.py sanitize (every non-matmul kernel once at small awkward
#                shapes, results checked against float64 NumPy) and cupy_raw_matmul.py sanitize (cap 170 s)
#   ops          cupy_raw_ops.py sanitize capture (no sanitizer: the results, and forward+backward of
#                each op captured in a CUDA graph and replayed, bitwise equal to eager), and
#                cupy_raw_matmul.py check capture                                               (cap 90 s)
# Round 2 (STAGES=bench, only once round 1 is clean; ~180 s):
#   bench        euler bench ops --backend torch,triton,cupy_raw --baseline torch at gpt2 and gpt2-b32
#                (B*T = 16384 and 32768), bf16, in one process on one card, then cupy_raw_matmul.py
#                bench (the GEMMs beside cuBLASLt)                                               (cap 260 s)
#
#   run(command="GIT_SHA=<sha> bash bench/device/cupy_raw.sh", timeout_s=600)
#   run(command="GIT_SHA=<sha> STAGES=bench bash bench/device/cupy_raw.sh", timeout_s=600)
# (write the sha into the command: there is no .git on the device). On a machine with no GPU, DRY=1 runs what can run on
# the CPU: the ops plan in the CPU emulator and the matmul plan recorded (a check of this script's
# plumbing and of the Python around the kernels), and prints the GPU commands it would run.
#
# What comes back: ONE file, $OUT/cupy_raw.tar.gz (log.txt with everything printed, conformance/*.txt
# per op, sanitize_{memcheck,racecheck}_{ops,matmul}.txt, ops.txt, matmul.txt, bench/records.jsonl and
# bench/run.json when benched). The summary table is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/cupy_raw-out}
DIR="$OUT/cupy_raw"
mkdir -p "$DIR/conformance"
STAGES=${STAGES:-conformance sanitize ops}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 EULER_GIT_SHA=${GIT_SHA:-}
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$DIR/log.txt"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
PY=${PY:-python3}

if [[ -n ${DRY:-} ]]; then
  log "DRY: CPU only (emulator and recording); the GPU commands are printed, not run"
  timeout 1200 $PY bench/device/cupy_raw_ops.py --emulate sanitize > "$DIR/ops.txt" 2>&1; echo "ops (emulated) rc=$?" | tee -a "$DIR/log.txt"
  tail -1 "$DIR/ops.txt" | tee -a "$DIR/log.txt"
  if [[ -f bench/device/cupy_raw_matmul.py ]]; then
    timeout 300 $PY bench/device/cupy_raw_matmul.py --dry check capture sanitize bench > "$DIR/matmul.txt" 2>&1
    echo "matmul (dry) rc=$?" | tee -a "$DIR/log.txt"; tail -1 "$DIR/matmul.txt" | tee -a "$DIR/log.txt"
  fi
  echo "would run: euler conformance --backend cupy_raw --op <op> (x ops), --check model_step (2 selections),"
  echo "           compute-sanitizer --tool memcheck|racecheck on cupy_raw_ops.py / cupy_raw_matmul.py sanitize,"
  echo "           cupy_raw_ops.py sanitize capture, cupy_raw_matmul.py check capture, and (STAGES=bench) euler bench ops"
  exit 0
fi

log "env"
{
  echo "git_sha: ${GIT_SHA:-unknown}  stages: $STAGES"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  $PY -c "import sys, numpy, cupy, ml_dtypes; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'ml_dtypes', ml_dtypes.__version__, 'cuda runtime', cupy.cuda.runtime.runtimeGetVersion(), 'driver', cupy.cuda.runtime.driverGetVersion())"
} 2>&1 | tee -a "$DIR/log.txt"
$PY -m pip install -q --no-deps --no-build-isolation -e . >> "$DIR/log.txt" 2>&1 || log "pip install -e . failed"
euler backends 2>&1 | grep -E "^cupy_raw" | tee -a "$DIR/log.txt"
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
OPS=$($PY -c "from euler_core.ops import OPS; print(' '.join(o for o in OPS if o != 'attention_cached'))")

# ---- round 1: conformance and the sanitizers side by side, then the plain ops/matmul runs --------
pids=()
if has conformance; then
  log "conformance: one process per op ($OPS), the model step with two selections"
  for op in $OPS; do
    timeout 170 euler conformance --backend cupy_raw --op $op --quiet > "$DIR/conformance/$op.txt" 2>&1 & pids+=($!)
  done
  timeout 170 euler conformance --backend cupy_raw --check model_step --quiet \
    > "$DIR/conformance/model_cupy_raw.txt" 2>&1 & pids+=($!)
  timeout 170 euler conformance --backend attention=triton,matmul=cupy_raw --check model_step --quiet \
    > "$DIR/conformance/model_triton_attention.txt" 2>&1 & pids+=($!)
fi
if has sanitize; then
  if [[ -z $SANITIZER ]]; then
    log "sanitize: compute-sanitizer not found"
  else
    log "sanitize: $SANITIZER memcheck and racecheck"
    for tool in memcheck racecheck; do
      ( timeout 170 "$SANITIZER" --tool $tool --error-exitcode 3 $PY bench/device/cupy_raw_ops.py sanitize \
          > "$DIR/sanitize_${tool}_ops.txt" 2>&1; echo "rc=$?" >> "$DIR/sanitize_${tool}_ops.txt"
        if [[ -f bench/device/cupy_raw_matmul.py ]]; then
          # ---- matmul (E2): the GEMM kernels under the same tool ----
          timeout 120 "$SANITIZER" --tool $tool --error-exitcode 3 $PY bench/device/cupy_raw_matmul.py sanitize \
            > "$DIR/sanitize_${tool}_matmul.txt" 2>&1; echo "rc=$?" >> "$DIR/sanitize_${tool}_matmul.txt"
        fi ) & pids+=($!)
    done
  fi
fi
for p in "${pids[@]}"; do wait $p; done

if has ops; then
  log "ops: cupy_raw_ops.py sanitize capture"
  timeout 90 $PY bench/device/cupy_raw_ops.py sanitize capture > "$DIR/ops.txt" 2>&1; echo "rc=$?" >> "$DIR/ops.txt"
  if [[ -f bench/device/cupy_raw_matmul.py ]]; then
    # ---- matmul (E2): correctness of every GEMM variant, and its CUDA-graph capture ----
    log "matmul: cupy_raw_matmul.py check capture"
    timeout 90 $PY bench/device/cupy_raw_matmul.py check capture > "$DIR/matmul.txt" 2>&1; echo "rc=$?" >> "$DIR/matmul.txt"
  fi
fi

# ---- round 2: benchmarks ------------------------------------------------------------------------
if has bench; then
  log "bench: torch, triton, cupy_raw; gpt2 and gpt2-b32; bfloat16"
  $PY -m pip install -q --no-deps --no-build-isolation -e bench/euler-torch-reference >> "$DIR/log.txt" 2>&1 \
    || log "pip install bench/euler-torch-reference failed"
  # the suite ran in round 1 (the at-shape check still runs before each timing); the bench's own cap
  # leaves the stage time to pack what it measured (a 200 s cap with the suite did not finish both shapes)
  timeout ${BENCH_CAP:-300} euler bench ops --backend torch,triton,cupy_raw --baseline torch --shapes gpt2,gpt2-b32 \
    --dtype bfloat16 --min-time 0.2 --no-cache --no-conformance --out "$DIR/bench" >> "$DIR/log.txt" 2>&1 || log "bench ops failed"
  euler bench report "$DIR/bench" --out /tmp/cupy_raw-bench-report --no-plots > /dev/null 2>&1 \
    && sed -n '/^## Speedup summary/,$p' /tmp/cupy_raw-bench-report/report.md > "$DIR/bench_summary.md"
  if [[ -f bench/device/cupy_raw_matmul.py ]]; then
    # ---- matmul (E2): the GEMMs beside cuBLASLt ----
    timeout 60 $PY bench/device/cupy_raw_matmul.py bench > "$DIR/matmul_bench.txt" 2>&1
  fi
fi

# ---- summary (printed last) ---------------------------------------------------------------------
{
  echo "==================== cupy_raw summary (git ${GIT_SHA:-unknown}) ===================="
  for f in "$DIR"/conformance/*.txt; do
    [[ -f $f ]] || continue
    printf "conformance %-26s %s\n" "$(basename "$f" .txt)" \
      "$(grep -E "[0-9]+ passed" "$f" | tail -1 || true)$(grep -q "Terminated\|Traceback" "$f" && echo ' (crashed or timed out: see file)')"
  done
  for f in "$DIR"/sanitize_*.txt; do
    [[ -f $f ]] || continue
    printf "%-34s %s; %s\n" "$(basename "$f" .txt)" "$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$f" | tail -1)" "$(tail -1 "$f")"
  done
  for f in "$DIR"/ops.txt "$DIR"/matmul.txt; do
    [[ -f $f ]] || continue
    grep -E "^(ops|matmul) [a-z]+: " "$f" | sed "s/^/$(basename "$f" .txt): /"
    grep -E "^FAIL" "$f" | head -20
  done
  [[ -f "$DIR/bench_summary.md" ]] && cat "$DIR/bench_summary.md"
  [[ -f "$DIR/matmul_bench.txt" ]] && tail -25 "$DIR/matmul_bench.txt"
} > "$DIR/summary.txt" 2>&1
cat "$DIR/summary.txt" >> "$DIR/log.txt"
tar czf "$OUT/cupy_raw.tar.gz" -C "$OUT" cupy_raw && rm -rf "$DIR"
tar xzf "$OUT/cupy_raw.tar.gz" -O cupy_raw/summary.txt
