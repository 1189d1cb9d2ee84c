# sourced: common paths. The scripts' folder, the repository and ../shared beside it; results and new
# fixtures in a scratch folder (OUT); ZM: a copy of the binary, so that a rebuild does not change it mid-run.
S="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$S/../../.." && pwd)"
export ORACLE=${ORACLE:-/tmp/oracle} R=${R:-/tmp/ds-oracle/rootfs} OUT=${OUT:-/tmp/zm-dcp-oracle}
export ZM=${ZM:-$REPO/build/zeromount} RESULTS=${RESULTS:-$OUT/results}
export SHARED_FX=${SHARED_FX:-$REPO/../shared/fixtures/dcp} NEW_FX=${NEW_FX:-$OUT/fixtures}
# chroot views: /fx/shared = shared fixtures (ro bind), /fx/new = new fixtures (ro bind), /zm-mnt/NAME = mounts
bind_fixtures() {
  mkdir -p "$R/fx/shared" "$R/fx/new"
  mountpoint -q "$R/fx/shared" || mount --bind -o ro "$SHARED_FX" "$R/fx/shared"
  mountpoint -q "$R/fx/new" || mount --bind -o ro "$NEW_FX" "$R/fx/new"
}
mount_zm() {  # mount_zm NAME SRC
  mkdir -p "$R/zm-mnt/$1"
  mountpoint -q "$R/zm-mnt/$1" || "$ZM" "$2" "$R/zm-mnt/$1"
}
unmount_all() {
  for m in "$R"/zm-mnt/*; do mountpoint -q "$m" && fusermount3 -u "$m"; done
  for m in "$R/fx/shared" "$R/fx/new"; do mountpoint -q "$m" && umount "$m"; done
  true
}
