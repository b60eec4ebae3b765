#!/usr/bin/env bash
# Campaigns on slow targets (docs/testing.md, "Campaigns on slow targets"): shrinking bounded (--shrink-steps) or
# off (--no-shrink), a time budget that cuts a campaign with a report, a signal that ends a run with its report
# written, and a watchdog that turns a hung case into a failure naming its seed, the report written. No test here
# depends on the machine's speed: every bound is far from the work it bounds.
set -u
BIN="$1"; PY="$2"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "campaign_budgets: $*" >&2; exit 1; }
field() { "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }
FAULTY=(fuzz --target replay --preset tiny-gdn --cases 100 --fault off_by_one_accepted --dump-dir "$WORK")

"$BIN" "${FAULTY[@]}" --no-shrink --json "$WORK/n.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "--no-shrink: the faulty campaign did not fail (rc $rc)"
[ "$(field "$WORK/n.json" "r['campaigns'][0]['shrink_steps']")" = 0 ] || fail "--no-shrink still shrank"

"$BIN" "${FAULTY[@]}" --shrink-steps 2 --json "$WORK/s.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "--shrink-steps 2: the faulty campaign did not fail (rc $rc)"
[ "$(field "$WORK/s.json" "r['campaigns'][0]['shrink_steps'] <= 2 and 'shrink budget' in r['campaigns'][0]['ended_by']")" = True ] ||
  fail "--shrink-steps 2 ran more shrink steps, or the report does not say the budget ended it"

# A time budget of a millisecond: the first case starts, no later one does; the report says so.
"$BIN" fuzz --target replay --preset tiny-gdn --cases 100 --time-budget 0.001 --json "$WORK/b.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 3 ] || fail "--time-budget: a cut campaign is not INCOMPLETE (rc $rc)"
[ "$(field "$WORK/b.json" "'time budget' in r['campaigns'][0]['ended_by'] and r['campaigns'][0]['cases_passed'] < 100")" = True ] ||
  fail "--time-budget: the report does not say the budget cut the campaign"

# A signal: the run ends after the current call, its report written, exit 128 + 15.
"$BIN" fuzz --target replay --preset qwen3.5 --cases 1000 --json "$WORK/i.json" >/dev/null 2>&1 &
pid=$!
sleep 1; kill -TERM $pid; wait $pid; rc=$?
[ $rc -eq 143 ] || fail "SIGTERM: exit $rc, expected 143"
[ "$(field "$WORK/i.json" "r['interrupted'] == 15 and 'signal 15' in r['campaigns'][0]['ended_by']")" = True ] ||
  fail "SIGTERM: the report does not say the run was interrupted"

# A hung case (the target sleeps an hour in setup, within its per-command timeout): the watchdog ends the campaign
# at --time-limit, naming the case seed, and writes the report.
HANG="exec:$PY $ROOT/conformance/tests/data/misbehaving_target.py hang_on_setup"
out="$("$BIN" fuzz --target "$HANG" --preset tiny-gdn --cases 5 --target-timeout 7200 --time-limit 1 \
       --json "$WORK/h.json" 2>&1)"; rc=$?
[ $rc -eq 1 ] || fail "a hung case: exit $rc, expected 1: $out"
echo "$out" | grep -q "exceeded its time limit of 1 s in case 1 (case seed" || fail "the hang is not named with its seed: $out"
[ "$(field "$WORK/h.json" "'time limit' in r['hang'] and r['verdict'] == 'NOT CONFORMANT'")" = True ] ||
  fail "the hung run's report was not written"
echo "campaign_budgets: ok"
