#!/usr/bin/env bash
# Nsight Compute on gemm_wgmma at the probe's products (bench/device/gemm_launches.py: 16384 rows,
# bf16): for each "variant:product" of NCU_GEMM (default: the two GELU products as the tree runs them,
# and the plain c_fc forward in the same pingpong schedule), one launch after a warm one, --set full,
# clocks left alone (--clock-control none); the details page as text and the SASS with its
# per-instruction stall samples as CSV, summarised by bench/device/ncu_sass_summary.py.
#   run(command="GIT_SHA=<sha> bash bench/device/round.sh ncu_gemm:200")
# Comes back as $OUT/ncu_gemm.tar.gz: ncu_gemm/{<variant>_<product>.txt, -sass.csv.gz, sass-summary.txt, log.txt}.
set -uo pipefail
OUT=${OUT:-/tmp/ncu-out}; D=$OUT/ncu_gemm; mkdir -p "$D"
export PYTHONUNBUFFERED=1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$D/log.txt"; }
for spec in ${NCU_GEMM:-tree:fc_fwd_pre tree:fc_proj_dx_dgelu pingpong_store:fc_fwd}; do
  name=${spec%%:*}_${spec##*:}
  log "$name"
  timeout 90 "$NCU" --clock-control none --set full --import-source no -k "regex:gemm_wgmma" --launch-skip 2 \
    --launch-count 1 -f -o "$D/$name" python3 bench/device/gemm_launches.py "${spec%%:*}" "${spec##*:}" \
    > "$D/$name-ncu.log" 2>&1
  echo "ncu exit $?" | tee -a "$D/log.txt"
  "$NCU" -i "$D/$name.ncu-rep" --page details > "$D/$name.txt" 2>&1
  "$NCU" -i "$D/$name.ncu-rep" --page source --print-source sass --csv > "$D/$name-sass.csv" 2>&1 \
    || echo "(no source page)" >> "$D/log.txt"
  rm -f "$D/$name.ncu-rep"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Issue Slots Busy|No Eligible" \
    "$D/$name.txt" | head -8 | tee -a "$D/log.txt"
done
python3 bench/device/ncu_sass_summary.py "$D"/*-sass.csv > "$D/sass-summary.txt" 2>&1 || echo "(summary failed)" >> "$D/log.txt"
gzip -f "$D"/*-sass.csv
tar czf "$OUT/ncu_gemm.tar.gz" -C "$OUT" ncu_gemm && rm -rf "$D"
