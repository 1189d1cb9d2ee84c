#!/usr/bin/env bash
# Trains each "MODEL STAGE DTYPE" job given (default: the first batch), skipping those already saved.
export ORACLE_ROOTFS=/tmp/hf-oracle/rootfs HF_WORK=/tmp/hf-oracle/work DS_SRC=/tmp/ds-oracle/deepspeed-src
cd /tmp/hforacle/hf
[ $# -gt 0 ] || set -- "qwen3_moe 2 fp32" "mixtral 3 fp32" "qwen3_moe 3 fp32" "olmoe 2 fp32" "olmoe 3 fp32" \
  "deepseek_v3 2 fp32" "deepseek_v3 3 fp32" "mixtral 2 bf16" "mixtral 3 bf16" "qwen3_moe 2 bf16" "qwen3_moe 3 bf16" \
  "olmoe 2 bf16" "olmoe 3 bf16" "deepseek_v3 2 bf16" "deepseek_v3 3 bf16"
for job in "$@"; do
  read -r model stage dtype <<<"$job"
  [ -f "/tmp/hf-oracle/work/runs/${model}_z${stage}_${dtype}/checkpoint-2/model.safetensors" ] && continue
  ./run_in_env.sh ./run_one.sh $job
  date -u
done
echo ALLDONE
