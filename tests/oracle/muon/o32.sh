#!/usr/bin/env bash
# Issue 32's oracle table, by hand (never in CI): DeepSpeed 0.19.6's Muon (MuonWithAuxAdam) loading
# views of a mount, proved by the step after the load (shared/oracle/harness/muon_run.py: it loads,
# takes one step and compares the masters with the uninterrupted run's, meta/live_state.pt). Needs
# /tmp/oracle set up (shared/oracle/README.md) and a built zeromount. Prints the table for
# docs/oracle-results.md; results in /tmp/oracle/out32/.
#   tests/oracle/muon/o32.sh
set -uo pipefail
ZM="$(cd "$(dirname "$0")/../../.." && pwd)"
R=${ORACLE_ROOTFS:-/tmp/ds-oracle/rootfs}
OUT=/tmp/oracle/out32
mkdir -p "$R/zm/tests/fixtures" "$OUT"
mountpoint -q "$R/zm/tests/fixtures" || mount --bind "$ZM/tests/fixtures" "$R/zm/tests/fixtures"
ROWS=()
# muon_run.py as shipped, plus: ZM_UNIVERSAL=1 in the environment loads with checkpoint.load_universal,
# and the masters after the next step are saved beside the result (<row>.next.pt), to compare bitwise.
sed -e 's/^cfg = oc.ds_config(a.stage, "fp32")$/&\nif os.environ.get("ZM_UNIVERSAL"): cfg.setdefault("checkpoint", {})["load_universal"] = True/' \
  -e 's/^\( *\)nxt = fp32(); worst = 0.0$/&\n\1rank == 0 and torch.save(nxt, a.result[:-5] + ".next.pt")/' \
  /tmp/oracle/harness/muon_run.py >/tmp/oracle/harness/muon_run_zm.py
grep -q ZM_UNIVERSAL /tmp/oracle/harness/muon_run_zm.py && grep -q next.pt /tmp/oracle/harness/muon_run_zm.py ||
  { echo "muon_run.py changed: update o32.sh"; exit 1; }

zm_mount() {  # SRC (host path) NAME: mounts SRC at $R/zm-mnt/NAME
  mkdir -p "$R/zm-mnt/$2"
  mountpoint -q "$R/zm-mnt/$2" && fusermount3 -u "$R/zm-mnt/$2"
  "$ZM/build/zeromount" "$1" "$R/zm-mnt/$2"
}

# load ROW NPROC STAGE LOAD_DIR REFERENCE [--save-dir D]: one native load at NPROC ranks.
load() {
  local row=$1 n=$2 stage=$3 dir=$4 ref=$5
  shift 5
  (cd /tmp/oracle && timeout 900 ./run_in_env.sh python3 harness/launch.py --nproc "$n" harness/muon_run_zm.py \
    --stage "$stage" --load-dir "$dir" --reference "$ref" --result "/oracle/out32/$row.json" "$@" \
    >"$OUT/$row.log" 2>&1) || true
  ROWS+=("$row|$n|$stage|$dir")
}

for src in muon_z1_ws2 muon_z2_ws2; do
  s=${src:6:1}
  o=$((3 - s))  # the other stage
  ref=/zm/tests/fixtures/$src/meta/live_state.pt
  zm_mount "$ZM/tests/fixtures/$src/checkpoint" "$src"
  load "$src-real-z$s-dp2" 2 "$s" "/zm/tests/fixtures/$src/checkpoint" "$ref"
  load "$src-real-z$o-dp2" 2 "$o" "/zm/tests/fixtures/$src/checkpoint" "$ref"
  load "$src-own-z$s-dp2" 2 "$s" "/zm-mnt/$src/layouts/zero$s-dp2-fp32" "$ref"
  load "$src-layout-z$o-dp2" 2 "$o" "/zm-mnt/$src/layouts/zero$o-dp2-fp32" "$ref"
  # A DP change and back through DeepSpeed's own save: 2 -> 3 (faked) -> saved at 3 -> 2 (faked).
  rm -rf "/tmp/oracle/out32/$src-saved-dp3"
  load "$src-layout-z2-dp3" 3 2 "/zm-mnt/$src/layouts/zero2-dp3-fp32" "$ref" --save-dir "/oracle/out32/$src-saved-dp3"
  zm_mount "/tmp/oracle/out32/$src-saved-dp3" "$src-dp3"
  load "$src-roundtrip-dp3-z${s}dp2" 2 "$s" "/zm-mnt/$src-dp3/layouts/zero$s-dp2-fp32" "$ref"
  load "$src-layout-z1-dp4" 4 1 "/zm-mnt/$src/layouts/zero1-dp4-fp32" "$ref"
  # The universal folder (momentum_buffer.pt per Muon parameter), loaded by DeepSpeed 0.19.6's own
  # universal loader: at 1 rank (where no parameter spans ranks) and at 2.
  for n in 1 2; do
    ORACLE_EXTRA_ENV=ZM_UNIVERSAL=1 load "$src-universal-z$s-dp$n" "$n" "$s" "/zm-mnt/$src" "$ref"
  done
  fusermount3 -u "$R/zm-mnt/$src-dp3"
  fusermount3 -u "$R/zm-mnt/$src"
done

/usr/bin/python3 - "${ROWS[@]}" <<'PY'
import json, os, sys
import torch
print("| case | ranks | load stage | loaded from | masters at load | next step vs the uninterrupted run | next step vs a load of DeepSpeed's own files at the same ranks |")
print("|---|---|---|---|---|---|---|")
for row in sys.argv[1:]:
    name, n, stage, d = row.split("|")
    p = f"/tmp/oracle/out32/{name}.json"
    r = json.load(open(p)) if os.path.exists(p) else {"status": "no result"}
    if r.get("status") != "ok":
        err = r.get("error", r["status"]).replace("|", "/").replace("\n", " ")[:160]
        print(f"| {name} | {n} | ZeRO-{stage} | `{d}` | failed: {err} | |")
        continue
    at = "bit-equal" if not r["mismatches"] else f"{len(r['mismatches'])} differ"
    nxt = "bit-equal" if r["next_step_equal"] else f"max rel. diff {r['next_step_max_rel_diff']:.3g}"
    # The real files were saved at 2 ranks: a load of them at the same ranks and stage is the floor.
    real = f"/tmp/oracle/out32/{name.split('-')[0]}-real-z{stage}-dp2.next.pt"
    mine = p[:-5] + ".next.pt"
    vs = "-"
    if n == "2" and "-real-" not in name and os.path.exists(real) and os.path.exists(mine):
        a, b = torch.load(mine), torch.load(real)
        vs = "bit-equal" if all(torch.equal(a[k], b[k]) for k in b) else "differs"
    print(f"| {name} | {n} | ZeRO-{stage} | `{d}` | {at} | {nxt} | {vs} |")
PY
