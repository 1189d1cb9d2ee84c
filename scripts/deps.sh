#!/usr/bin/env bash
# Installs the Debian 12 packages zeromount builds and tests with (idempotent; quick when done).
set -euo pipefail
PKGS=(cmake g++ ninja-build pkg-config lld
      libfuse3-dev fuse3 libxxhash-dev libspdlog-dev libcli11-dev libgtest-dev nlohmann-json3-dev
      libtorch-dev python3-torch python3-numpy python3-pytest
      clang clang-format libclang-rt-14-dev xz-utils
      chromium fonts-dejavu-core   # the report pages are tested in a real browser (tests/py/test_report.py)
      dpkg-dev debootstrap         # the .deb's Depends (dpkg-shlibdeps); it is installed in a clean root (test_packaging.py)
      rclone)                      # mounts the fake S3 bucket with FUSE (test_s3.py, bench/remote.py)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# node and npm run the fake S3 server (tests/s3/); any install of them will do (Debian's by default).
command -v npm >/dev/null || missing+=(nodejs npm)
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  # --no-install-recommends keeps libtorch-dev at ~214 MB of downloads instead of ~386 MB.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# s3rver, the fake S3 server, from package-lock.json into tests/s3/node_modules (ignored by git).
s3=$(cd "$(dirname "$0")/.." && pwd)/tests/s3
if [ ! -f "$s3/node_modules/.package-lock.json" ] || [ "$s3/package-lock.json" -nt "$s3/node_modules/.package-lock.json" ]; then
  echo "installing s3rver (npm ci in tests/s3)"
  (cd "$s3" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
