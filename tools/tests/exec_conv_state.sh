#!/usr/bin/env bash
# The conv component through the target protocol (1.5), end to end: `replayssm fuzz --conv on` drives the NumPy
# example target (tools/python/examples/numpy_replay.py, conv windows in numpy_conv_slots.py) and it passes with
# the conv component covered; each of its seeded conv faults is caught by the check that sees it:
# conv_commit_keeps_window_tail (every draft kept in the window) and conv_window_not_copied (a copy leaves the
# window behind) by the committed-window check, conv_fresh_keeps_tenant_window (a fresh prefill reads the old
# tenant's window) by the conv outputs. Skips (exit 77) when no Python with NumPy is found: $REPLAYSSM_PYTHON, the given
# interpreter, then this checkout's .venv.
set -u
BIN="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
NAME=exec_conv_state
source "$ROOT/tools/tests/numpy_python.sh"
TARGET="$PY $ROOT/tools/python/examples/numpy_replay.py"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "exec_conv_state: $*" >&2; exit 1; }
fuzz() { "$BIN" fuzz --conv on --dump-dir "$WORK" --target "exec:$TARGET $1" "${@:2}"; }

for preset in tiny-gdn tiny-kda; do
  # 15 cases pass but exercise too little of what the example claims for a verdict: INCOMPLETE, exit 3.
  out="$(fuzz "" --preset $preset --cases 15 --seed 5 2>&1)"; rc=$?
  [ $rc -eq 3 ] || fail "the example's $preset conv campaign did not end INCOMPLETE (rc $rc): $out"
  echo "$out" | grep -q "15 cases passed" || fail "no passing campaign line ($preset): $out"
  echo "$out" | grep -qi "not covered.*conv" && fail "the conv component reported not covered ($preset): $out"
done
for pair in "conv_commit_keeps_window_tail:committed conv window differs" \
            "conv_window_not_copied:committed conv window differs" \
            "conv_fresh_keeps_tenant_window:conv outputs differ from the truth"; do
  fault="${pair%%:*}"; seen="${pair#*:}"
  out="$(fuzz "--fault $fault" --preset tiny-gdn --cases 100 --seed 1 2>&1)"; rc=$?
  [ $rc -eq 1 ] || fail "$fault not caught (rc $rc): $out"
  echo "$out" | grep -q "$seen" || fail "$fault caught by another check than '$seen': $out"
done
echo "exec_conv_state: ok"
