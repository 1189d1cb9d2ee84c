#!/usr/bin/env bash
# The second batch (renamed and vision-language models), once the FSDP2 checks of the first are done.
while ! grep -q ALLDONE /tmp/hf-oracle/fsdp2_all.log; do sleep 10; done
exec "$(dirname "$0")/run_all.sh" "phimoe 2 fp32" "hrm_text 2 fp32" "qwen3_5_moe_text 2 fp32" "llava 2 fp32" \
  "phimoe 3 fp32" "hrm_text 3 fp32" "qwen3_5_moe_text 3 fp32" "llava 3 fp32" "phimoe 2 bf16" "hrm_text 3 bf16" \
  "qwen3_5_moe_text 3 bf16"
