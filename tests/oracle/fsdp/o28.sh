#!/usr/bin/env bash
# Issue 28's oracle table, by hand (never in CI): every fixture below, mounted by zeromount under
# the oracle chroot, loaded by FSDP2 + DCP at 1..4 ranks (fsdp_load.py). Needs /tmp/oracle set up
# (shared/oracle/README.md) and a built zeromount. Writes /tmp/oracle/out28/<fixture>-<W>.json and
# prints the table for docs/oracle-results.md.
#   tests/oracle/fsdp/o28.sh [FIXTURE ...]
set -uo pipefail
ZM="$(cd "$(dirname "$0")/../../.." && pwd)"
R=${ORACLE_ROOTFS:-/tmp/ds-oracle/rootfs}
FIXTURES=("$@")
[ ${#FIXTURES[@]} -eq 0 ] && FIXTURES=(z1_ws2_fp32_pg2 z2_ws2_fp32_pg2 z3_ws2_fp32_pg2 z3_ws2_fp32_pg2_sg200
  z1_ws2_fp32_pg2_rr z1_ws2_bf16_pg2_fp32acc z2_ws2_bf16_pg2 z3_ws2_bf16_pg2 z2_ws2_fp16_pg2)
mkdir -p "$R/zm/tests/fixtures" /tmp/oracle/out28
mountpoint -q "$R/zm/tests/fixtures" || mount --bind "$ZM/tests/fixtures" "$R/zm/tests/fixtures"
cp "$ZM/tests/oracle/fsdp/fsdp_load.py" /tmp/oracle/
for f in "${FIXTURES[@]}"; do
  mkdir -p "$R/zm-mnt/$f"
  mountpoint -q "$R/zm-mnt/$f" || "$ZM/build/zeromount" "$ZM/tests/fixtures/$f/checkpoint" "$R/zm-mnt/$f" 2>/dev/null
  for w in 1 2 3 4; do
    (cd /tmp/oracle && timeout 900 ./run_in_env.sh python3 /oracle/fsdp_load.py "$f" "/zm-mnt/$f" "$w" \
      "/oracle/out28/$f-$w.json" >"/tmp/oracle/out28/$f-$w.log" 2>&1) || echo "$f W=$w: failed (see /tmp/oracle/out28/$f-$w.log)"
  done
  fusermount3 -u "$R/zm-mnt/$f"
done
python3 - "${FIXTURES[@]}" <<'PY'
import json, sys, os
print("| source | W | `<T>_dcp` at load vs live | `fsdp-dp<W>` at load vs live | `<T>_dcp` +2 steps vs torch's own save | `fsdp-dp<W>` +2 steps vs torch's own save | `dcp_to_torch_save` |")
print("|---|---|---|---|---|---|---|")
for f in sys.argv[1:]:
    for w in (1, 2, 3, 4):
        p = f"/tmp/oracle/out28/{f}-{w}.json"
        if not os.path.exists(p):
            print(f"| {f} | {w} | failed | | | | |"); continue
        r = json.load(open(p))
        short = lambda v: v if isinstance(v, str) else f"{len(v)} differ: {v[:3]}"
        conv = "ok" if all(v.startswith("ok") for v in r["dcp_to_torch_save"].values()) else str(r["dcp_to_torch_save"])
        print(f"| {f} | {w} | {short(r['dcp_at_load_vs_live'])} | {short(r['fsdp_at_load_vs_live'])} | "
              f"{short(r['dcp_after_2_steps_vs_floor'])} | {short(r['fsdp_after_2_steps_vs_floor'])} | {conv} |")
PY
