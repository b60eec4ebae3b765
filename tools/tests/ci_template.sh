#!/usr/bin/env bash
# The CI template (tools/ci/github-actions-replayssm.yml) linted and its jobs run locally (ci_template.py). Needs a
# Python with NumPy, PyYAML, check-jsonschema and pytest-xdist (scripts/install-deps.sh puts them in .venv);
# skips (exit 77) naming what is missing.
set -u
BIN="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
NAME=ci_template
source "$ROOT/tools/tests/numpy_python.sh"
"$PY" -c "import yaml, xdist" 2>/dev/null && [ -x "$(dirname "$PY")/check-jsonschema" ] ||
  { echo "ci_template: needs PyYAML, pytest-xdist and check-jsonschema in $PY's environment; skipped"; exit 77; }
exec "$PY" "$ROOT/tools/tests/ci_template.py" "$BIN"
