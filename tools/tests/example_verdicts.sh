#!/usr/bin/env bash
# The main job's verdict levels on the NumPy example target (docs/lifecycle.md, "Verdict levels"): every seeded
# fault of tools/python/examples/numpy_replay.py makes the default `replayssm conform --target exec:...` end NOT
# CONFORMANT (exit 1) with the failing check named in its JSON report; the narrow modes end INCOMPLETE (exit 3)
# listing what was not exercised: --claims nothing (no op) and --claims unexercisable (the mtp_verify fixture
# op at a dtype pair no committed fixture has). The unmodified example's CONFORMANT run is the pytest suite's and
# scripts/test.sh's business; this test only needs each fault's first failure (conform stops there, unshrunk). Skips (exit
# 77) when no Python with NumPy is found.
set -u
BIN="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
NAME=example_verdicts
source "$ROOT/tools/tests/numpy_python.sh"
EX="$ROOT/tools/python/examples/numpy_replay.py"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "example_verdicts: $*" >&2; exit 1; }
# The JSON report's named checks: a failing trace command's check, a failing fixture tensor, a campaign's check.
checks() {
  "$PY" - "$1" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
named = []
for t in r.get("fixtures_through_target", []):
    for res in t["results"]:
        for x in res.get("tensors", []):
            if not x.get("ok", True) and "commands" != x["name"]:
                named.append(x.get("check") or x["name"])
for c in r.get("fuzz", []):
    if c.get("check"):
        named.append(c["check"])
for m in r.get("mrope_sessions", []):
    if m.get("failure"):
        named.append("mrope:" + m["failure"]["check"])
print(r["verdict"], " ".join(sorted(set(named))))
PYEOF
}

# $3: the faults to run ("all", the default: every one the example lists; a list of names; or part:K/N).
faults=$("$PY" -c "import sys; sys.path[:0] = ['$ROOT/tools/python/examples', '$ROOT/tools/python']; import numpy_replay; print(' '.join(numpy_replay.FAULTS))")
[ -n "$faults" ] || fail "no faults listed by numpy_replay.FAULTS"
# "part:K/N": every N-th fault from the K-th (so that ctest runs the parts side by side); the narrow modes below
# run in part 1 only.
part=1
case "${3:-}" in
  part:*/*)
    part=${3#part:}; part=${part%/*}; n=${3#*/}
    [ "$part" -ge 1 ] && [ "$part" -le "$n" ] 2>/dev/null || fail "bad part '$3' (part:K/N, 1 <= K <= N)"
    i=0; mine=""
    for f in $faults; do [ $((i % n + 1)) -eq "$part" ] && mine="$mine $f"; i=$((i + 1)); done
    faults="$mine" ;;
  ""|all) ;;
  *)
    for f in $3; do case " $faults " in *" $f "*) ;; *) fail "'$f' is not a fault of numpy_replay.py" ;; esac; done
    faults="$3" ;;
esac
for f in $faults; do
  # --no-shrink: the verdict and the named check are the first failure's; shrinking it adds nothing to either.
  "$BIN" conform --target "exec:$PY $EX --fault $f" --no-shrink --json "$WORK/$f.json" >"$WORK/$f.log" 2>&1; rc=$?
  [ $rc -eq 1 ] || { tail -20 "$WORK/$f.log"; fail "--fault $f: conform exited $rc, expected 1 (NOT CONFORMANT)"; }
  got=$(checks "$WORK/$f.json")
  case "$got" in
    "NOT CONFORMANT "?*) echo "$f: $got" ;;
    *) fail "--fault $f: the report names no failing check: '$got'" ;;
  esac
done

[ "$part" -eq 1 ] || exit 0
"$BIN" conform --target "exec:$PY $EX --claims nothing" --json "$WORK/nothing.json" >"$WORK/nothing.log" 2>&1; rc=$?
[ $rc -eq 3 ] || { tail -20 "$WORK/nothing.log"; fail "--claims nothing: conform exited $rc, expected 3 (INCOMPLETE)"; }
grep -q "not exercised: the target covers none of the campaigns' configurations" "$WORK/nothing.log" ||
  fail "--claims nothing: the verdict does not say no campaign could run"
echo "--claims nothing: INCOMPLETE"

# Campaigns cut short (--no-deep, 2 cases) keep this test quick; the unmet line under test is the fixture op's.
"$BIN" conform --target "exec:$PY $EX --claims unexercisable" --no-deep --cases 2 --json "$WORK/unex.json" \
  >"$WORK/unex.log" 2>&1; rc=$?
[ $rc -eq 3 ] || { tail -20 "$WORK/unex.log"; fail "--claims unexercisable: conform exited $rc, expected 3"; }
"$PY" -c "
import json, sys
r = json.load(open(sys.argv[1]))
v = r['verdicts'][0]
assert v['verdict'] == 'INCOMPLETE', v['verdict']
assert 'fixture op mtp_verify: none of its committed fixtures ran through the target' in v['unmet'], v['unmet']
# Its campaigns ran at the BF16 state and activations it claims (not refused at the presets' F32 state).
camps = r['fuzz']
assert camps and all(c['covered'] and c['cases_passed'] > 0 for c in camps), camps
m = v['coverage']['matrix']
assert set(m['state_dtype']) == {'BF16'} and set(m['act_dtype']) == {'BF16'}, (m['state_dtype'], m['act_dtype'])
" "$WORK/unex.json" || fail "--claims unexercisable: the verdict does not list the unexercised fixture op, or its campaigns did not run at BF16"
echo "--claims unexercisable: INCOMPLETE (fixture op mtp_verify not exercised)"
