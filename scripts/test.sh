#!/usr/bin/env bash
# Builds and runs every test the project has on this machine:
#   1. the default build (CUDA kernels too when nvcc is present; GPU tests skip without a GPU) and ctest;
#   2. the CPU build with AddressSanitizer + UndefinedBehaviorSanitizer (also proves a build without CUDA)
#      and ctest;
#   3. the committed fixtures re-checked by the CLI and their manifest;
#   4. the Python fixture kit's tests (tools/python, in the .venv made by install-deps.sh).
#   5. packaging: `cmake --install` into a temporary prefix and a project outside the tree built against it,
#      then `pip install .` into a fresh virtualenv (scripts/packaging-test.sh).
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

echo "== packaging: cmake --install + consumer project, pip install ."
bash scripts/packaging-test.sh
