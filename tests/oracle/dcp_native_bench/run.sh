#!/usr/bin/env bash
# Issue 41 benchmark (small scale): wall time of DeepSpeed 0.19.6's load_checkpoint (oracle_load.py --native,
# seconds.load) of layouts/zero2-dp2-fp32 of a DCP source through the mount, vs the same load of a real
# DeepSpeed save of that state (save_checkpoint right after a verified load of the mount's layout).
# Run as root with the oracle copy in ORACLE (setup_env.sh done). Results: $ORACLE/out/b41d/.
set -euo pipefail
S="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$S/../../.." && pwd)"
: "${ORACLE:=/tmp/oracle}" "${R:=/tmp/ds-oracle/rootfs}" "${ZM:=$REPO/build/zeromount}"
: "${SIZES:=8192,1024,1024}" "${REPS:=3}"     # oracle_common TinyModel VOCAB,EMB,HID: 10.4M parameters
export ORACLE_EXTRA_ENV="ORACLE_SIZES=$SIZES"
cd "$ORACLE"; B=out/b41d; M=$R/zm-mnt/b41d; mkdir -p $B $M
[ -f $B/fx/meta/live_state.pt ] || ./run_in_env.sh python3 /oracle/fsdp2_run.py --out /oracle/$B/fx --world 2 --style fsdp2
remount() { mountpoint -q $M && fusermount3 -u $M; "$ZM" $ORACLE/$B/fx/checkpoint $M; }
load() {  # load NAME LOAD_DIR [extra]
  local n=$1 d=$2; shift 2
  ./run_in_env.sh python3 harness/launch.py --nproc 2 harness/oracle_load.py --native --stage 2 --tag step-3 \
    --load-dir $d --reference /oracle/$B/fx/meta/live_state.pt --result /oracle/$B/r.$n.json "$@" >$B/$n.log 2>&1
  python3 -c "import json,sys; d=json.load(open('$B/r.$n.json')); print('$n', d['status'], d['mismatches'][:3], 'load_s=%.3f' % d['seconds']['load'])"
}
if [ ! -f $B/dsave/latest ]; then remount; load save /zm-mnt/b41d/layouts/zero2-dp2-fp32 --save-dir /oracle/$B/dsave; fi
for i in $(seq 1 $REPS); do
  remount; load mount$i /zm-mnt/b41d/layouts/zero2-dp2-fp32
  load real$i /oracle/$B/dsave
done
fusermount3 -u $M
