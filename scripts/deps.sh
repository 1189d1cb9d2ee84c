#!/usr/bin/env bash
# Installs the Debian 12 packages zeromount builds and tests with (idempotent; quick when done).
set -euo pipefail
PKGS=(cmake g++ ninja-build pkg-config lld
      libfuse3-dev fuse3 libxxhash-dev libspdlog-dev libcli11-dev libgtest-dev
      libtorch-dev python3-torch python3-numpy python3-pytest
      clang clang-format libclang-rt-14-dev xz-utils
      chromium fonts-dejavu-core   # the report pages are tested in a real browser (tests/py/test_report.py)
      dpkg-dev debootstrap)        # the .deb's Depends (dpkg-shlibdeps); it is installed in a clean root (test_packaging.py)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "installing: ${missing[*]}"
$SUDO apt-get update -qq
# --no-install-recommends keeps libtorch-dev at ~214 MB of downloads instead of ~386 MB.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
