#!/usr/bin/env bash
# End-to-end checks of the replayssm CLI: exit codes and messages a CI job relies on.
set -u
BIN="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "cli_smoke: $*" >&2; exit 1; }

"$BIN" --help >/dev/null || fail "--help failed"
for sub in conform fuzz check "fixtures generate"; do
  $BIN $sub --help >/dev/null || fail "$sub --help failed"
done
"$BIN" fixtures generate --preset tiny-kda --out "$WORK/g" >/dev/null || fail "generate failed"
"$BIN" check "$WORK/g" --json "$WORK/report.json" >/dev/null || fail "clean golden set did not pass"
grep -q '"failed": 0' "$WORK/report.json" || fail "JSON report missing or wrong"
f="$(ls "$WORK"/g/*recurrent*.safetensors | head -1)"
truncate -s -5 "$f"
out="$("$BIN" check "$WORK/g" 2>&1)"; rc=$?
[ $rc -eq 1 ] || fail "truncated fixture: expected exit 1, got $rc"
echo "$out" | grep -q "error:" || fail "truncated fixture: no error line"
"$BIN" fixtures generate --matrix public --out "$WORK/m" >/dev/null || fail "matrix generate failed"
"$BIN" fixtures manifest "$WORK/m" >/dev/null || fail "manifest write failed"
"$BIN" fixtures manifest "$WORK/m" --check >/dev/null || fail "fresh manifest does not match"
m="$(ls "$WORK"/m/gva-ratio__recurrent__G3*.safetensors | head -1)"
printf 'x' | dd of="$m" bs=1 seek=200 conv=notrunc 2>/dev/null
out="$("$BIN" fixtures manifest "$WORK/m" --check 2>&1)"; rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "modified" || fail "modified fixture not reported by manifest --check (rc $rc)"
"$BIN" check "$WORK/g" --target replay >/dev/null 2>"$WORK/err"; rc=$?
[ $rc -ne 0 ] && grep -q "target" "$WORK/err" || fail "check --target that is not exec: not refused (rc $rc)"
out="$("$BIN" check "$WORK/m" --target "exec:exit 3" --quiet 2>&1)"; rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "target.hello" && echo "$out" | grep -q "exited with status 3" \
  || fail "check --target with a target that exits: expected exit 1 naming target.hello (rc $rc)"
"$BIN" fixtures generate --preset no-such-model --out "$WORK/x" >/dev/null 2>"$WORK/err"; rc=$?
[ $rc -ne 0 ] && grep -q "preset" "$WORK/err" || fail "unknown preset not reported"
"$BIN" fuzz --target replay --preset tiny-gdn --cases 100 --fault zero_accepted_as_one --dump-dir "$WORK/d" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "fuzz with injected fault: expected exit 1, got $rc"
# Configuration overrides reach the campaign's model config (the dumped case records it) and the rerun line.
out="$("$BIN" fuzz --target replay --preset tiny-gdn --cases 100 --fault zero_accepted_as_one --l2norm div_sqrt \
  --act-dtype F32 --layout kv --dump-dir "$WORK/o" 2>&1)"; rc=$?
[ $rc -eq 1 ] || fail "fuzz with overrides and an injected fault: expected exit 1, got $rc"
echo "$out" | grep -q -- "--l2norm div_sqrt --act-dtype F32 --layout kv" || fail "rerun line lacks the overrides"
o="$(ls "$WORK"/o/*.safetensors | head -1)"
grep -a -q 'l2norm\\":\\"div_sqrt' "$o" && grep -a -q 'act_dtype\\":\\"F32' "$o" && grep -a -q 'layout\\":\\"kv' "$o" \
  || fail "dumped case does not carry the overridden config"
"$BIN" fuzz --target replay --preset tiny-gdn --cases 1 --l2norm sqrt >/dev/null 2>"$WORK/err"; rc=$?
[ $rc -ne 0 ] && grep -q "l2norm" "$WORK/err" || fail "unknown --l2norm value not reported naming the flag"
d="$(ls "$WORK"/d/*.safetensors | head -1)"
[ -n "$d" ] || fail "no dump written"
"$BIN" fuzz --replay "$d" >/dev/null; rc=$?
[ $rc -eq 1 ] || fail "replayed dump should still fail, got $rc"
# Traces: generated, checked clean, a changed expectation fails naming the command; a fuzz failure exports one.
"$BIN" fixtures generate --traces --preset tiny-gdn --cases 1 --out "$WORK/t" >/dev/null || fail "trace generate failed"
"$BIN" check "$WORK/t" >/dev/null || fail "fresh traces do not check clean"
"$BIN" fixtures generate --ring --preset tiny-kda --out "$WORK/r" >/dev/null || fail "ring generate failed"
"$BIN" check "$WORK/r" >/dev/null || fail "fresh ring-step fixtures do not check clean"
"$BIN" fixtures generate --conv --preset tiny-gdn --out "$WORK/c" >/dev/null || fail "conv generate failed"
"$BIN" check "$WORK/c" >/dev/null || fail "fresh conv fixtures do not check clean"
cmp -s "$WORK/c/tiny-gdn__conv__commit_T4_n2.safetensors" "$ROOT/fixtures/conv/tiny-gdn/tiny-gdn__conv__commit_T4_n2.safetensors" || \
  fail "conv generate with the default seed does not reproduce the committed fixture"
