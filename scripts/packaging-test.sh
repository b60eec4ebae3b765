#!/usr/bin/env bash
# Packaging checks, run by scripts/test.sh after the default build (./build; BUILD_DIR=build-cpu for another):
#   1. `cmake --install` into a temporary prefix; packaging/consumer (a project outside the tree) configured with
#      find_package(replayssm CONFIG REQUIRED), built and run against it; the installed CLI and fixtures checked;
#   2. `pip install .` into a fresh virtualenv: the wheel's `replayssm` and `python -m replayssm_kit` print one
#      version, and the installed fixtures match their manifest;
#   3. `pip install .` without two build dependencies stops naming them.
# Each step prints its duration. Needs what scripts/install-deps.sh installs (python3-venv, PyPI access).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"
BUILD_DIR="${BUILD_DIR:-build}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
step() { echo "-- $1"; SECONDS=0; }
took() { echo "   (${SECONDS} s)"; }
# Runs a command with its output kept aside, shown only when it fails.
quiet() { "$@" >"$WORK/step.log" 2>&1 || { cat "$WORK/step.log"; echo "failed: $*"; exit 1; }; }

step "cmake --install $BUILD_DIR into a temporary prefix"
quiet cmake --install "$BUILD_DIR" --prefix "$WORK/prefix"
"$WORK/prefix/bin/replayssm" --version
"$WORK/prefix/bin/replayssm" fixtures manifest "$WORK/prefix/share/replayssm/fixtures" --check
took

step "packaging/consumer against the installed package"
quiet cmake -S packaging/consumer -B "$WORK/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix"
quiet cmake --build "$WORK/consumer" -j "$JOBS"
"$WORK/consumer/consumer"
took

step "pip install . into a fresh virtualenv"
python3 -m venv "$WORK/venv"
# build-dir under the repository's ignored build-wheel/: a second run here rebuilds only what changed.
"$WORK/venv/bin/python" -m pip install --disable-pip-version-check . -C build-dir=build-wheel >"$WORK/pip.log" 2>&1 ||
  { cat "$WORK/pip.log"; echo "pip install . failed"; exit 1; }
# The wheel's tag: any Python 3 (the CLI does not use the Python ABI), this machine's architecture, plain
# linux_<arch> (it links the system's shared libraries; not manylinux, docs/packaging.md).
wheel="$(sed -n 's/.*Created wheel for replayssm: filename=\([^ ]*\.whl\).*/\1/p' "$WORK/pip.log")"
echo "   wheel: $wheel"
[ "$wheel" = "replayssm-$(cat VERSION)-py3-none-linux_$(uname -m).whl" ] ||
  { cat "$WORK/pip.log"; echo "unexpected wheel name or tag: '$wheel'"; exit 1; }
cli="$("$WORK/venv/bin/replayssm" --version)"
kit="$(cd "$WORK" && "$WORK/venv/bin/python" -m replayssm_kit --version)"
echo "$cli / $kit"
[ "${cli#replayssm }" = "${kit#replayssm_kit }" ] || { echo "CLI and kit versions differ: $cli / $kit"; exit 1; }
(cd "$WORK" && "$WORK/venv/bin/python" -c "import replayssm_kit, safetensors, ml_dtypes; print('kit', replayssm_kit.__file__)")
"$WORK/venv/bin/replayssm" fixtures manifest "$WORK/venv/share/replayssm/fixtures" --check
# The installed CLI runs a campaign (RapidCheck linked in, nothing read from the source tree). Three
# short cases cannot exercise every claimed value, so the verdict must be INCOMPLETE (exit 3) with the
# three cases passed: a CONFORMANT here would be a verdict claiming what no case checked.
rc=0
(cd "$WORK" && "$WORK/venv/bin/replayssm" fuzz --target replay --preset tiny-gdn --layers 1 --cases 3 \
   --max-commands 10 --dump-dir "$WORK") >"$WORK/fuzz.log" 2>&1 || rc=$?
sed -n '1,3p' "$WORK/fuzz.log" | sed 's/^/   /'
[ "$rc" = 3 ] && grep -q "^replay   ok    3 cases passed" "$WORK/fuzz.log" &&
  grep -q "^== verdict for replay: INCOMPLETE" "$WORK/fuzz.log" ||
  { cat "$WORK/fuzz.log"; echo "installed fuzz: expected 3 passing cases and INCOMPLETE (exit 3), got exit $rc"; exit 1; }
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
