#!/usr/bin/env bash
# Every peer adapter through the lifecycle campaigns, the self-checks (repeat / reversed rows), the trace
# fixtures and a compute-sanitizer memcheck pass, in parallel on one GPU machine. Results under $OUT (one
# .log and one .json per campaign, SUMMARY.txt). Needs: the CLI at $CLI (default .stage-peer/bin/replayssm),
# FLA sources in .peers/fla (with einops beside fla/), vLLM's file in .peers/vllm (README.md here).
#   OUT=/tmp/out bash tools/peer/adapters/device_run.sh [campaign-name-regex]
set -u
cd "$(dirname "$0")/../../.."
OUT=${OUT:?set OUT}; CLI=${CLI:-.stage-peer/bin/replayssm}; PY=${PY:-python3}; ONLY=${1:-.}
LIMIT=${LIMIT:-480}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache-peer}
FLA="$PY tools/peer/adapters/fla_spec.py --peer-src .peers/fla"
VLLM="$PY tools/peer/adapters/vllm_spec_ring.py --peer-src .peers/vllm"
SAN=""
command -v compute-sanitizer >/dev/null && SAN="compute-sanitizer --tool memcheck --error-exitcode 0 --log-file $OUT/memcheck-%p.log"

# name | environment | campaign flags | target command
CAMPAIGNS=$(cat <<EOC
fla.tiny-gdn||--preset tiny-gdn --l2norm div_sqrt --cases 100|$FLA
fla.tiny-kda||--preset tiny-kda --l2norm div_sqrt --cases 100|$FLA
fla.small-gva3||--preset small-gva3 --l2norm div_sqrt --cases 50|$FLA
fla.small-kv-neq||--preset small-kv-neq --l2norm div_sqrt --cases 50|$FLA
fla.small-gva8||--preset small-gva8 --l2norm div_sqrt --cases 50|$FLA
fla.tiny-gdn.f32-kv||--preset tiny-gdn --l2norm div_sqrt --act-dtype F32 --layout kv --cases 50|$FLA
fla.tiny-kda.bf16state-lb||--preset tiny-kda --l2norm div_sqrt --state-dtype BF16 --kda-gate lower_bound_sigmoid --cases 50|$FLA
fla.tiny-gdn.T8||--preset tiny-gdn --l2norm div_sqrt --max-T 8 --cases 50|$FLA
fla.qwen3.5||--preset qwen3.5 --layers 2 --l2norm div_sqrt --cases 10 --max-commands 50|$FLA
fla.qwen3.5.f32||--preset qwen3.5 --layers 2 --l2norm div_sqrt --act-dtype F32 --cases 10 --max-commands 50|$FLA
fla.kimi-linear||--preset kimi-linear --layers 2 --l2norm div_sqrt --cases 10 --max-commands 50|$FLA
fla.neg.commit_one_fewer||--preset tiny-gdn --l2norm div_sqrt --cases 30|$FLA --fault commit_one_fewer
fla.self.tiny-kda||--preset tiny-kda --l2norm div_sqrt --cases 20|$FLA --self-check $OUT/self-fla.tiny-kda.jsonl
fla.self.qwen3.5||--preset qwen3.5 --layers 2 --l2norm div_sqrt --cases 4 --max-commands 40|$FLA --self-check $OUT/self-fla.qwen3.5.jsonl
fla.memcheck||--preset tiny-gdn --l2norm div_sqrt --cases 3 --max-commands 30 --target-timeout 300|$SAN $FLA
vllm.qwen3.5.bf16||--preset qwen3.5 --layers 2 --cases 20 --max-commands 60|$VLLM --act BF16
vllm.qwen3.5.f32||--preset qwen3.5 --layers 2 --act-dtype F32 --cases 20 --max-commands 60|$VLLM --act F32
vllm.qwen3.5.f32.ieee-as-fp32|TRITON_F32_DEFAULT=ieee|--preset qwen3.5 --layers 2 --act-dtype F32 --cases 20 --max-commands 60|$VLLM --act F32 --tier fp32
vllm.qwen3.5.f32.tf32-as-fp32||--preset qwen3.5 --layers 2 --act-dtype F32 --cases 5 --max-commands 60|$VLLM --act F32 --tier fp32
vllm.qwen3.5.f32-bf16state||--preset qwen3.5 --layers 2 --act-dtype F32 --state-dtype BF16 --cases 10 --max-commands 60|$VLLM --act F32
vllm.qwen3.5.f32-bf16records||--preset qwen3.5 --layers 2 --act-dtype F32 --cases 10 --max-commands 60|$VLLM --act F32 --records BF16
vllm.qwen3.5.f32.T8||--preset qwen3.5 --layers 2 --act-dtype F32 --max-T 8 --cases 10 --max-commands 60|$VLLM --act F32
vllm.neg.commit_one_fewer||--preset qwen3.5 --layers 2 --act-dtype F32 --cases 10 --max-commands 60|$VLLM --act F32 --fault commit_one_fewer
vllm.self.qwen3.5.f32||--preset qwen3.5 --layers 2 --act-dtype F32 --cases 4 --max-commands 40|$VLLM --act F32 --self-check $OUT/self-vllm.qwen3.5.jsonl
vllm.kimi-linear||--preset kimi-linear --layers 2 --cases 1|$VLLM --act BF16
vllm.tiny-gdn||--preset tiny-gdn --cases 1|$VLLM --act BF16
vllm.memcheck||--preset qwen3.5 --layers 2 --act-dtype F32 --cases 2 --max-commands 20 --target-timeout 300|$SAN $VLLM --act F32
EOC
)

