#!/usr/bin/env bash
# inside the chroot: DeepSpeed's own zero_to_fp32.py --safe_serialization on the real checkpoint-2 -> /w/z2f/NAME
for n in "$@"; do ck=/w/runs/$n/checkpoint-2; rm -rf /w/z2f/$n; mkdir -p /w/z2f
  python3 $ck/zero_to_fp32.py $ck /w/z2f/$n --safe_serialization > /w/logs/z2f_$n.log 2>&1; echo "$n rc=$?"; done
