#!/usr/bin/env bash
export ORACLE_ROOTFS=/tmp/hf-oracle/rootfs HF_WORK=/tmp/hf-oracle/work DS_SRC=/tmp/ds-oracle/deepspeed-src
cd /tmp/hforacle/hf
for n in "$@"; do
  [ -f /tmp/hf-oracle/work/res/fsdp2_$n.json ] && continue
  ./run_in_env.sh python3 launch.py --nproc 2 --timeout 600 fsdp2_hf_load.py $n > /tmp/hf-oracle/work/logs/fsdp2_$n.log 2>&1; echo "$n rc=$?"
done
echo ALLDONE
