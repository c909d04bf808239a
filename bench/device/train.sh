#!/usr/bin/env bash
# `euler bench train` and `euler bench quality` on the H200, in one call of the device tool (issue 12,
# items 5 and 7). Run from the repository root; every stage has a `timeout`, and a stage cut short
# still writes what it measured (SIGTERM is handled as Ctrl-C).
#
#   train    tokens/s, MFU against the bf16 matmul peak measured first, peak memory (CuPy pools,
#            cudaMemGetInfo, nvidia-smi), time to first step with a cold then a warm Triton cache,
#            per-op breakdown of one eager step: ours (`--backend triton`, bfloat16, CUDA graph) at
#            B=16, 32, 64 (T=1024, GPT-2 124M); then the PyTorch reference (bf16 autocast, SDPA, fused
#            AdamW) compiled and eager at the same sizes (compile first: the goal compares with it;
#            if the cap cuts the run, the eager rows at B=64, 32 go first)              (~180 s, cap 185)
#   quality  GPT-2 124M trained by ours and by the reference (eager) from the same initial weights on
#            the same token windows, B=16, T=1024, lr 6e-4 (warmup 30, cosine), up to 300 steps: ours
#            trains for at most 40 s (its kernels already compiled by the train stage: the kernel
#            caches are kept in $KC) and the reference then runs exactly the steps ours finished;
#            both loss curves and the mean relative difference of the losses.
#            Data: .h200/pydocs (Python's documentation as GPT-2 tokens: bench/device/train_data.sh),
#            else the embedded corpus (the stdlib's source) tokenised with GPT-2's BPE  (~90 s, cap 100)
#   memory   (between the two) the least-memory selection, MEM_SEL (triton with the classifier fused)
#            with --recompute, at MEM_BS=32, into bench-recompute/: its nvidia-smi peak against
#            llm.c's 13,947 MiB; MEMORY=0 leaves it out                                 (~50 s, cap 70)
#
# Modes: full (default, about 290 s; give it 330); SMOKE=1: B=4, 2 timed steps, eager reference only,
# 20 quality steps (about 110 s: the first Triton compile, ~25 s, dominates); DRY=1: the same script on the CPU
# with naive at the micro preset, to check its logic here (PY=.venv/bin/python DRY=1 bash bench/device/train.sh).
#
# Carry .h200 (git-ignored): .h200/pydocs/
# (bash bench/device/train_data.sh, about 7 MB). As a stage of the round driver (it installs the checkout
# and prints the machine), or alone (then it installs the checkout itself); the sha goes in the command:
#   run(command="GIT_SHA=$(git rev-parse HEAD) bash bench/device/round.sh train:300", carry=[".h200"])
#   run(command="GIT_SHA=$(git rev-parse HEAD) SMOKE=1 bash bench/device/round.sh train:150", carry=[".h200"])
#
# Comes back: ONE file, $OUT/train.tar.gz = train/{log.txt, bench/{records.jsonl, run.json, train.md,
# train-tokens-per-s.png}, quality/{records.jsonl, run.json, quality.md, quality-loss.png}}. Unpack it
# into reports/train-h200/ here; `euler bench report reports/train-h200/bench --out ...` re-renders.
# The summary printed last: the throughput table, the first-step table, the quality comparison.
set -uo pipefail
OUT=${OUT:-/tmp/train-out}; D=$OUT/train; mkdir -p "$D"
KC=$(mktemp -d /tmp/euler-kernel-caches-XXXX)   # per system: triton/, numba/, cupy/, inductor/ (bench train --kernel-cache)
S=$(mktemp -d); trap 'rm -rf "$KC" "$S"' EXIT    # S: the summary's copy of the reports
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 EULER_GIT_SHA=${GIT_SHA:-}
PY=${PY:-python3}
EXTRA=()
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$D/log.txt"; }

if [[ -n ${DRY:-} ]]; then
  BACKEND=naive PRESET=micro BS=2,4 WARMUP=1 STEPS=2 REFS=${DRY_REFS:-eager} COLD= PEAK=small
  QSTEPS=20 QB=4 QWARM=4 QLR=3e-3 QBUDGET=60 QDATA=(--tokenizer bytes) QT=120 TT=200
elif [[ -n ${SMOKE:-} ]]; then
  BACKEND=triton PRESET=gpt2 BS=4 WARMUP=1 STEPS=2 REFS=eager COLD=--no-cold PEAK=small
  QSTEPS=20 QB=4 QWARM=5 QLR=6e-4 QBUDGET=30 QT=60 TT=110
else
  BACKEND=triton PRESET=gpt2 BS=16,32,64 WARMUP=3 STEPS=10 REFS=compile,eager COLD= PEAK=large
  QSTEPS=300 QB=16 QWARM=30 QLR=6e-4 QBUDGET=40 QT=100 TT=260
  # beside the default selection: every fused op on (the opt-in classifier saves the full logits' memory)
  EXTRA=(--backend "triton,matmul_gelu=triton,classifier_crossentropy=triton")
