#!/usr/bin/env bash
# Builds and runs every test the project has on this machine:
#   1. the default build (CUDA kernels too when nvcc is present; GPU tests skip without a GPU) and ctest;
#   2. the CPU build with AddressSanitizer + UndefinedBehaviorSanitizer (also proves a build without CUDA)
#      and ctest;
#   3. the committed fixtures re-checked by the CLI and their manifest;
#   4. the Python fixture kit's tests (tools/python, in the .venv made by install-deps.sh);
#   5. the libFuzzer harnesses of every parser (clang), each for 30 s from its seed corpus (scripts/fuzz.sh
#      --short; docs/fuzzing.md). FUZZ=0 skips this step;
#   6. packaging: `cmake --install` into a temporary prefix and a project outside the tree built against it,
#      then `pip install .` into a fresh virtualenv (scripts/packaging-test.sh). PACKAGING=0 skips this step.
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
./build/tools/replayssm fixtures manifest fixtures --check

echo "== Python fixture kit"
PY="${PYTHON:-$PWD/.venv/bin/python}"
# pytest exits 5 when it collected no test: that is a failure here, like any other non-zero code.
(cd tools/python && "$PY" -m pytest -q tests) || { rc=$?; echo "pytest failed (exit $rc)"; exit 1; }

if [ "${FUZZ:-1}" != 0 ]; then
  echo "== libFuzzer harnesses, 30 s each (scripts/fuzz.sh --short)"
  fuzz_start=$(date +%s)
  bash scripts/fuzz.sh --short --jobs "${FUZZ_JOBS:-3}"
  echo "fuzzing step (build included) took $(( $(date +%s) - fuzz_start )) s"
fi

if [ "${PACKAGING:-1}" != 0 ]; then
  echo "== packaging: cmake --install + consumer project, pip install . (scripts/packaging-test.sh)"
  packaging_start=$(date +%s)
  bash scripts/packaging-test.sh
  echo "packaging step took $(( $(date +%s) - packaging_start )) s"
fi
