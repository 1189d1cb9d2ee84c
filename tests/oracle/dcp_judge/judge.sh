#!/usr/bin/env bash
# judge.sh LABEL CANDIDATE(chroot path) META(chroot path) WORLD [judge args...]
# Runs fsdp2_judge.py in the oracle chroot; appends "LABEL<TAB>W<TAB>VERDICT<TAB>line" to $RESULTS/verdicts.tsv
set -uo pipefail
: "${ORACLE:=/tmp/oracle}" "${RESULTS:=${OUT:-/tmp/zm-dcp-oracle}/results}"
label=$1 cand=$2 meta=$3 w=$4; shift 4
mkdir -p "$ORACLE/out/judge" "$RESULTS/json" "$RESULTS/logs"
safe=$(echo "$label" | tr '/ ' '__')
t0=$(date +%s)
(cd "$ORACLE" && timeout 600 ./run_in_env.sh python3 /oracle/out/bin/fsdp2_judge.py "$cand" --meta "$meta" --world "$w" \
   --result "/oracle/out/judge/$safe.w$w.json" "$@") > "$RESULTS/logs/$safe.w$w.log" 2>&1
rc=$?
line=$(grep -E '^(PASS|FAIL|ERROR) ' "$RESULTS/logs/$safe.w$w.log" | tail -1)
[ -n "$line" ] || line="ERROR rc=$rc (no verdict line; see logs/$safe.w$w.log)"
cp -f "$ORACLE/out/judge/$safe.w$w.json" "$RESULTS/json/" 2>/dev/null
printf '%s\t%s\t%s\t%s\t%ss\n' "$label" "$w" "${line%% *}" "$line" "$(( $(date +%s) - t0 ))" | tee -a "$RESULTS/verdicts.tsv"
