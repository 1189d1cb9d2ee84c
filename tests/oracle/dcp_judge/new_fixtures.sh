#!/usr/bin/env bash
# Step 2: make fixtures at W=4/5 with fsdp2_run.py, mount each, read every file, verify <T>_dcp,
# judge <T>_dcp and layouts/fsdp-dp<W> at W=2 and at the fixture's own W.
. "$(dirname "$0")/env.sh"
LIST="${*:-fsdp2_ws4_fp32:4:fsdp2 fsdp2_ws5_fp32:5:fsdp2 torchtitan_ws4_fp32:4:torchtitan}"
for spec in $LIST; do
  IFS=: read name w style <<<"$spec"
  if [ ! -f "$NEW_FX/$name/meta/live_state.pt" ]; then
    rm -rf "$ORACLE/out/fx/$name"
    (cd "$ORACLE" && ./run_in_env.sh python3 /oracle/out/bin/fsdp2_run.py --out /oracle/out/fx/$name --world $w --style $style) \
      > "$RESULTS/logs/make_$name.log" 2>&1 || { echo "MAKE FAILED $name"; tail -20 "$RESULTS/logs/make_$name.log"; continue; }
    tail -1 "$RESULTS/logs/make_$name.log"
    rm -rf "$NEW_FX/$name"; cp -a "$ORACLE/out/fx/$name" "$NEW_FX/$name"
  fi
done
bind_fixtures   # after the copies (a bind of an empty folder would still show new files; harmless either way)
for spec in $LIST; do
  IFS=: read name w style <<<"$spec"
  [ -f "$NEW_FX/$name/meta/live_state.pt" ] || continue
  mount_zm "new-$name" "$NEW_FX/$name/checkpoint"
  M="$R/zm-mnt/new-$name"; tag=$(ls "$NEW_FX/$name/checkpoint")
  # make the fsdp layouts at 2 and W exist (made on lookup), then read every file
  ls "$M/layouts/fsdp-dp2" "$M/layouts/fsdp-dp$w" >/dev/null
  # layouts/<name> are made on lookup and not listed by find: name them
  nf=$(find "$M" "$M/layouts/fsdp-dp2/" "$M/layouts/fsdp-dp$w/" "$M/layouts/torch/" -type f | sort -u | wc -l)
  if errs=$(find "$M" "$M/layouts/fsdp-dp2/" "$M/layouts/fsdp-dp$w/" "$M/layouts/torch/" -type f -exec cat {} + 2>&1 >/dev/null); [ -z "$errs" ]; then
    echo -e "$name\treadall\tOK\t$nf files: find MNT + layouts/fsdp-dp2, fsdp-dp$w, torch (named explicitly: made on lookup, not listed)"
  else echo -e "$name\treadall\tERRORS\t$errs"; fi | tee -a "$RESULTS/readall.tsv"
  "$ZM" verify "$M/${tag}_dcp" > "$RESULTS/logs/verify_$name.txt" 2>&1; vrc=$?
  "$ZM" verify "$NEW_FX/$name/checkpoint/$tag" > "$RESULTS/logs/verify_${name}_real.txt" 2>&1; vrc2=$?
  echo -e "$name\tverify ${tag}_dcp rc=$vrc\treal rc=$vrc2" | tee -a "$RESULTS/verify.tsv"
  for cand in ${tag}_dcp layouts/fsdp-dp2 layouts/fsdp-dp$w; do
    for jw in 2 $w; do
      $S/judge.sh "$name|$cand" /zm-mnt/new-$name/$cand /fx/new/$name/meta $jw
    done
  done
  $S/judge.sh "$name|real" /fx/new/$name/checkpoint /fx/new/$name/meta 2
done
