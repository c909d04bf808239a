#!/usr/bin/env bash
# A few cupy_raw ops on the H200, checked and timed in one stage (the whole backend is cupy_raw.sh's):
#   conformance  euler conformance --backend cupy_raw --op <op> for each of CR_OPS, side by side, and the
#                model step with --backend cupy_raw                                      (cap 150 s)
#   sanitize     compute-sanitizer memcheck and racecheck on bench/device/cupy_raw_ops.py sanitize (beside them)
#   capture      cupy_raw_ops.py sanitize capture (results, and each op captured in a CUDA graph)
#   bench        euler bench ops --backend torch,triton,cupy_raw --baseline torch --ops CR_OPS at gpt2 and
#                gpt2-b32, bf16 (the at-shape check runs before each timing)             (cap 170 s)
#   tune         CR_TUNE (optional): a bench/tune/ script (with its arguments), run with --out tune/
#                (cap CR_TUNE_CAP seconds, default 150)
# CR_OPS: space-separated (default "gelu layernorm adamw"); CR_BENCH=0 leaves the bench out (a fused
# op such as crossentropy_onepass has no `euler bench ops` shapes: bench/tune/ times those).
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh cupy_ops:420")
# Comes back as $OUT/cupy_ops.tar.gz: cupy_ops/{conformance-*.txt, memcheck.txt, racecheck.txt, capture.txt,
# bench/, bench_summary.md, tune/, tune.txt, log.txt}.
set -uo pipefail
OUT=${OUT:-/tmp/cupy_ops-out}; D=$OUT/cupy_ops; mkdir -p "$D"
export PYTHONUNBUFFERED=1
OPS=${CR_OPS:-gelu layernorm adamw}
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$D/log.txt"; }
log "conformance, memcheck and racecheck: $OPS"
pids=()
for op in $OPS; do
  timeout 150 euler conformance --backend cupy_raw --op "$op" --quiet > "$D/conformance-$op.txt" 2>&1 & pids+=($!)
done
timeout 150 euler conformance --backend cupy_raw --check model_step --quiet > "$D/conformance-model.txt" 2>&1 & pids+=($!)
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  timeout 150 "$SAN" --tool $tool --error-exitcode 3 python3 bench/device/cupy_raw_ops.py sanitize > "$D/$tool.txt" 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for f in "$D"/conformance-*.txt; do echo "$(basename "$f"): $(grep -E '[0-9]+ passed' "$f" | tail -1)" | tee -a "$D/log.txt"; done
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$D/memcheck.txt" "$D/racecheck.txt" | tee -a "$D/log.txt"
log "capture"
timeout 60 python3 bench/device/cupy_raw_ops.py sanitize capture > "$D/capture.txt" 2>&1; tail -1 "$D/capture.txt" | tee -a "$D/log.txt"
if [[ ${CR_BENCH:-1} != 0 ]]; then
log "bench"
timeout 170 euler bench ops --backend torch,triton,cupy_raw --baseline torch --ops "${OPS// /,}" --shapes gpt2,gpt2-b32 \
  --dtype bfloat16 --min-time 0.2 --no-cache --no-conformance --out "$D/bench" > "$D/bench-log.txt" 2>&1
echo "bench exit $?" | tee -a "$D/log.txt"
euler bench report "$D/bench" --out /tmp/cupy_ops-report --no-plots > /dev/null 2>&1 \
  && sed -n '/^## Speedup summary/,$p' /tmp/cupy_ops-report/report.md > "$D/bench_summary.md"
grep -E "of roofline" "$D/bench-log.txt" | grep -E "cupy_raw|triton" | tee -a "$D/log.txt" | cut -c1-150
fi
if [[ -n ${CR_TUNE:-} ]]; then
log "tune: $CR_TUNE"
timeout "${CR_TUNE_CAP:-150}" python3 $CR_TUNE --out "$D/tune" > "$D/tune.txt" 2>&1
echo "tune exit $?" | tee -a "$D/log.txt"
tail -30 "$D/tune.txt"
fi
tar czf "$OUT/cupy_ops.tar.gz" -C "$OUT" cupy_ops && rm -rf "$D"
