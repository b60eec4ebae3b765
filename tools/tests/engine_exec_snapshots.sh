#!/usr/bin/env bash
# The engine protocol's prefix snapshots and migration, end to end: `replayssm fuzz --level engine` drives the
# NumPy example engine (tools/python/examples/numpy_engine.py) with snapshots and migrations on and it passes;
# its seeded track-step slip (snapshot_at_run_end) is caught; claiming neither capability is reported as not
# covered; --target-timeout gives up an engine that never answers. Skips (exit 77) when no Python with NumPy
# is found: $REPLAYSSM_PYTHON, the given interpreter, then this checkout's .venv.
set -u
BIN="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
NAME=engine_exec_snapshots
source "$ROOT/tools/tests/numpy_python.sh"
ENGINE="$PY $ROOT/tools/python/examples/numpy_engine.py"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "engine_exec_snapshots: $*" >&2; exit 1; }
fuzz() { "$BIN" fuzz --level engine --preset tiny-gdn --dump-dir "$WORK" --target "exec:$ENGINE $1" "${@:2}"; }

out="$(fuzz "" --cases 20 --seed 7 2>&1)" || fail "the example engine failed its campaign: $out"
echo "$out" | grep -q "20 cases passed" || fail "no passing campaign line: $out"
echo "$out" | grep -q "not covered" && fail "snapshots or migrations reported not covered: $out"
out="$(fuzz "--fault snapshot_at_run_end" --cases 100 2>&1)"; rc=$?
[ $rc -eq 1 ] || fail "snapshot_at_run_end not caught (rc $rc): $out"
echo "$out" | grep -q "prefix snapshot at" || fail "snapshot_at_run_end caught by another check: $out"
out="$(fuzz "--claims none" --cases 3 2>&1)" || fail "an engine claiming neither failed: $out"
echo "$out" | grep -q "not covered: prefix snapshots and snapshot_hit" || fail "not covered line missing: $out"
# The start-up budget holds at the engine level too: an engine that never answers hello is given up after it,
# its verdict naming the budget. `sleep` never answers, so the bound below (far under its 100000 s) does not
# depend on how loaded the machine is.
start=$SECONDS
out="$("$BIN" fuzz --level engine --preset tiny-gdn --target "exec:sleep 100000" --target-startup-timeout 1 --cases 1 2>&1)"; rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "start-up budget 1 s" || fail "a silent engine was not given up (rc $rc): $out"
[ $((SECONDS - start)) -lt 600 ] || fail "--target-startup-timeout 1 took $((SECONDS - start)) s at the engine level"
echo "engine_exec_snapshots: ok"
