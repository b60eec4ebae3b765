#!/usr/bin/env bash
# Packaging checks, run by scripts/test.sh after the default build (./build):
#   1. `cmake --install` into a temporary prefix; packaging/consumer (a project outside the tree) configured with
#      find_package(replayssm CONFIG REQUIRED), built and run against it; the installed CLI and fixtures checked;
#   2. `pip install .` into a fresh virtualenv: the wheel's `replayssm` and `python -m replayssm_kit` print one
#      version, and the installed fixtures match their manifest;
#   3. `pip install .` without two build dependencies stops naming them.
# Each step prints its duration. Needs what scripts/install-deps.sh installs (python3-venv, PyPI access).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
step() { echo "-- $1"; SECONDS=0; }
took() { echo "   (${SECONDS} s)"; }

step "cmake --install build into a temporary prefix"
cmake --install build --prefix "$WORK/prefix" >/dev/null
"$WORK/prefix/bin/replayssm" --version
"$WORK/prefix/bin/replayssm" fixtures manifest "$WORK/prefix/share/replayssm/fixtures" --check
took

step "packaging/consumer against the installed package"
cmake -S packaging/consumer -B "$WORK/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null
cmake --build "$WORK/consumer" -j "$JOBS" >/dev/null
"$WORK/consumer/consumer"
took

step "pip install . into a fresh virtualenv"
python3 -m venv "$WORK/venv"
# build-dir under the repository's ignored build-wheel/: a second run here rebuilds only what changed.
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check . -C build-dir=build-wheel
cli="$("$WORK/venv/bin/replayssm" --version)"
kit="$(cd "$WORK" && "$WORK/venv/bin/python" -m replayssm_kit --version)"
echo "$cli / $kit"
[ "${cli#replayssm }" = "${kit#replayssm_kit }" ] || { echo "CLI and kit versions differ: $cli / $kit"; exit 1; }
(cd "$WORK" && "$WORK/venv/bin/python" -c "import replayssm_kit, safetensors, ml_dtypes; print('kit', replayssm_kit.__file__)")
"$WORK/venv/bin/replayssm" fixtures manifest "$WORK/venv/share/replayssm/fixtures" --check
took

step "pip install . without CLI11 and rapidcheck stops naming them"
if "$WORK/venv/bin/python" -m pip install --disable-pip-version-check . -C build-dir="$WORK/nodeps" \
     -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_rapidcheck=ON \
     >"$WORK/nodeps.log" 2>&1; then
  echo "pip install succeeded without CLI11 and rapidcheck"; exit 1
fi
grep -q "CLI11 (Debian package libcli11-dev)" "$WORK/nodeps.log" &&
  grep -q "rapidcheck (Debian package librapidcheck-dev)" "$WORK/nodeps.log" ||
  { cat "$WORK/nodeps.log"; echo "the failed pip install did not name the missing packages"; exit 1; }
grep -A3 "missing build dependencies" "$WORK/nodeps.log" | sed 's/^/   /'
took
echo "packaging: ok"
