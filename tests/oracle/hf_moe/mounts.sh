#!/usr/bin/env bash
# host: mount|umount every run under $ORACLE_ROOTFS/zm-mnt: NAME (default: saved names), NAME-s (-o max_shard_size=100KB),
# NAME-r (-o weights_names=runtime).  mounts.sh mount|umount NAME...
set -uo pipefail
: "${ORACLE_ROOTFS:=/tmp/hf-oracle/rootfs}"; : "${RUNS:=/tmp/hf-oracle/work/runs}"; : "${ZM:=$(cd "$(dirname "$0")/../../.." && pwd)/build/zeromount}"
op=$1; shift
for n in "$@"; do
  for v in "" "-s" "-r"; do
    m=$ORACLE_ROOTFS/zm-mnt/$n$v
    if [ "$op" = mount ]; then
      mkdir -p $m; mountpoint -q $m && continue
      opts=(); [ "$v" = -s ] && opts=(-o max_shard_size=100KB); [ "$v" = -r ] && opts=(-o weights_names=runtime)
      $ZM "${opts[@]}" $RUNS/$n $m || echo "MOUNT FAILED $n$v"
    else
      mountpoint -q $m && fusermount3 -u $m
    fi
  done
done
