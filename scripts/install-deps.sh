#!/usr/bin/env bash
# Installs the build and test dependencies from Debian packages (Debian 12 or newer). Run as root, or with
# sudo available. CUDA is optional: when nvcc is on PATH the kernels are built too.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config \
  libeigen3-dev libgtest-dev libgmock-dev librapidcheck-dev nlohmann-json3-dev libcli11-dev \
  libssl-dev \
  python3 python3-venv clang libclang-rt-dev \
  chromium >/dev/null  # clang + its libFuzzer runtime: scripts/fuzz.sh; chromium: the HTML report's browser test
# Python fixture kit tests (tools/python): Debian 12 refuses system-wide pip installs, so use a venv in the
# repository (ignored by git).
python3 -m venv .venv
# wheel: building the kit from a copied folder without build isolation (tests/test_version.py); pytest-xdist: the
# pytest plugin's tests under -n; pyyaml and check-jsonschema: the CI template's local run and its schema lint
# (tools/tests/ci_template.py; check-jsonschema's GitHub workflow schema ships inside its wheel).
.venv/bin/python -m pip install -q --disable-pip-version-check numpy safetensors ml_dtypes pytest wheel pytest-xdist \
  pyyaml check-jsonschema
echo "dependencies installed"
