#!/usr/bin/env bash
# MRoPE sessions through the target protocol (docs/mrope.md section 11), end to end with the NumPy example:
# the example is CONFORMANT with every model it claims; a target that claims no mrope is INCOMPLETE, never passed;
# a seeded fault is NOT CONFORMANT with the failing command, its token and a reproduce line, and that line
# fails again alone; the failing case exported as a trace fails `check --target` through the faulty example and
# passes through the correct one (and `check` by the binary). Skips (exit 77) without a Python with NumPy.
set -u
BIN="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
NAME=mrope_sessions
source "$ROOT/tools/tests/numpy_python.sh"
EX="$ROOT/tools/python/examples/numpy_replay.py"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "mrope_sessions: $*" >&2; exit 1; }

"$BIN" mrope fuzz --target "exec:$PY $EX" --cases 10 --json "$WORK/ok.json" >"$WORK/ok.log" 2>&1; rc=$?
[ $rc -eq 0 ] || { cat "$WORK/ok.log"; fail "the example: exit $rc, expected 0 (CONFORMANT)"; }
grep -q "(MRoPE sessions): CONFORMANT" "$WORK/ok.log" || fail "the example's verdict is not CONFORMANT"
"$PY" -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert r['verdict'] == 'CONFORMANT' and not r['unmet'], r
assert r['coverage']['models'] == {m: 10 for m in ('qwen2-vl', 'qwen2.5-vl', 'qwen3-vl', 'qwen3.5')}, r['coverage']
" "$WORK/ok.json" || fail "the JSON report does not hold 10 cases of every model"

"$BIN" mrope fuzz --target "exec:$PY $EX --claims nothing" >"$WORK/none.log" 2>&1; rc=$?
[ $rc -eq 3 ] || { cat "$WORK/none.log"; fail "a target claiming no mrope: exit $rc, expected 3 (INCOMPLETE)"; }
grep -q "not exercised: MRoPE sessions (.*does not claim the mrope capability" "$WORK/none.log" ||
  fail "a target claiming no mrope: the verdict does not say why"

"$BIN" mrope fuzz --target "exec:$PY $EX --fault mrope_verify_advances_T" --model qwen3.5 --cases 30 \
  --export-trace "$WORK/fail.safetensors" >"$WORK/bad.log" 2>&1; rc=$?
[ $rc -eq 1 ] || { cat "$WORK/bad.log"; fail "mrope_verify_advances_T: exit $rc, expected 1 (NOT CONFORMANT)"; }
grep -q "FAILED at command" "$WORK/bad.log" && grep -q "absolute index" "$WORK/bad.log" ||
  fail "mrope_verify_advances_T: the failure does not name the command and the token"
repro=$(sed -n 's/^  reproduce: //p' "$WORK/bad.log")
[ -n "$repro" ] || fail "no reproduce line"
case "$repro" in "replayssm mrope fuzz --target exec:'$PY $EX --fault mrope_verify_advances_T' --model qwen3.5 --seed "*" --cases 1") ;;
  *) fail "unexpected reproduce line: $repro" ;; esac
eval "\"$BIN\" ${repro#replayssm }" >"$WORK/again.log" 2>&1; rc=$?
[ $rc -eq 1 ] || { cat "$WORK/again.log"; fail "the reproduce line: exit $rc, expected 1"; }

[ -f "$WORK/fail.safetensors" ] || fail "--export-trace wrote nothing"
mkdir "$WORK/tr" && cp "$WORK/fail.safetensors" "$WORK/tr/"
"$BIN" check "$WORK/tr" >"$WORK/check.log" 2>&1 || { cat "$WORK/check.log"; fail "the exported trace fails check"; }
"$BIN" check --target "exec:$PY $EX --fault mrope_verify_advances_T" "$WORK/tr" >"$WORK/tbad.log" 2>&1; rc=$?
[ $rc -eq 1 ] || { cat "$WORK/tbad.log"; fail "the exported trace through the faulty example: exit $rc, expected 1"; }
"$BIN" check --target "exec:$PY $EX" "$WORK/tr" >"$WORK/tok.log" 2>&1 ||
  { cat "$WORK/tok.log"; fail "the exported trace through the correct example fails"; }
# A trace whose stored expectations are not the tracker's is refused, naming the tensor, before the target is judged.
mkdir "$WORK/tampered"
"$PY" - "$WORK/tr/fail.safetensors" "$WORK/tampered/t.safetensors" "$ROOT/tools/python" <<'PYEOF' >/dev/null ||
import sys
sys.path.insert(0, sys.argv[3])
import numpy as np
import replayssm_kit as rk
fx = rk.load_fixture(sys.argv[1])
name = sorted(n for n in fx.tensors if n.startswith("out.") and n.endswith(".index"))[0]
t = dict(fx.tensors)
t[name] = np.array(t[name], copy=True)
t[name][0] += 1
rk.save_fixture(sys.argv[2], fx.op, fx.config, {k: (v, fx.dtypes[k]) for k, v in t.items()}, fx.tolerance, seed=fx.seed)
print(name)
PYEOF
  fail "could not write the tampered trace"
"$BIN" check --target "exec:$PY $EX" "$WORK/tampered" >"$WORK/tampered.log" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "differs from the reference tracker's answer" "$WORK/tampered.log" ||
  { cat "$WORK/tampered.log"; fail "a tampered trace: exit $rc, expected 1 naming the tensor"; }

# A target that cannot start is a failure, not "not covered".
"$BIN" mrope fuzz --target "exec:$WORK/no-such-target" --target-startup-timeout 20 >"$WORK/nostart.log" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "(MRoPE sessions): NOT CONFORMANT" "$WORK/nostart.log" ||
  { cat "$WORK/nostart.log"; fail "a target that cannot start: exit $rc, expected 1 (NOT CONFORMANT)"; }
echo "mrope_sessions: ok"
