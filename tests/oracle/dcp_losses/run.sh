#!/usr/bin/env bash
# Issue 41: losses of two more steps, DeepSpeed 0.19.6 loading a native ZeRO layout of a DCP fixture (through
# the mount) vs FSDP2 continuing from the same DCP fixture. Run as root; the oracle copy in ORACLE
# (cp -r ../shared/oracle /tmp/oracle; setup_env.sh done), the chroot in R. Results under $ORACLE/out/l41d.
set -euo pipefail
S="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$S/../../.." && pwd)"
: "${ORACLE:=/tmp/oracle}" "${R:=/tmp/ds-oracle/rootfs}" "${ZM:=$REPO/build/zeromount}"
FX=${FX:-$REPO/../shared/fixtures/dcp}
mkdir -p "$ORACLE/out/bin41d" "$ORACLE/out/l41d" "$R/fx/shared"
cp "$S"/*.py "$ORACLE/out/bin41d/"
mountpoint -q "$R/fx/shared" || mount --bind -o ro "$FX" "$R/fx/shared"
cd "$ORACLE"
fsdp2() {  # fsdp2 FIXTURE W
  [ -f out/l41d/fsdp2.$1.w$2.pt ] || ./run_in_env.sh python3 /oracle/out/bin41d/fsdp2_steps.py /fx/shared/$1/checkpoint \
    --meta /fx/shared/$1/meta --world $2 --steps 2 --result /oracle/out/l41d/fsdp2.$1.w$2.pt >out/l41d/fsdp2.$1.w$2.log 2>&1
}
ds() {  # ds FIXTURE STAGE W PREC VARIANT(match|oracle) [extra args]
  local fx=$1 st=$2 w=$3 pr=$4 v=$5; shift 5
  mkdir -p "$R/zm-mnt/d41-$fx"; mountpoint -q "$R/zm-mnt/d41-$fx" || "$ZM" "$FX/$fx/checkpoint" "$R/zm-mnt/d41-$fx"
  local out=ds.$fx.zero$st-dp$w-$pr.$v tag; tag=$(ls "$FX/$fx/checkpoint")   # step-3 | checkpoint-3
  ./run_in_env.sh python3 harness/launch.py --nproc $w /oracle/out/bin41d/ds_steps.py --stage $st --tag $tag \
    --load-dir /zm-mnt/d41-$fx/layouts/zero$st-dp$w-$pr $([ $v = match ] && echo --match-fsdp2) "$@" \
    --result /oracle/out/l41d/$out.pt >out/l41d/$out.log 2>&1
  fsdp2 $fx $w
  ./run_in_env.sh python3 /oracle/out/bin41d/compare.py /oracle/out/l41d/fsdp2.$fx.w$w.pt /oracle/out/l41d/$out.pt | tee out/l41d/$out.cmp
}
case "${1:-all}" in
  all)
    ds fsdp2_ws2_fp32 2 2 fp32 match
    ds fsdp2_ws2_fp32 2 2 fp32 oracle
    ds fsdp2_ws2_fp32 3 3 fp32 match
    ds torchtitan_ws2_fp32 1 2 fp32 match
    ds torchtitan_ws2_fp32 1 3 fp32 match
    ds fsdp2_ws2_bf16mixed 2 2 bf16 match --dtype bf16 --gloo-half-shim
    ds fsdp2_ws3_fp32 2 3 fp32 match
    ds hf_fsdp_ws2_fp32 2 2 fp32 match
    ;;
  *) ds "$@" ;;
esac
