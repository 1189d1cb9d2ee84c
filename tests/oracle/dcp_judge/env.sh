# sourced: common paths
export ORACLE=${ORACLE:-/tmp/oracle} R=${R:-/tmp/ds-oracle/rootfs}
export ZM=${ZM:-/work/oracle-out/bin/zeromount} RESULTS=${RESULTS:-/work/oracle-out/results}
export SHARED_FX=${SHARED_FX:-/work/shared/fixtures/dcp} NEW_FX=${NEW_FX:-/work/oracle-out/fixtures}
S=/work/oracle-out/scripts
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
