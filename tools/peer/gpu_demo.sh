#!/usr/bin/env bash
# Checks the transformers torch GDN/KDA functions running on a GPU against the committed fixtures, through the
# Python kit. Needs python3 with torch, transformers, numpy and safetensors; no network, no build.
#   bash tools/peer/gpu_demo.sh                 # CUDA
#   bash tools/peer/gpu_demo.sh --device cpu    # same check without a GPU
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" tools/peer/gpu_demo.py "$@"
