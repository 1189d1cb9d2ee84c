#!/usr/bin/env bash
# (a) the real checkpoints, W = 1, 2, 3
. "$(dirname "$0")/env.sh"; bind_fixtures
for fx in fsdp2_ws2_fp32 fsdp2_ws3_fp32 torchtitan_ws2_fp32 hf_fsdp_ws2_fp32 fsdp2_ws2_model_only fsdp2_ws2_bf16mixed; do
  for w in 1 2 3; do
    $S/judge.sh "$fx|real" /fx/shared/$fx/checkpoint /fx/shared/$fx/meta $w
  done
done
