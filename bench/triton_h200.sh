#!/usr/bin/env bash
# The triton backend on the H200, in one call of the device tool (no network there):
#   1. install the project (no deps: the image has numpy, cupy, triton 3.6.0, torch, ml_dtypes)
#   2. euler conformance --backend triton, every variant and dtype (float32, float16, bfloat16)
#   3. bench/triton_h200.py: our kernels and PyTorch's references at GPT-2 124M shapes, bf16
#   4. euler train --backend triton: the small preset beside naive (same seed), and the 124M preset
# Everything lands in $OUT (at most 8 files come back); commit them under reports/triton-h200/.
#   usage: GIT_SHA=<sha> bash bench/triton_h200.sh [stages...]   (stages: conformance bench sweep train)
set -uo pipefail
OUT=${OUT:-/tmp/triton-h200}; mkdir -p "$OUT"
STAGES=${*:-conformance bench sweep train}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/log.txt"; }

log "env"
{
  echo "git_sha: ${GIT_SHA:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  python3 -c "import sys, numpy, cupy, triton, ml_dtypes; print('python', sys.version.split()[0]); print('numpy', numpy.__version__); print('cupy', cupy.__version__); print('triton', triton.__version__); print('ml_dtypes', ml_dtypes.__version__); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion(), 'driver', cupy.cuda.runtime.driverGetVersion())"
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . >> "$OUT/log.txt" 2>&1 || log "pip install failed"
euler backends 2>&1 | grep -E "^triton" | tee -a "$OUT/log.txt"

if [[ " $STAGES " == *" conformance "* ]]; then
  log "conformance"
  timeout 250 euler conformance --backend triton --quiet > "$OUT/conformance.txt" 2>&1; echo "exit $?" >> "$OUT/conformance.txt"
  tail -40 "$OUT/conformance.txt"
fi

if [[ " $STAGES " == *" bench "* ]]; then
  log "bench: triton"
  timeout 130 python3 bench/triton_h200.py --side triton --out /tmp/bench_triton.json 2>&1 | tee -a "$OUT/log.txt"
  log "bench: torch"
  timeout 130 python3 bench/triton_h200.py --side torch --out /tmp/bench_torch.json 2>&1 | tee -a "$OUT/log.txt"
  python3 bench/triton_h200.py --merge /tmp/bench_triton.json /tmp/bench_torch.json --out /tmp/bench.json > /dev/null 2>&1
  cp /tmp/bench.json "$OUT/bench.json"; cat /tmp/bench.md | tee -a "$OUT/log.txt"
fi

if [[ " $STAGES " == *" sweep "* ]]; then
  log "sweep: GEMM tiles"
  timeout 120 python3 bench/triton_h200.py --side sweep --out "$OUT/sweep.json" 2>&1 | tee -a "$OUT/log.txt"
fi

if [[ " $STAGES " == *" train "* ]]; then
  common="--tokenizer bytes --eval-every 1000 --eval-batches 2 --checkpoint-every 0 --sample-tokens 20 --no-progress --seed 1"
  for b in triton naive; do
    log "train small $b"
    timeout 100 euler train --backend $b --preset small --steps 30 $common --out /tmp/train_small_$b 2>&1 | tail -4 | tee -a "$OUT/log.txt"
    cp /tmp/train_small_$b/metrics.jsonl "$OUT/train_small_$b.jsonl" 2>/dev/null
  done
  log "train gpt2 (124M) triton"
  timeout 170 euler train --backend triton --preset gpt2 --batch-size 8 --seq-len 1024 --steps 50 --lr 6e-4 --warmup 10 $common --out /tmp/train_gpt2 2>&1 | tail -6 | tee -a "$OUT/log.txt"
  cp /tmp/train_gpt2/metrics.jsonl "$OUT/train_gpt2.jsonl" 2>/dev/null
fi
log "done"
