#!/usr/bin/env bash
# Issue 32, the 3-rank Muon fixture (tests/fixtures/muon_z2_ws3): its own layout, a stage change, and a DP
# change 3 -> 2 -> DeepSpeed save -> 3, each next step compared bitwise with a load of the real files. Run
# tests/oracle/muon/o32.sh first (it sets up the bind mount and harness/muon_run_zm.py).
set -uo pipefail
R=${ORACLE_ROOTFS:-/tmp/ds-oracle/rootfs}; ZM="$(cd "$(dirname "$0")/../../.." && pwd)"; OUT=/tmp/oracle/out32
SRC=$ZM/tests/fixtures/muon_z2_ws3/checkpoint; REF=/zm/tests/fixtures/muon_z2_ws3/meta/live_state.pt
mkdir -p $R/zm-mnt/ws3 $R/zm-mnt/ws3b
mountpoint -q $R/zm-mnt/ws3 || $ZM/build/zeromount $SRC $R/zm-mnt/ws3 2>/dev/null
load() { local row=$1 n=$2 st=$3 dir=$4; shift 4
  (cd /tmp/oracle && timeout 900 ./run_in_env.sh python3 harness/launch.py --nproc $n harness/muon_run_zm.py --stage $st \
    --load-dir $dir --reference $REF --result /oracle/out32/$row.json "$@" > $OUT/$row.log 2>&1) || true; }
load ws3-real-z2-dp3 3 2 /zm/tests/fixtures/muon_z2_ws3/checkpoint
load ws3-own-z2-dp3 3 2 /zm-mnt/ws3/layouts/zero2-dp3-fp32
load ws3-layout-z1-dp3 3 1 /zm-mnt/ws3/layouts/zero1-dp3-fp32
load ws3-real-z1-dp3 3 1 /zm/tests/fixtures/muon_z2_ws3/checkpoint
rm -rf $OUT/ws3-saved-dp2
load ws3-layout-z2-dp2 2 2 /zm-mnt/ws3/layouts/zero2-dp2-fp32 --save-dir /oracle/out32/ws3-saved-dp2
$ZM/build/zeromount $OUT/ws3-saved-dp2 $R/zm-mnt/ws3b 2>/dev/null
load ws3-roundtrip-dp2-z2dp3 3 2 /zm-mnt/ws3b/layouts/zero2-dp3-fp32
fusermount3 -u $R/zm-mnt/ws3b; fusermount3 -u $R/zm-mnt/ws3
/usr/bin/python3 - <<'PY'
import json, torch, os
O="/tmp/oracle/out32"
for row, floor in [("ws3-real-z2-dp3", None), ("ws3-own-z2-dp3", "ws3-real-z2-dp3"), ("ws3-real-z1-dp3", None),
                   ("ws3-layout-z1-dp3", "ws3-real-z1-dp3"), ("ws3-layout-z2-dp2", None),
                   ("ws3-roundtrip-dp2-z2dp3", "ws3-real-z2-dp3")]:
    p=f"{O}/{row}.json"; r=json.load(open(p)) if os.path.exists(p) else {"status":"none"}
    if r.get("status")!="ok": print(row, "failed", r.get("error")); continue
    vs="-"
    if floor and os.path.exists(f"{O}/{floor}.next.pt"):
        a,b=torch.load(f"{O}/{row}.next.pt"),torch.load(f"{O}/{floor}.next.pt")
        vs="bit-equal" if all(torch.equal(a[k],b[k]) for k in b) else "differs"
    print(f"| {row} | {'bit-equal' if not r['mismatches'] else r['mismatches']} | {r['next_step_max_rel_diff']:.3g} | {vs} |")
PY
