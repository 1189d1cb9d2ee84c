#!/usr/bin/env bash
# (b) MNT/<T>_dcp and (c) MNT/layouts/fsdp-dp{1,2,3}, each judged at W = 1, 2, 3
. "$(dirname "$0")/env.sh"; bind_fixtures
FIX="${*:-fsdp2_ws2_fp32 fsdp2_ws3_fp32 torchtitan_ws2_fp32 hf_fsdp_ws2_fp32 fsdp2_ws2_model_only fsdp2_ws2_bf16mixed}"
for fx in $FIX; do
  mount_zm $fx $SHARED_FX/$fx/checkpoint
  tag=$(ls $SHARED_FX/$fx/checkpoint)         # step-3 or checkpoint-3
  for cand in ${tag}_dcp layouts/fsdp-dp1 layouts/fsdp-dp2 layouts/fsdp-dp3; do
    for w in 1 2 3; do
      $S/judge.sh "$fx|$cand" /zm-mnt/$fx/$cand /fx/shared/$fx/meta $w
    done
  done
done
