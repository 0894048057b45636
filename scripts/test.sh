#!/usr/bin/env bash
# Sets up this machine (Debian 12), then builds and runs the whole test
# suite twice: an optimised build with warnings as errors, and a build under
# AddressSanitizer + UndefinedBehaviorSanitizer. Also checks formatting.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
jobs=$(nproc)

echo "== format"
git ls-files '*.h' '*.cpp' | xargs clang-format --dry-run -Werror

echo "== release build, warnings as errors"
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_WERROR=ON >/dev/null
cmake --build build-test -j "$jobs"
ctest --test-dir build-test --output-on-failure -j "$jobs"

echo "== sanitizer build (ASan + UBSan)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_SANITIZE=ON -DKVTIER_WERROR=ON \
  -DKVTIER_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs"
