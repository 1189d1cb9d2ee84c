#!/usr/bin/env bash
# Reproduce the issue 41 DCP oracle table (run as root from an oracle copy: cp -r shared/oracle /tmp/oracle && cd /tmp/oracle).
# Env: DS_MIRROR (DeepSpeed git dir), FX (shared/fixtures/dcp), ZM (zeromount binary), OUT (results folder, default ./out/o41)
set -uo pipefail
: "${FX:?shared/fixtures/dcp}" "${ZM:?zeromount binary}" "${OUT:=$PWD/out/o41}"
R=/tmp/ds-oracle/rootfs
./setup_env.sh                                             # once (DS_MIRROR=...)
mkdir -p out/bin "$OUT" && cp fsdp2_run.py fsdp2_judge.py out/bin/
mkdir -p "$R/fx/shared" "$R/fx/new" "$OUT/fixtures"
mount --bind -o ro "$FX" "$R/fx/shared"; mount --bind -o ro "$OUT/fixtures" "$R/fx/new"
judge() {  # judge LABEL CANDIDATE META W [args]: one verdict line per cell
  local l=$1 c=$2 m=$3 w=$4; shift 4
  echo -e "$l\t$w\t$(./run_in_env.sh python3 /oracle/out/bin/fsdp2_judge.py "$c" --meta "$m" --world "$w" \
     --result "/oracle/out/judge/${l//[|\/ ]/_}.w$w.json" "$@" 2>&1 | grep -E '^(PASS|FAIL|ERROR) ' || echo ERROR)" | tee -a "$OUT/verdicts.tsv"
}
for fx in fsdp2_ws2_fp32 fsdp2_ws3_fp32 torchtitan_ws2_fp32 hf_fsdp_ws2_fp32 fsdp2_ws2_model_only fsdp2_ws2_bf16mixed; do
  mkdir -p "$R/zm-mnt/$fx"; "$ZM" "$FX/$fx/checkpoint" "$R/zm-mnt/$fx"
  T=$(ls "$FX/$fx/checkpoint")                              # step-3 | checkpoint-3
  M=$R/zm-mnt/$fx; find $M $M/layouts/fsdp-dp{1,2,3}/ $M/layouts/torch/ -type f -exec cat {} + >/dev/null; "$ZM" verify $M/${T}_dcp
  for w in 1 2 3; do judge "$fx|real" /fx/shared/$fx/checkpoint /fx/shared/$fx/meta $w; done
  for c in ${T}_dcp layouts/fsdp-dp1 layouts/fsdp-dp2 layouts/fsdp-dp3; do
    for w in 1 2 3; do judge "$fx|$c" /zm-mnt/$fx/$c /fx/shared/$fx/meta $w; done
  done
done
# W = 4 / 5 fixtures: make, mount, read every file, verify, judge
for spec in fsdp2_ws4_fp32:4:fsdp2 fsdp2_ws5_fp32:5:fsdp2 torchtitan_ws4_fp32:4:torchtitan; do
  IFS=: read n w st <<<"$spec"
  ./run_in_env.sh python3 /oracle/out/bin/fsdp2_run.py --out /oracle/out/fx/$n --world $w --style $st
  cp -a out/fx/$n "$OUT/fixtures/$n"
  M=$R/zm-mnt/new-$n; mkdir -p $M; "$ZM" "$OUT/fixtures/$n/checkpoint" $M; T=$(ls "$OUT/fixtures/$n/checkpoint")
  find $M $M/layouts/fsdp-dp2/ $M/layouts/fsdp-dp$w/ $M/layouts/torch/ -type f -exec cat {} + >/dev/null  # layouts/* are not listed
  "$ZM" verify $M/${T}_dcp; "$ZM" verify "$OUT/fixtures/$n/checkpoint/$T"
  for c in ${T}_dcp layouts/fsdp-dp2 layouts/fsdp-dp$w; do
    for jw in 2 $w; do judge "$n|$c" /zm-mnt/new-$n/$c /fx/new/$n/meta $jw; done
  done
done
# extras: torchtitan's own load of <T>_dcp; a damaged source seen through the mount must FAIL
judge "torchtitan_ws2_fp32|step-3_dcp (--layout torchtitan)" /zm-mnt/torchtitan_ws2_fp32/step-3_dcp /fx/shared/torchtitan_ws2_fp32/meta 2 --layout torchtitan
./run_in_env.sh python3 /oracle/out/bin/fsdp2_judge.py --damage-copy /fx/shared/fsdp2_ws2_fp32/checkpoint/step-3 \
    /oracle/out/d/expavg_zeroed/step-3 optimizer.state.fc2.weight.exp_avg
mkdir -p $R/zm-mnt/damaged; "$ZM" "$PWD/out/d/expavg_zeroed" $R/zm-mnt/damaged
judge "damaged|step-3_dcp" /zm-mnt/damaged/step-3_dcp /fx/shared/fsdp2_ws2_fp32/meta 2          # must FAIL
judge "damaged|layouts/fsdp-dp3" /zm-mnt/damaged/layouts/fsdp-dp3 /fx/shared/fsdp2_ws2_fp32/meta 3  # must FAIL
for fx in fsdp2_ws2_fp32 fsdp2_ws3_fp32 torchtitan_ws2_fp32 hf_fsdp_ws2_fp32 fsdp2_ws2_model_only fsdp2_ws2_bf16mixed \
          new-fsdp2_ws4_fp32 new-fsdp2_ws5_fp32 new-torchtitan_ws4_fp32 damaged; do fusermount3 -u $R/zm-mnt/$fx; done
umount $R/fx/shared $R/fx/new
