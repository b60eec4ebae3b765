#!/usr/bin/env bash
# Builds and runs every test the project has on this machine:
#   1. the default build (CUDA kernels too when nvcc is present; GPU tests skip without a GPU) and ctest;
#   2. the CPU build with AddressSanitizer + UndefinedBehaviorSanitizer (also proves a build without CUDA)
#      and ctest;
#   3. the committed golden fixtures re-checked by the CLI.
# RC_PARAMS (RapidCheck) is honoured, e.g. RC_PARAMS="seed=42 max_success=1000" bash scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"

echo "== default build"
cmake --preset default >/dev/null
cmake --build --preset default -j "$JOBS"
ctest --preset default -j "$JOBS"

echo "== AddressSanitizer + UBSan build (CPU only)"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --preset asan -j "$JOBS"

echo "== committed fixtures"
./build/tools/replayssm check fixtures --quiet
