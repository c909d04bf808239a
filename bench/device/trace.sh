#!/usr/bin/env bash
# Where a replayed training step's GPU time goes, kernel by kernel (bench/device/step_trace.py: CUPTI
# through PyTorch's profiler, as an outside recorder), GPT-2 124M bf16 at TRACE_BS (default 16,64)
# for each selection of TRACE_SELS (default "triton"; space-separated), TRACE_RECOMPUTE=1 for --recompute,
# TRACE_LOOPS=sync,pipelined (step_trace.py --loops: how the replayed steps are queued; default sync);
# then, for each name of TRACE_VARIANTS (bench/tune/matmul_step_variants.py), one more process with
# those triton matmul configs (the first selection only; TRACE_MAIN=0 runs only these). About 25 s a batch size after the first
# Triton compile (~25 s, less with the kernel cache a train stage left).
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh trace:120", carry=[".h200"])
# Comes back as $OUT/trace.tar.gz: trace/{log.txt, step-<n>-B<B>[-<variant>].{md,json}, trace-*.json.gz}
# (n: the selection's place in TRACE_SELS).
set -uo pipefail
OUT=${OUT:-/tmp/trace-out}; D=$OUT/trace; mkdir -p "$D"
export PYTHONUNBUFFERED=1
SELS=(); for sel in ${TRACE_SELS:-triton}; do SELS+=(--backend "$sel"); done
[[ ${TRACE_MAIN:-1} != 0 ]] && timeout ${TRACE_T:-110} python3 bench/device/step_trace.py --out "$D" --batch-sizes "${TRACE_BS:-16,64}" \
  "${SELS[@]}" ${TRACE_RECOMPUTE:+--recompute} --loops "${TRACE_LOOPS:-sync}" 2>&1 | tee "$D/log.txt" | tail -40
for variant in ${TRACE_VARIANTS:-}; do
  timeout ${TRACE_VT:-70} python3 bench/device/step_trace.py --out "$D" --batch-sizes "${TRACE_BS:-16,64}" \
    "${SELS[@]:0:2}" ${TRACE_RECOMPUTE:+--recompute} --matmul-variant "$variant" 2>&1 | tee -a "$D/log.txt" | head -8
done
tar czf "$OUT/trace.tar.gz" -C "$OUT" trace && rm -rf "$D"
