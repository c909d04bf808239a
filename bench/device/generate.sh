#!/usr/bin/env bash
# Generation on the H200 (issue 14), one call of the device tool. What it checks, and how long:
#   check    (in parallel, ~30 s, cap 40; with the part bf16: 110, then 20 for the bf16 test)
#            euler conformance --backend triton --op attention_cached: the split-K flash-decoding
#              kernel against float64 naive, float32/float16/bfloat16, ragged lengths, NaN past them
#            pytest tests/test_generate_gpu.py: greedy tokens cached == uncached == CPU float64,
#              batched == each prompt alone, CUDA graph == Python launches (greedy and sampled),
#              the cache on the GPU
#            FINAL=1 also (the part "bf16"): euler train --backend triton, then the bf16 test on its
#              checkpoint: a bfloat16 model's first 32 greedy tokens == float32's. The model: GPT-2
#              124M trained BF16_STEPS (600) steps at B=16 on .h200/pydocs when it was carried (about
#              3 epochs of Python's docs), else the default 0.9M model for 2000 steps (that one's
#              greedy runs of one repeated token left its top two logits within bf16's rounding:
#              32, 32, 24 of 32 tokens agreed, reports/generate-h200)
#   bench    euler bench generate --backend triton, GPT-2 124M, a 448-token prompt, 64 new tokens,
#            greedy, batch 1 and 64, beside Hugging Face transformers' generate
#              ours and eager Hugging Face (dynamic cache)                     (~45 s, cap 55)
#              compiled Hugging Face alone (static cache + torch.compile
#              reduce-overhead: compiles per batch size, batch 1 first)        (~50 s, cap 55)
#            FINAL=1 also GPT-2 350M (gpt2-medium) beside eager                (~50 s, cap 65)
#            bf16 when the model takes dtype=bfloat16 (main's 16-bit models), float32 otherwise
# Round 1 (default): at most 150 s of caps plus the install; FINAL=1: at most 300 s.
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh generate:170")
#   run(command="GIT_SHA=<sha> FINAL=1 bash bench/device/round.sh generate:260")
# GEN_BATCHES (default 1,64) sets the bench's batch sizes. PARTS picks what runs (default: check 124m
# 124m-compiled, plus bf16 350m with FINAL=1), e.g. a re-run of
# the last two alone: PARTS="bf16 350m" bash bench/device/round.sh generate:140
# (alone: bash bench/device/generate.sh installs the checkout first when round.sh has not)
# On the CPU, DRY=1 runs every stage's logic at tiny shapes (numba, the micro preset; Hugging Face
# with HF_PYTHON=... when given) to catch mistakes before device time is spent:
#   DRY=1 HF_PYTHON=/path/to/torch-venv/bin/python OUT=/tmp/gen bash bench/device/generate.sh
#
# What comes back: ONE file, $OUT/generate.tar.gz (log.txt, conformance.txt, pytest.txt, bench-*/
# records.jsonl run.json report.md, train.log). The summary printed last: conformance and pytest
# counts, then each bench's table (generated/decode/prefill tokens/s, TTFT, the decoding step's
# bandwidth share, ours over Hugging Face's).
set -uo pipefail
OUT=${OUT:-/tmp/generate-out}
DIR=$OUT/generate
mkdir -p "$DIR"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 EULER_GIT_SHA=${GIT_SHA:-}
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$DIR/log.txt"; }

if [[ -n ${DRY:-} ]]; then
  PY=${PYTHON:-.venv/bin/python}; EULER=${EULER:-.venv/bin/euler}
  BACKEND=numba; PRESET=micro; BIG=micro; BATCHES=1,3; PROMPT=8; NEW=6; REPEATS=1
  HF=${HF_PYTHON:-}; TRAIN_STEPS=3; CONF_BACKEND=numba
else
  PY=python3; EULER=euler
  BACKEND=triton; PRESET=gpt2; BIG=gpt2-medium; BATCHES=${GEN_BATCHES:-1,64}; PROMPT=448; NEW=64; REPEATS=3
  HF=python3; TRAIN_STEPS=2000; CONF_BACKEND=triton
  log "env"
  {
    echo "git_sha: ${GIT_SHA:-unknown}"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    python3 -c "import sys, numpy, cupy, triton; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'triton', triton.__version__)"
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  } 2>&1 | tee -a "$DIR/log.txt"
  if ! python3 -c "import euler_core, os, sys; sys.exit(os.path.dirname(euler_core.__file__) != os.path.abspath('euler_core'))" 2>/dev/null; then
    python3 -m pip install -q --no-deps --no-build-isolation -e . >> "$DIR/log.txt" 2>&1 || log "pip install failed"
  fi
fi

# bf16 where the model takes it (main's 16-bit models), float32 otherwise
if $PY -c "from euler_core.model import GPT; from euler_core.config import preset; GPT(preset('micro'), '$BACKEND', dtype='bfloat16')" >/dev/null 2>&1 \
   && [[ -z ${DRY:-} ]]; then DTYPE=bfloat16; else DTYPE=float32; fi
