#!/usr/bin/env bash
# The main job: mount the bundled ZeRO-3 sample checkpoint, show the made-up universal folder,
# load one universal file with torch, and unmount.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
[ -x build/zeromount ] || ./scripts/build.sh >/dev/null
SRC=tests/fixtures/z3_ws2_fp32_pg2_sg200/checkpoint
MNT=$(mktemp -d /tmp/zeromount-demo.XXXXXX)
trap 'fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT" 2>/dev/null; rmdir "$MNT"' EXIT
build/zeromount inspect "$SRC" | head -9
build/zeromount "$SRC" "$MNT"
echo; echo "\$ ls $MNT"; ls "$MNT"
echo; echo "\$ ls -l $MNT/global_step3_universal $MNT/global_step3_universal/zero/fc1.weight"
ls -l "$MNT/global_step3_universal" "$MNT/global_step3_universal/zero/fc1.weight"
echo; echo "\$ python3 -c 'torch.load(.../zero/fc1.weight/fp32.pt, weights_only=True)'"
/usr/bin/python3 -c "import torch,sys; d=torch.load(sys.argv[1], weights_only=True); print({k: (tuple(v.shape), v.dtype, float(v.norm())) if hasattr(v,'shape') else v for k,v in d.items()})" \
  "$MNT/global_step3_universal/zero/fc1.weight/fp32.pt"
