#!/usr/bin/env bash
# The test command: Debian packages, build, then every test (unit, LibTorch, real mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh -DZM_WERROR=ON "$@"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2
