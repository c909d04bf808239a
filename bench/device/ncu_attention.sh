#!/usr/bin/env bash
# Nsight Compute on the attention kernels at GPT-2's shape (bf16, causal, B=32, T=1024, 12 heads of
# 64): cupy_raw's wgmma forward, dK/dV and dQ kernels, triton's forward and backward, and cuDNN's
# (PyTorch SDPA) beside them, one launch each after a warm one, --set full, clocks left alone
# (--clock-control none, as the device notes ask). For each kernel: the details page as text (speed
# of light, occupancy, warp states, pipe utilisation) and, for cupy_raw's, the SASS with its
# per-instruction stall samples as CSV.
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh ncu_attention:300")
# Comes back as $OUT/ncu_attention.tar.gz: ncu_attention/{<kernel>.txt, <kernel>-sass.csv, log.txt}.
set -uo pipefail
OUT=${OUT:-/tmp/ncu-out}; D=$OUT/ncu_attention; mkdir -p "$D"
export PYTHONUNBUFFERED=1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$D/log.txt"; }
profile() {  # profile <name> <implementation> <kernel regex> [sass]
  local name=$1 impl=$2 regex=$3
  log "$name ($impl, kernels matching $regex)"
  timeout 120 "$NCU" --clock-control none --set full --import-source no -k "regex:$regex" --launch-skip 1 \
    --launch-count 1 -f -o "$D/$name" python3 bench/device/attention_launches.py "$impl" > "$D/$name-ncu.log" 2>&1
  echo "ncu exit $?" | tee -a "$D/log.txt"
  "$NCU" -i "$D/$name.ncu-rep" --page details > "$D/$name.txt" 2>&1
  if [[ ${4:-} == sass ]]; then
    "$NCU" -i "$D/$name.ncu-rep" --page source --print-source sass --csv > "$D/$name-sass.csv" 2>&1 \
      || echo "(no source page)" >> "$D/log.txt"
  fi
  rm -f "$D/$name.ncu-rep"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread|Issue Slots Busy|No Eligible" \
    "$D/$name.txt" | head -12 | tee -a "$D/log.txt"
}
profile cupy_raw_forward cupy_raw 'attention_wgmma_forward' sass
profile cupy_raw_dkdv cupy_raw 'attention_wgmma_backward_dkdv' sass
profile cupy_raw_dq cupy_raw 'attention_wgmma_backward_dq' sass
profile triton_forward triton '_attn_forward'
profile triton_backward triton '_attn_backward'
profile cudnn_forward cudnn 'fprop|fwd|forward'
profile cudnn_backward cudnn 'bprop|bwd|backward|dgrad'
tar czf "$OUT/ncu_attention.tar.gz" -C "$OUT" ncu_attention && rm -rf "$D"
