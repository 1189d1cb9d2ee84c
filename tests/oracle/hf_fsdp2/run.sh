#!/usr/bin/env bash
# Issue 41: a tiny Llama trained with plain torch FSDP2 (W=2), saved as fsdp2 and as the Trainer/Accelerate
# layout; each run folder mounted with zeromount; from_pretrained of <T>_fp32/ vs the live model, bit for bit.
# Run as root. HF_ROOTFS: the HF chroot (../shared/oracle/hf/setup_hf.sh); HF_WORK: scratch (the chroot's /w).
set -euo pipefail
S="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$S/../../.." && pwd)"
: "${W:=2}" "${HF_ROOTFS:=/tmp/ds-hf/rootfs}" "${HF_WORK:=/tmp/hf41d/work}" "${ZM:=$REPO/build/zeromount}"
HFDIR=${HFDIR:-$REPO/../shared/oracle/hf}
run() { ORACLE_ROOTFS=$HF_ROOTFS HF_WORK=$HF_WORK "$HFDIR/run_in_env.sh" "$@"; }
mkdir -p "$HF_WORK" && cp "$S"/*.py "$HF_WORK/"
L=llama$([ "$W" = 2 ] || echo "$W")     # llama (W=2), llama3 (W=3)
[ -f "$HF_WORK/$L/live_model.pt" ] || run python3 /w/train_fsdp2_llama.py --out /w/$L --world "$W" --steps 2
for s in fsdp2 trainer; do
  mkdir -p "$HF_ROOTFS/zm-mnt/h41$L-$s"
  mountpoint -q "$HF_ROOTFS/zm-mnt/h41$L-$s" || "$ZM" "$HF_WORK/$L/$s" "$HF_ROOTFS/zm-mnt/h41$L-$s"
done
rc=0
run python3 /w/check_from_pretrained.py /w/$L/live_model.pt /zm-mnt/h41$L-fsdp2/step-2_fp32 || rc=1
run python3 /w/check_from_pretrained.py /w/$L/live_model.pt /zm-mnt/h41$L-trainer/checkpoint-2_fp32 || rc=1
exit $rc
