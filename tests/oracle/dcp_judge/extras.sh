#!/usr/bin/env bash
# Extra checks: (1) torchtitan's own load from the mount's <T>_dcp (torchtitan keys beside the fsdp2 ones);
# (2) negative control through the mount: a damaged source must make the mount's views FAIL.
. "$(dirname "$0")/env.sh"; bind_fixtures
mount_zm torchtitan_ws2_fp32 $SHARED_FX/torchtitan_ws2_fp32/checkpoint
for w in 2 3; do
  $S/judge.sh "torchtitan_ws2_fp32|step-3_dcp (--layout torchtitan)" /zm-mnt/torchtitan_ws2_fp32/step-3_dcp /fx/shared/torchtitan_ws2_fp32/meta $w --layout torchtitan
done
# damaged copy: exp_avg of fc2.weight zeroed in its first chunk (as in the fixtures README)
rm -rf "$ORACLE/out/d/expavg_zeroed"
(cd "$ORACLE" && ./run_in_env.sh python3 /oracle/out/bin/fsdp2_judge.py --damage-copy /fx/shared/fsdp2_ws2_fp32/checkpoint/step-3 \
   /oracle/out/d/expavg_zeroed/step-3 optimizer.state.fc2.weight.exp_avg) | tee "$RESULTS/logs/damage.txt"
mount_zm damaged-expavg "$ORACLE/out/d/expavg_zeroed"
$S/judge.sh "damaged:expavg_zeroed|real" /oracle/out/d/expavg_zeroed /fx/shared/fsdp2_ws2_fp32/meta 2
$S/judge.sh "damaged:expavg_zeroed|step-3_dcp" /zm-mnt/damaged-expavg/step-3_dcp /fx/shared/fsdp2_ws2_fp32/meta 2
$S/judge.sh "damaged:expavg_zeroed|layouts/fsdp-dp3" /zm-mnt/damaged-expavg/layouts/fsdp-dp3 /fx/shared/fsdp2_ws2_fp32/meta 3