"$BIN" conv fuzz --cases 20 >/dev/null || fail "conv fuzz without a fault failed"
"$BIN" conv fuzz --cases 20 --fault conv_column_off_by_one --dump-dir "$WORK" >/dev/null; rc=$?
[ $rc -eq 1 ] || fail "conv fuzz with an injected fault: expected exit 1, got $rc"
"$BIN" conv fuzz --cases 20 --design full_state --fault conv_rollback_to_window --dump-dir "$WORK" >/dev/null; rc=$?
[ $rc -eq 1 ] || fail "conv fuzz with a fault of the full-state design: expected exit 1, got $rc"
"$BIN" conv fuzz --cases 20 --fault conv_rollback_to_window >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "conv fuzz with a fault outside the chosen design: expected exit 2, got $rc"
"$BIN" fuzz --target replay --preset tiny-gdn --cases 100 --conv off --fault off_by_one_accepted --dump-dir "$WORK/e" \
  --export-trace "$WORK/e/case.safetensors" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] && [ -s "$WORK/e/case.safetensors" ] || fail "fuzz --export-trace wrote no trace (rc $rc)"
"$BIN" check "$WORK/e/case.safetensors" >/dev/null || fail "an exported trace does not check clean"
e="$(ls "$WORK"/e/fuzz-failure-*.safetensors | head -1)"
"$BIN" fuzz --replay "$e" --export-trace "$WORK/e/again.safetensors" >/dev/null; rc=$?
[ $rc -eq 1 ] && cmp -s "$WORK/e/case.safetensors" "$WORK/e/again.safetensors" || \
  fail "--replay --export-trace: expected the failing replay (rc $rc) and the same trace bytes"
"$BIN" conform --preset tiny-kda --cases 10 --json "$WORK/conform.json" >/dev/null 2>&1 || fail "conform on tiny-kda failed"
grep -q '"ok": true' "$WORK/conform.json" || fail "conform JSON does not say ok"
# Engine level: the reference engine passes; a seeded engine fault fails, dumps, and the dump replays failing.
"$BIN" fuzz --level engine --target engine:reference --preset tiny-gdn --cases 30 >/dev/null 2>&1 || fail "engine-level campaign failed"
"$BIN" fuzz --level engine --preset tiny-gdn --fault accepted_by_row_position --dump-dir "$WORK/el" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "engine-level fault: expected exit 1, got $rc"
"$BIN" fuzz --replay "$(ls "$WORK"/el/*.safetensors | head -1)" >/dev/null; rc=$?
[ $rc -eq 1 ] || fail "replayed engine-level dump should still fail, got $rc"
# An engine-level run has no kernel-level commands to export as a trace, and engine:ring carries only its own
# faults: both are refused, naming the option, instead of running and passing.
"$BIN" fuzz --level engine --preset tiny-gdn --cases 3 --export-trace "$WORK/el.trace" >/dev/null 2>"$WORK/err"; rc=$?
[ $rc -eq 2 ] && grep -q "export-trace" "$WORK/err" && [ ! -e "$WORK/el.trace" ] || fail "engine-level --export-trace not refused (rc $rc)"
"$BIN" fuzz --level engine --target engine:ring --preset tiny-gdn --fault snapshot_at_run_end >/dev/null 2>"$WORK/err"; rc=$?
[ $rc -eq 2 ] && grep -q "fault" "$WORK/err" || fail "engine:ring accepted a reference-engine fault (rc $rc)"
"$BIN" fuzz --level bogus --preset tiny-gdn >/dev/null 2>"$WORK/err"; rc=$?
[ $rc -ne 0 ] && grep -q "level" "$WORK/err" || fail "unknown --level not reported"
echo "cli_smoke: ok"
