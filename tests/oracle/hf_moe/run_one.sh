#!/usr/bin/env bash
# inside the chroot: run_one.sh MODEL STAGE DTYPE  -> /w/runs/<model>_z<stage>_<dtype>, /w/logs/<name>.log
set -uo pipefail
m=$1 st=$2 dt=$3; name=${m}_z${st}_${dt}
extra=(); [ "$dt" = bf16 ] && extra=(--dtype bf16 --gloo-half-shim)
mkdir -p /w/runs /w/res /w/logs; rm -rf /w/runs/$name
PYTHONHASHSEED=0 python3 launch.py --nproc 2 --timeout 900 train.py --model $m --stage $st --out /w/runs/$name \
   --max-steps 2 --save-steps 2 --result /w/res/$name.json "${extra[@]}" > /w/logs/$name.log 2>&1
rc=$?; echo "$name rc=$rc"; exit $rc
