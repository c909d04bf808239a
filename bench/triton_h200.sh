#!/usr/bin/env bash
# The triton backend on the H200, in one call of the device tool (no network there, < 600 s):
#   conformance  euler conformance --backend triton: every variant, float32, float16, bfloat16, and the
#                model step; one process per op, side by side                                     (cap 150)
#   bench        euler bench ops --backend torch,triton --baseline torch: our kernels beside PyTorch's
#                (bench/euler-torch-reference: cuBLAS, SDPA cuDNN/flash/efficient, F.layer_norm, F.gelu,
#                F.cross_entropy, fused AdamW, embedding) at GPT-2 124M's shapes, B*T = 16384 (gpt2) and
#                32768 (gpt2-b32), bf16, in one process on one card (torch listed first: it is
#                imported before Triton, see euler_torch_reference/_tensors.py)                    (~150 s, cap 200)
#   train        euler train --backend triton: the small preset beside naive (same seed, 30 steps), the
#                124M preset with GPT-2's tokenizer (vocabulary 50257, padded to 50304) on the embedded
#                corpus (the Python standard library's source), B=16, T=1024, 50 steps
#                (step 0 compiles for ~25 s; then ~0.67 s a step at B=16; the last step writes a 1.5 GB
#                checkpoint and samples a few tokens)                                             (~100 s, caps 30+30+130)
#   profile      euler bench step: 8 steps of the same 124M run timed op by op (where the time goes) (~35 s, cap 70)
#
# GPT-2's BPE ranks ship with the package: nothing needs carrying.
#   run(command="GIT_SHA=$(git rev-parse HEAD) bash bench/triton_h200.sh", timeout_s=600)
# (write the sha into the command: there is no .git on the device). Stages can be named:
#   bash bench/triton_h200.sh conformance bench train profile   (the default: all four)
#   SMOKE=1 bash bench/triton_h200.sh bench train            (small shapes, 3 steps: a check of the path)
#
# What comes back in $OUT (8 files at most): log.txt (environment and everything printed), conformance.txt,
# bench/records.jsonl and bench/run.json (render them here: euler bench report reports/triton-h200/bench
# --out reports/triton-h200/bench), train_small_triton.jsonl, train_small_naive.jsonl, train_gpt2.jsonl
# (metrics per step), step_profile.json.
set -uo pipefail
OUT=${OUT:-/tmp/triton-h200}; mkdir -p "$OUT"
STAGES=${*:-conformance bench train profile}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 EULER_GIT_SHA=${GIT_SHA:-}
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/log.txt"; }
if [[ -n ${SMOKE:-} ]]; then SHAPES=small SMALL_STEPS=3 GPT2_STEPS=3 PROFILE_STEPS=3 SKIP=1
else SHAPES=gpt2,gpt2-b32 SMALL_STEPS=30 GPT2_STEPS=50 PROFILE_STEPS=8 SKIP=2; fi

log "env"
{
  echo "git_sha: ${GIT_SHA:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  python3 -c "import sys, numpy, cupy, triton, ml_dtypes; print('python', sys.version.split()[0]); print('numpy', numpy.__version__); print('cupy', cupy.__version__); print('triton', triton.__version__); print('ml_dtypes', ml_dtypes.__version__); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion(), 'driver', cupy.cuda.runtime.driverGetVersion())"
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
} 2>&1 | tee -a "$OUT/log.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . -e bench/euler-torch-reference >> "$OUT/log.txt" 2>&1 \
  || log "pip install failed"
euler backends 2>&1 | grep -E "^(triton|torch)" | tee -a "$OUT/log.txt"

if [[ " $STAGES " == *" conformance "* ]]; then
  # one process per op, plus the model row, side by side (Triton compiles each kernel once per process:
  # one process for the whole suite took over 120 s)
  log "conformance (one process per op, and the model step)"
  mkdir -p /tmp/conf
  for op in embedding layernorm matmul attention gelu residual crossentropy adamw; do
    timeout 150 euler conformance --backend triton --op $op --quiet > /tmp/conf/$op.txt 2>&1 &
  done
  timeout 150 euler conformance --backend triton --check model_step --quiet > /tmp/conf/model.txt 2>&1 &
  wait
  for f in /tmp/conf/*.txt; do echo "## $(basename $f .txt)"; cat $f; done > "$OUT/conformance.txt"
  grep -E "passed, .* failed" "$OUT/conformance.txt" | tee -a "$OUT/log.txt"
fi

if [[ " $STAGES " == *" bench "* ]]; then
  log "bench: triton beside torch, $SHAPES, bfloat16"
  timeout 200 euler bench ops --backend torch,triton --baseline torch --shapes $SHAPES \
    --dtype bfloat16 --min-time 0.2 --no-cache --out "$OUT/bench" 2>&1 | tee -a "$OUT/log.txt"
  euler bench report "$OUT/bench" --out /tmp/bench-report --no-plots > /dev/null 2>&1 \
    && sed -n '/^## Speedup summary/,$p' /tmp/bench-report/report.md >> "$OUT/log.txt"
fi

if [[ " $STAGES " == *" train "* ]]; then
  common="--eval-batches 4 --checkpoint-every 0 --sample-tokens 8 --no-progress --seed 1"
  for b in triton naive; do
    log "train small $b"
    timeout 30 euler train --backend $b --preset small --tokenizer bytes --steps $SMALL_STEPS --eval-every 1000 $common \
      --out /tmp/train_small_$b 2>&1 | tail -3 | tee -a "$OUT/log.txt"
    cp /tmp/train_small_$b/metrics.jsonl "$OUT/train_small_$b.jsonl" 2>/dev/null
  done
  gpt2="--backend triton --preset gpt2 --tokenizer gpt2 --batch-size 16 --seq-len 1024 --lr 6e-4 --warmup 10"
  log "train gpt2 (124M, GPT-2 tokenizer) triton"
  timeout 130 euler train $gpt2 --steps $GPT2_STEPS --eval-every 25 $common --out /tmp/train_gpt2 2>&1 \
    | grep -v "^step" | tail -8 | tee -a "$OUT/log.txt"
  cp /tmp/train_gpt2/metrics.jsonl "$OUT/train_gpt2.jsonl" 2>/dev/null
fi

if [[ " $STAGES " == *" profile "* ]]; then
  log "step profile: gpt2 (124M) triton, op by op"
  timeout 70 euler bench step --backend triton --preset gpt2 --tokenizer gpt2 --batch-size 16 --seq-len 1024 \
    --lr 6e-4 --warmup 10 --steps $PROFILE_STEPS --skip-steps $SKIP --eval-every 0 --eval-batches 4 \
    --checkpoint-every 0 --sample-tokens 8 --seed 1 --out /tmp/step_gpt2 --profile-out "$OUT/step_profile.json" \
    > /tmp/step.log 2>&1; echo "exit $?" >> /tmp/step.log
  tail -40 /tmp/step.log | tee -a "$OUT/log.txt"
fi
log "done"
