#!/usr/bin/env bash
# Builds the libFuzzer harnesses (preset `fuzz`, clang) and runs each of them on its seed corpus.
#
#   bash scripts/fuzz.sh                 campaign: every harness for 1,000,000 executions (-runs=1000000)
#   bash scripts/fuzz.sh --short         CI mode: every harness for 30 s (-max_total_time=30)
#   bash scripts/fuzz.sh --record        campaign, then append its numbers to the table in docs/fuzzing.md
#   options: --runs N, --time S, --jobs J (harnesses run at once; default: nproc), --only NAME,
#            --workers W (W libFuzzer processes per harness sharing its working corpus, -runs split
#            between them; executions and exec/s are then the sums over the workers)
#   bash scripts/fuzz.sh --no-build ...  run harnesses built earlier (e.g. carried to a machine with more cores)
#
# The committed seeds (fuzzing/corpus/<harness>/) are read only; each run grows a working corpus in
# build-fuzz/work/<harness>/. A crash, leak, timeout (-timeout=10 s per input), out-of-memory (2 GiB) or
# sanitizer report stops that harness, leaves the input in build-fuzz/artifacts/ and makes the script exit 1.
# Per harness the script prints executions, exec/s, coverage (cov: edges, ft: features, from libFuzzer's final
# status line) and the result.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=1000000
TIME=""
JOBS="${JOBS:-$(nproc)}"
RECORD=0
ONLY=""
WORKERS=1
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --short) TIME=30; RUNS="" ;;
    --runs) RUNS="$2"; TIME=""; shift ;;
    --time) TIME="$2"; RUNS=""; shift ;;
    --jobs) JOBS="$2"; shift ;;
    --record) RECORD=1 ;;
    --only) ONLY="$2"; shift ;;
    --workers) WORKERS="$2"; shift ;;
    --no-build) BUILD=0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

HARNESSES=(fuzz_safetensors fuzz_fixture fuzz_replay_case fuzz_mrope_request fuzz_model_config fuzz_frame
           fuzz_exec_answer fuzz_engine_case fuzz_mrope_session)
[ -n "$ONLY" ] && HARNESSES=("$ONLY")

if [ "$BUILD" = 1 ]; then
  echo "== building the fuzz harnesses (clang, libFuzzer + ASan + UBSan)"
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$JOBS"
  clang++ --version | head -1 >build-fuzz/COMPILER  # recorded with the results, also where the harnesses are carried
fi

BIN=build-fuzz/fuzzing
WORK=build-fuzz/work
ART=build-fuzz/artifacts
LOGS=build-fuzz/logs
mkdir -p "$WORK" "$ART" "$LOGS"
# The short mode starts from a fixed libFuzzer seed, so that a CI run explores the same way each time.
if [ -n "$TIME" ]; then LIMIT="-max_total_time=$TIME"; SEED="-seed=1"; else LIMIT="-runs=$(( (RUNS + WORKERS - 1) / WORKERS ))"; SEED=""; fi

run_one() {
  local h="$1"
  mkdir -p "$WORK/$h"
  local rc=0
  local common=("$LIMIT" $SEED -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1
                -artifact_prefix="$ART/$h-")
  if [ "$WORKERS" = 1 ]; then
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$BIN/$h" "${common[@]}" "$WORK/$h" "fuzzing/corpus/$h" >"$LOGS/$h.log" 2>&1 || rc=$?
  else
    # W independent processes; each reloads the shared working corpus, so they build on each other's finds.
    local w pids=()
    for w in $(seq 1 "$WORKERS"); do
      ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$BIN/$h" "${common[@]}" -seed="$w" "$WORK/$h" "fuzzing/corpus/$h" >"$LOGS/$h.w$w.log" 2>&1 &
      pids+=($!)
    done
    for w in "${pids[@]}"; do wait "$w" || rc=$?; done
    # One log per harness for the summary: the workers' stat lines summed, the last status line of worker 1.
    awk '/^stat::number_of_executed_units/ {n += $NF} /^stat::average_exec_per_sec/ {e += $NF}
             END {print "stat::number_of_executed_units: " n; print "stat::average_exec_per_sec: " e}' \
      "$LOGS/$h".w*.log >"$LOGS/$h.log"
    grep -hE '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$LOGS/$h.w1.log" | tail -1 >>"$LOGS/$h.log" || true
    cat "$LOGS/$h".w*.log | grep -m1 -E 'ERROR: |runtime error|internal error' >>"$LOGS/$h.log" || true
  fi
  echo "$rc" >"$LOGS/$h.rc"
}

echo "== running ${#HARNESSES[@]} harnesses (${LIMIT}, $JOBS at a time)"
start=$(date +%s)
running=0
for h in "${HARNESSES[@]}"; do
  run_one "$h" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true
elapsed=$(( $(date +%s) - start ))

failed=0
rows=""
printf '%-20s %10s %8s %6s %7s  %s\n' harness executions exec/s cov ft result
for h in "${HARNESSES[@]}"; do
  log="$LOGS/$h.log"
  rc=$(cat "$LOGS/$h.rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  if [ "$rc" = 0 ]; then
    result="ok"
  else
    result="FAILED (exit $rc; $(grep -m1 -E 'ERROR: |fuzz invariant|internal error|runtime error' "$log" | cut -c1-120))"
    failed=1
    echo "---- $h: last lines of $log" >&2
    tail -40 "$log" >&2
  fi
  printf '%-20s %10s %8s %6s %7s  %s\n' "$h" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "$result"
  rows+="| $(date -u +%Y-%m-%d) | $h | ${execs:-?} | ${eps:-?} | ${cov:-?} | ${ft:-?} | $result |"$'\n'
done
echo "fuzzing took ${elapsed} s"
npass=0
for h in "${HARNESSES[@]}"; do [ "$(cat "$LOGS/$h.rc")" = 0 ] && npass=$((npass + 1)); done
echo "fuzz: $npass passed, $(( ${#HARNESSES[@]} - npass )) failed"

if [ "$RECORD" = 1 ]; then
  compiler="$(cat build-fuzz/COMPILER 2>/dev/null || true)"
  machine="$(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(. /etc/os-release && echo "$PRETTY_NAME"), harnesses built with ${compiler:-an unrecorded compiler}"
  {
    echo ""
    echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC') on ${machine}: \`bash scripts/fuzz.sh --record${RUNS:+ --runs $RUNS}${TIME:+ --time $TIME} --jobs $JOBS --workers $WORKERS$([ "$BUILD" = 1 ] || echo " --no-build")\` (${elapsed} s)"
    echo ""
    echo "| date | harness | executions | exec/s | cov | ft | result |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s' "$rows"
  } >>docs/fuzzing.md
  echo "recorded in docs/fuzzing.md"
fi
exit "$failed"
