#!/usr/bin/env bash
# Conformance runs on the H200, side by side, as one stage of the round driver (bench/device/round.sh):
#   CONF_OPS     "backend:op ..."   euler conformance --backend <backend> --op <op> (every variant of
#                                   the backend or the named one, every dtype), one process each
#   CONF_MODELS  "selection ..."    the model step against float64 naive (--check model_step)
#   CONF_T       seconds a run may take (150)
#
#   run(command="GIT_SHA=<sha> CONF_OPS='cupy_raw:matmul_gelu' CONF_MODELS='cupy_raw,matmul_gelu=cupy_raw' \
#                bash bench/device/round.sh conformance:170")
#
# Comes back as $OUT/conformance.tar.gz: conformance/{<backend>_<op>.txt, model-<selection>.txt, log.txt};
# each run's verdict line is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/conformance-out}; D=$OUT/conformance; mkdir -p "$D"
export PYTHONUNBUFFERED=1
pids=()
for spec in ${CONF_OPS:-}; do
  backend=${spec%:*}; op=${spec##*:}
  timeout "${CONF_T:-150}" euler conformance --backend "$backend" --op "$op" --quiet > "$D/${backend//[=:,]/_}_$op.txt" 2>&1 & pids+=($!)
done
for sel in ${CONF_MODELS:-}; do
  timeout "${CONF_T:-150}" euler conformance --backend "$sel" --check model_step --quiet \
    > "$D/model-${sel//[=:,]/_}.txt" 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for f in "$D"/*.txt; do
  [[ $f == */log.txt ]] && continue
  printf "%-60s %s\n" "$(basename "$f" .txt)" "$(grep -E "passed|failed|Error" "$f" | tail -1)"
done | tee "$D/log.txt"
tar czf "$OUT/conformance.tar.gz" -C "$OUT" conformance
