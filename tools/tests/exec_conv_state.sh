#!/usr/bin/env bash
# The conv component through the target protocol (1.5), end to end: `replayssm fuzz --conv on` drives the NumPy
# example target (tools/python/examples/numpy_replay.py, conv windows in numpy_conv_slots.py) and it passes with
# the conv component covered; its seeded conv_commit_keeps_window_tail (every draft kept in the window) is caught
# by the committed-window check. Skips (exit 77) when no Python with NumPy is found: $REPLAYSSM_PYTHON, the given
# interpreter, then this checkout's .venv.
set -u
BIN="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY=""
for p in "${REPLAYSSM_PYTHON:-}" "${2:-}" "$ROOT/.venv/bin/python"; do
  if [ -n "$p" ] && "$p" -c "import numpy" >/dev/null 2>&1; then PY="$p"; break; fi
done
[ -n "$PY" ] || { echo "exec_conv_state: no Python with NumPy; skipped"; exit 77; }
TARGET="$PY $ROOT/tools/python/examples/numpy_replay.py"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "exec_conv_state: $*" >&2; exit 1; }
fuzz() { "$BIN" fuzz --conv on --dump-dir "$WORK" --target "exec:$TARGET $1" "${@:2}"; }

for preset in tiny-gdn tiny-kda; do
  out="$(fuzz "" --preset $preset --cases 15 --seed 5 2>&1)" || fail "the example failed its $preset conv campaign: $out"
  echo "$out" | grep -q "15 cases passed" || fail "no passing campaign line ($preset): $out"
  echo "$out" | grep -qi "not covered.*conv" && fail "the conv component reported not covered ($preset): $out"
done
out="$(fuzz "--fault conv_commit_keeps_window_tail" --preset tiny-gdn --cases 100 --seed 1 2>&1)"; rc=$?
[ $rc -eq 1 ] || fail "conv_commit_keeps_window_tail not caught (rc $rc): $out"
echo "$out" | grep -q "committed conv window differs" || fail "conv_commit_keeps_window_tail caught by another check: $out"
echo "exec_conv_state: ok"
