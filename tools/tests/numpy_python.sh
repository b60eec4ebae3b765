# Sourced by the end-to-end scripts that drive the NumPy examples: sets PY to the first Python with NumPy
# among $REPLAYSSM_PYTHON, the interpreter given as $2 of the sourcing script, and the checkout's .venv, or
# skips the test (exit 77) naming it. Needs ROOT (the checkout) and NAME (the test) set.
PY=""
for p in "${REPLAYSSM_PYTHON:-}" "${2:-}" "$ROOT/.venv/bin/python"; do
  if [ -n "$p" ] && "$p" -c "import numpy" >/dev/null 2>&1; then PY="$p"; break; fi
done
[ -n "$PY" ] || { echo "$NAME: no Python with NumPy; skipped"; exit 77; }
