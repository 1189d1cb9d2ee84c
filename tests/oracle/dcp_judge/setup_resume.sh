#!/bin/bash
R=/tmp/ds-oracle/rootfs
echo "== resume: dpkg --configure -a in chroot"
chroot $R /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive dpkg --configure -a
echo "dpkg rc=$?"
cd /tmp/oracle && DS_MIRROR="${DS_MIRROR:?the git directory of a deepspeedai/DeepSpeed copy}" ./setup_env.sh
echo rc=$?
date -u +%s > /tmp/setup_end