run_one() {
  local name=$1 envs=$2 flags=$3 target=$4
  local t0=$SECONDS
  # shellcheck disable=SC2086
  env $envs timeout $LIMIT $CLI fuzz $flags --seed 7 --dump-dir $OUT --json $OUT/$name.json --target "exec:$target" \
    >$OUT/$name.log 2>&1
  local rc=$?
  printf '%-36s rc=%-3s %5d s  %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(grep -oE '(ok    .*|FAIL .*|NOT COVERED .*)' $OUT/$name.log | head -1 | cut -c1-160)" >>$OUT/SUMMARY.txt
}

nvidia-smi -L >$OUT/device.txt 2>&1; $PY -c "import torch, triton, numpy; print(torch.__version__, triton.__version__, numpy.__version__)" >>$OUT/device.txt 2>&1
echo "compute-sanitizer: ${SAN:-absent}" >>$OUT/device.txt
while IFS='|' read -r name envs flags target; do
  [[ -z $name || ! $name =~ $ONLY ]] && continue
  run_one "$name" "$envs" "$flags" "$target" &
done <<<"$CAMPAIGNS"
if [[ "traces" =~ $ONLY || $ONLY == . ]]; then
  (timeout $LIMIT $PY tools/peer/adapters/run_traces.py fla_spec --accept-l2norm rsqrt_mul -- --peer-src .peers/fla \
     >$OUT/traces.fla.log 2>&1; echo "traces.fla rc=$? $(tail -1 $OUT/traces.fla.log)" >>$OUT/SUMMARY.txt) &
  (timeout $LIMIT $PY tools/peer/adapters/run_traces.py vllm_spec_ring -- --peer-src .peers/vllm --act BF16 \
     >$OUT/traces.vllm.log 2>&1; echo "traces.vllm rc=$? $(tail -1 $OUT/traces.vllm.log)" >>$OUT/SUMMARY.txt) &
fi
wait
sort $OUT/SUMMARY.txt -o $OUT/SUMMARY.txt
cat $OUT/device.txt $OUT/SUMMARY.txt
for f in $OUT/self-*.jsonl; do [[ -e $f ]] && { echo "== $f: $(wc -l <$f) findings"; head -5 $f; }; done
ls $OUT/memcheck-*.log >/dev/null 2>&1 && grep -h -E "ERROR SUMMARY|Invalid" $OUT/memcheck-*.log | sort | uniq -c | head -20
exit 0
