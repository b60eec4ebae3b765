#!/usr/bin/env bash
# Regenerates fixtures/peer/ with the CPU scripts, re-checks them with the reference and rewrites the manifest.
#   python3 -m venv ~/peer-venv && ~/peer-venv/bin/pip install -r tools/peer/requirements.txt
#   PYTHON=~/peer-venv/bin/python bash tools/peer/run_all.sh [path/to/replayssm]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
CLI="${1:-./build-cpu/tools/replayssm}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
for s in gen_transformers_gdn gen_transformers_kda gen_transformers_qwen35_model gen_transformers_mrope gen_fla_naive; do
  (cd tools/peer && "$PY" "$s.py")
done
"$CLI" check fixtures/peer --quiet
"$CLI" fixtures manifest fixtures
(cd tools/peer && "$PY" known_differences.py "$(cd ../.. && realpath "$CLI")")
