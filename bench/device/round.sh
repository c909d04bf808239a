#!/usr/bin/env bash
# One call of the device tool: install the checkout, print the machine, then run the named stages
# (bench/device/<stage>.sh), each writing $OUT/<stage>.tar.gz, under a time cap of its own.
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh step:240 mixed:150", carry=[".h200"])
# .h200/ (git-ignored) carries what does not travel in the checkout: the pydocs shards (train_data.sh).
# CLOCKS=1: nvidia-smi samples the SM clock, power and the clock-limit reasons every 200 ms through the
# whole call, into $OUT/clocks.tar.gz (clocks.csv; the stages' start times are in round.txt).
# A/B in one call (a second round.sh into $OUT/b after an edit): the first round of a call has run ~1%
# slower than the later ones on H100s (reports/train-h100/1d87fc9/unordered: the same tree 579,404 tokens/s first,
# 585,842 last), so run A, B, A, or judge B by the kernels it changes against those it does not.
# bench/device/ab.sh runs such a call: the tree, then files packed from another revision over it, then the tree.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 EULER_GIT_SHA=${GIT_SHA:-}
mkdir -p "$OUT"
{
  echo "git_sha: ${GIT_SHA:-unknown}  stages: $*"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  python3 -c "import sys, numpy, cupy, triton; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'triton', triton.__version__, 'cuda', cupy.cuda.runtime.runtimeGetVersion(), cupy.cuda.runtime.driverGetVersion())"
} 2>&1 | tee "$OUT/round.txt"
# (NO_INSTALL=1: a later round of the same call, whose editable install already points here: ab.sh's)
[[ -n ${NO_INSTALL:-} ]] || python3 -m pip install -q --no-deps --no-build-isolation -e . -e bench/euler-torch-reference \
  >> "$OUT/round.txt" 2>&1 || echo "pip install failed" | tee -a "$OUT/round.txt"
if [[ -n ${CLOCKS:-} ]]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 200 > "$OUT/clocks.csv" 2>&1 &
  CLOCKS_PID=$!
fi
for spec in "$@"; do
  stage=${spec%%:*}; cap=${spec##*:}; [[ $cap == "$stage" ]] && cap=300
  echo "== $(date -u +%H:%M:%S) $stage (cap ${cap}s)" | tee -a "$OUT/round.txt"
  start=$(date +%s)
  timeout --kill-after=10 "$cap" bash "bench/device/$stage.sh" 2>&1 | tail -40
  echo "== $stage: exit ${PIPESTATUS[0]} after $(( $(date +%s) - start ))s" | tee -a "$OUT/round.txt"
done
if [[ -n ${CLOCKS:-} ]]; then
  kill "$CLOCKS_PID"; tar czf "$OUT/clocks.tar.gz" -C "$OUT" clocks.csv
fi
# only the tarballs and the round's log come back (8 files at most)
find "$OUT" -mindepth 1 -maxdepth 1 ! -name '*.tar.gz' ! -name 'round.txt' -exec rm -rf {} +
ls -la "$OUT"