fi
# a narrower re-run: TRAIN_BS=32 TRAIN_REFS=compile TRAIN_EXTRA="triton,classifier_crossentropy=triton" QUALITY=0
# NO_COLD=1 (no cold-cache first step: one process fewer per system); TRAIN_EXTRA=none: the default selection alone;
# TRAIN_BACKEND=cupy_raw TRAIN_EXTRA=none: cupy_raw alone
BS=${TRAIN_BS:-$BS} REFS=${TRAIN_REFS:-$REFS} BACKEND=${TRAIN_BACKEND:-$BACKEND}   # TRAIN_BACKEND: the first selection
[[ $REFS == none ]] && REFS=   # TRAIN_REFS=none: ours alone
if [[ -n ${NO_COLD:-} ]]; then COLD=--no-cold; fi
PROFILE_FLAG=; [[ ${PROFILE:-1} == 0 ]] && PROFILE_FLAG=--no-profile   # PROFILE=0: no eager per-op breakdown
if [[ -n ${TRAIN_EXTRA:-} ]]; then EXTRA=(); for sel in $TRAIN_EXTRA; do [[ $sel != none ]] && EXTRA+=(--backend "$sel"); done; fi
if [[ -z ${DRY:-} ]]; then
  if compgen -G ".h200/pydocs/pydocs_train_*.bin" > /dev/null; then QDATA=(--data ".h200/pydocs/pydocs_train_*.bin")
  else QDATA=(--tokenizer gpt2); fi   # the embedded corpus, GPT-2's BPE (its ranks ship with the package)
fi

log "env (mode: ${DRY:+dry}${SMOKE:+smoke}$([[ -z ${DRY:-}${SMOKE:-} ]] && echo full))"
{
  echo "git_sha: ${GIT_SHA:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1 | head -3
  "$PY" -c "import sys, numpy; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"
} 2>&1 | tee -a "$D/log.txt"
if ! "$PY" -c "import importlib.metadata as m; m.version('nanoeuler')" 2> /dev/null; then  # round.sh installs it
  "$PY" -m pip install -q --no-deps --no-build-isolation -e . >> "$D/log.txt" 2>&1 || log "pip install failed"
fi

log "train: $BACKEND at B=$BS, references $REFS"
timeout "$TT" "$PY" -m euler_core.cli bench train --backend "$BACKEND" "${EXTRA[@]}" --preset "$PRESET" --batch-sizes "$BS" \
  --warmup "$WARMUP" --steps "$STEPS" $COLD $PROFILE_FLAG --peak-size "$PEAK" --reference "$REFS" --kernel-cache "$KC" --out "$D/bench" 2>&1 \
  | tee -a "$D/log.txt"
echo "train exit ${PIPESTATUS[0]}" | tee -a "$D/log.txt"

# memory: the smallest-memory selection at one batch size (the classifier fused with the loss, the GELU
# recomputed: --recompute), beside llm.c's 13,947 MiB at B=32 (issue 12); MEMORY=0 leaves it out
if [[ ${MEMORY:-1} != 0 && -z ${SMOKE:-} ]]; then
  MEM_BS=${MEM_BS:-32}; MEM_SEL=${MEM_SEL:-$BACKEND,classifier_crossentropy=$BACKEND}
  [[ -n ${DRY:-} ]] && MEM_BS=2 MEM_SEL=$BACKEND
  log "memory: $MEM_SEL --recompute at B=$MEM_BS"
  timeout "${MEM_T:-70}" "$PY" -m euler_core.cli bench train --backend "$MEM_SEL" --recompute --preset "$PRESET" \
    --batch-sizes "$MEM_BS" --warmup 2 --steps 5 --no-cold --no-profile --peak-size small --kernel-cache "$KC" \
    --out "$D/bench-recompute" 2>&1 | tee -a "$D/log.txt"
  echo "memory exit ${PIPESTATUS[0]}" | tee -a "$D/log.txt"
fi


if [[ ${QUALITY:-1} != 0 ]]; then
log "quality: $BACKEND vs torch eager, $PRESET, B=$QB, $QSTEPS steps (ours at most ${QBUDGET}s), ${QDATA[*]}"
timeout "$QT" "$PY" -m euler_core.cli bench quality --backend "$BACKEND" --reference eager --preset "$PRESET" \
  --batch-size "$QB" --steps "$QSTEPS" --warmup "$QWARM" --lr "$QLR" --budget "$QBUDGET" "${QDATA[@]}" \
  --kernel-cache "$KC" --out "$D/quality" 2>&1 | tee -a "$D/log.txt"
echo "quality exit ${PIPESTATUS[0]}" | tee -a "$D/log.txt"
fi

log "done"
tar czf "$OUT/train.tar.gz" -C "$OUT" train && rm -rf "$D"
echo
echo "=================== summary (the full tables: train.tar.gz: train/bench/train.md, train/quality/quality.md)"
tar xzf "$OUT/train.tar.gz" -C "$S" train/bench/train.md train/quality/quality.md 2>/dev/null
sed -n '/^## Throughput/,/^pool \/ reserved/p' "$S/train/bench/train.md" 2>/dev/null | grep '^|'
tar xzf "$OUT/train.tar.gz" -C "$S" train/bench-recompute/train.md 2>/dev/null \
  && sed -n '/^## Throughput/,/^pool \/ reserved/p' "$S/train/bench-recompute/train.md" | grep '^| nanoeuler'
sed -n '/^## Time to first step/,/^## Where/p' "$S/train/bench/train.md" 2>/dev/null | grep '^|'
if [[ -f $S/train/quality/quality.md ]]; then  # QUALITY=0 leaves none (grep's exit 2 was the stage's)
  grep -E '^\| (system|nanoeuler|torch)' "$S/train/quality/quality.md"
fi
