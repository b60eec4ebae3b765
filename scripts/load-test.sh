#!/usr/bin/env bash
# Runs the whole ctest of a build under load, to show that no test's verdict depends on how fast the machine
# is (docs/testing.md, "Tests under load"):
#   1. ctest -j $(nproc) beside $(nproc) busy loops at nice 0 (every core shared with a CPU hog), ROUNDS times;
#   2. ctest -j $((2 * $(nproc))) (twice as many tests as cores), ROUNDS times.
# Usage: bash scripts/load-test.sh [PRESET]   (PRESET: a ctest preset, default "default"; ROUNDS=3)
# Exit 0 only when every round passed; each round's summary line is printed.
set -uo pipefail
cd "$(dirname "$0")/.."
PRESET="${1:-default}"
ROUNDS="${ROUNDS:-3}"
CORES=$(nproc)
failed=0
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done; hogs=(); }
trap stop_hogs EXIT
round() {  # label, ctest arguments...
  local label=$1; shift
  local start=$SECONDS
  local out
  out="$(ctest --preset "$PRESET" "$@" 2>&1)"
  local rc=$?
  echo "$label: $(echo "$out" | grep -E 'tests passed' | tail -1) ($((SECONDS - start)) s, rc $rc)"
  if [ $rc -ne 0 ]; then
    echo "$out" | grep -E '\(Failed\)|\(Timeout\)|\*\*\*Failed|\*\*\*Timeout' | head -20
    failed=1
  fi
}
for r in $(seq 1 "$ROUNDS"); do
  for _ in $(seq 1 "$CORES"); do (while :; do :; done) & hogs+=($!); done
  round "round $r: ctest -j $CORES beside $CORES busy loops" -j "$CORES"
  stop_hogs
done
for r in $(seq 1 "$ROUNDS"); do
  round "round $r: ctest -j $((2 * CORES))" -j "$((2 * CORES))"
done
exit $failed
