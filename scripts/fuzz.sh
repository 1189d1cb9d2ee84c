#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan), replays the committed corpora, then fuzzes each
# target for ${1:-60} seconds. New inputs go to a scratch folder; crashes fail the run and are kept
# in build-fuzz/crashes-<target>/ (turn each into a regression test).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
./scripts/deps.sh
CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZM_FUZZ=ON -DZM_TORCH_TESTS=OFF >/dev/null
cmake --build build-fuzz --target fuzz_pt fuzz_pickle fuzz_index -j"$(nproc)"
for t in pt pickle index; do
  corpus=build-fuzz/corpus/$t
  rm -rf "$corpus" && mkdir -p build-fuzz/corpus && tar -xJf "tests/fuzz/corpus/$t.tar.xz" -C build-fuzz/corpus
  scratch=$(mktemp -d)
  mkdir -p "build-fuzz/crashes-$t"
  echo "== fuzz_$t: replaying $(ls "$corpus" | wc -l) corpus inputs"
  "build-fuzz/tests/fuzz/fuzz_$t" -runs=0 -rss_limit_mb=4096 "$corpus" 2>&1 | tail -n 2
  echo "== fuzz_$t: fuzzing for ${SECS} s"
  "build-fuzz/tests/fuzz/fuzz_$t" "$scratch" "$corpus" -max_total_time="$SECS" -rss_limit_mb=4096 \
      -artifact_prefix="build-fuzz/crashes-$t/" -print_final_stats=1 2>&1 | grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::new_units_added)|ERROR|SUMMARY" || true
  rm -rf "$scratch"
  if [ -n "$(ls -A "build-fuzz/crashes-$t")" ]; then echo "fuzz_$t found crashes: build-fuzz/crashes-$t"; exit 1; fi
done
echo "fuzzing: 3 passed, 0 failed"