log "dtype for the bench: $DTYPE"

PARTS=${PARTS:-check 124m 124m-compiled${FINAL:+ bf16 350m}}
has() { [[ " $PARTS " == *" $1 "* ]]; }
log "parts: $PARTS"
CHECK_CAP=$(has bf16 && echo 110 || echo 40)  # a cold Triton cache: 2000 steps did not end in 55 s
touch "$DIR/pytest.txt"
if has check; then
  timeout $CHECK_CAP $EULER conformance --backend $CONF_BACKEND --op attention_cached > "$DIR/conformance.txt" 2>&1 &
  if [[ -z ${DRY:-} ]]; then
    timeout $CHECK_CAP $PY -m pytest -q -p no:cacheprovider tests/test_generate_gpu.py -k "not 16_bit" > "$DIR/pytest.txt" 2>&1 &
  else
    timeout $CHECK_CAP $PY -m pytest -q -p no:cacheprovider tests/test_generate.py -k "batched" > "$DIR/pytest.txt" 2>&1 &
  fi
fi
if has bf16; then
  MODEL=()
  if [[ -z ${DRY:-} ]] && compgen -G ".h200/pydocs/pydocs_train_*.bin" > /dev/null; then
    TRAIN_STEPS=${BF16_STEPS:-600}
    MODEL=(--preset gpt2 --tokenizer gpt2 --train-data ".h200/pydocs/pydocs_train_*.bin"
           --val-data ".h200/pydocs/pydocs_val_*.bin" --batch-size 16 --lr 6e-4 --warmup 50)
  fi
  timeout $CHECK_CAP $EULER train --backend $BACKEND "${MODEL[@]}" --steps $TRAIN_STEPS --eval-every $TRAIN_STEPS \
    --eval-batches 2 --checkpoint-every $TRAIN_STEPS \
    --sample-tokens 16 --no-progress --out "$DIR/ckpt" > "$DIR/train.log" 2>&1 &
fi
wait
if has check; then
  tail -3 "$DIR/conformance.txt" | tee -a "$DIR/log.txt"
  tail -3 "$DIR/pytest.txt" | tee -a "$DIR/log.txt"
fi
if has bf16; then
  tail -2 "$DIR/train.log" | tee -a "$DIR/log.txt"
  if [[ -z ${DRY:-} ]]; then
    EULER_TRAINED_CHECKPOINT="$DIR/ckpt" timeout 70 $PY -m pytest -q -p no:cacheprovider tests/test_generate_gpu.py \
      -k "16_bit" >> "$DIR/pytest.txt" 2>&1
    tail -2 "$DIR/pytest.txt" | tee -a "$DIR/log.txt"
  fi
  rm -rf "$DIR/ckpt"  # not worth a file of the 8 that come back
fi

bench() {  # name cap presets hf-modes [more options]
  local name=$1 cap=$2 presets=$3 modes=$4; shift 4
  log "bench $name: $presets, batches $BATCHES, Hugging Face $modes $*"
  timeout "$cap" $EULER bench generate --backend $BACKEND --dtype $DTYPE --presets "$presets" --batches $BATCHES \
    --prompt-len $PROMPT --new-tokens $NEW --repeats $REPEATS ${HF:+--hf-python "$HF" --hf-modes "$modes"} "$@" \
    --out "$DIR/bench-$name" >> "$DIR/log.txt" 2>&1 || log "bench $name ended with status $?"
}
if has 124m; then bench 124m 55 $PRESET eager; fi
if [[ -n $HF ]] && has 124m-compiled; then bench 124m-compiled 55 $PRESET compiled --hf-only; fi
if has 350m; then bench 350m 65 $BIG eager; fi

tar czf "$OUT/generate.tar.gz" -C "$OUT" generate && rm -rf "$DIR"
echo
echo "==================== summary ===================="
SUM=$(mktemp -d)
tar xzf "$OUT/generate.tar.gz" -C "$SUM"
echo "conformance (attention_cached, $CONF_BACKEND): $(grep -sE 'passed, .* failed' $SUM/generate/conformance.txt || echo 'not run')"
echo "pytest: $(grep -E 'passed|failed|error' $SUM/generate/pytest.txt | tail -2 | tr '\n' ' ')"
# 124M: ours beside both Hugging Face modes in one table (two record folders); then 350M
$PY -c "
import sys, glob
from euler_core.measure.generate import report_table
from euler_core.measure.records import load_records
for title, pattern in (('GPT-2 124M', 'bench-124m*'), ('GPT-2 350M', 'bench-350m')):
    dirs = sorted(glob.glob(sys.argv[1] + '/' + pattern))
    if dirs:
        print(f'## {title} ($DTYPE)'); print(report_table(load_records(dirs)))
" "$SUM/generate"
rm -rf "$SUM"
