#!/usr/bin/env bash
# Every peer adapter through the lifecycle campaigns, the self-checks (repeat / reversed rows), the trace
# fixtures and a compute-sanitizer memcheck pass, in parallel on one GPU machine. Results under $OUT (one
# .log and one .json per campaign, SUMMARY.txt) are written to a work folder ($WORK, default a fresh
# temporary one); $OUT receives SUMMARY.txt, device.txt and results.tgz (everything else, dumps excluded),
# since a GPU machine brings back only a few files. Needs: the CLI at $CLI (default .stage-peer/bin/replayssm),
# FLA sources in .peers/fla (with einops beside fla/), vLLM's file in .peers/vllm, TokenSpeed's in
# .peers/tokenspeed, SGLang's two files in .peers/sglang, ATOM's four in .peers/atom (README.md here); a list names
# only the peers it uses.
#   OUT=/tmp/out bash tools/peer/adapters/device_run.sh [campaign-name-regex (traces: also the trace replays)] [list]
set -u
cd "$(dirname "$0")/../../.."
DEST=${OUT:?set OUT}; OUT=${WORK:-$(mktemp -d)}; CLI=${CLI:-.stage-peer/bin/replayssm}; PY=${PY:-python3}; ONLY=${1:-.}
LIMIT=${LIMIT:-480}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache-peer}
FLA="$PY tools/peer/adapters/fla_spec.py --peer-src .peers/fla"
VLLM="$PY tools/peer/adapters/vllm_spec_ring.py --peer-src .peers/vllm"
TS="$PY tools/peer/adapters/tokenspeed_replay.py --peer-src .peers/tokenspeed"
SGL="$PY tools/peer/adapters/sglang_fold.py --peer-src .peers/sglang"
VDR="$PY tools/peer/adapters/vllm_decode_ring.py --peer-src .peers/vllm"
FLAC="$PY tools/peer/adapters/fla_chunk.py --peer-src .peers/fla"
ATOM="$PY tools/peer/adapters/atom_ring.py --peer-src .peers/atom"
SAN=""
mkdir -p $OUT/mc
command -v compute-sanitizer >/dev/null &&
  SAN="env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 0 --log-file $OUT/mc/memcheck.%p.log"

# Campaign list: $2 (default tools/peer/adapters/campaigns/main.txt), one "name|environment|campaign flags|target
# command" per line; $FLA, $VLLM, $TS, $SGL, $VDR, $FLAC, $ATOM, $SAN and $OUT in it are expanded here. Flags that
# start with "check" run `replayssm check` (static fixtures through the `fixture` command) on the directories
# they name instead of a campaign.
LIST=${2:-tools/peer/adapters/campaigns/main.txt}
CAMPAIGNS=$(grep -v '^#' "$LIST")

run_one() {
  local name=$1 envs=$2 flags=$3 target=$4
  target=${target//'$FLAC'/$FLAC}; target=${target//'$FLA'/$FLA}; target=${target//'$VLLM'/$VLLM}; target=${target//'$VDR'/$VDR}; target=${target//'$ATOM'/$ATOM}
  target=${target//'$TS'/$TS}; target=${target//'$SGL'/$SGL}; target=${target//'$SAN'/$SAN}; target=${target//'$OUT'/$OUT}
  local t0=$SECONDS rc
  if [[ $flags == check\ * ]]; then
    # shellcheck disable=SC2086
    env $envs timeout $LIMIT $CLI check ${flags#check } --json $OUT/$name.json --target "exec:$target" >$OUT/$name.log 2>&1
    rc=$?
    printf '%-36s rc=%-3s %5d s  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$(tail -1 $OUT/$name.log | cut -c1-160)" \
      >>$OUT/SUMMARY.txt
    return
  fi
  [[ $flags == *--seed* ]] || flags="$flags --seed 7"
  # shellcheck disable=SC2086
  env $envs timeout $LIMIT $CLI fuzz $flags --dump-dir $OUT --json $OUT/$name.json --target "exec:$target" \
    >$OUT/$name.log 2>&1
  rc=$?
  printf '%-36s rc=%-3s %5d s  %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(grep -oE '(ok    .*|FAIL .*|NOT COVERED .*)' $OUT/$name.log | head -1 | cut -c1-160)" >>$OUT/SUMMARY.txt
}

nvidia-smi -L >$OUT/device.txt 2>&1; $PY -c "import torch, triton, numpy; print(torch.__version__, triton.__version__, numpy.__version__)" >>$OUT/device.txt 2>&1
echo "compute-sanitizer: ${SAN:-absent}" >>$OUT/device.txt
while IFS='|' read -r name envs flags target; do
  [[ -z $name || ! $name =~ $ONLY ]] && continue
  run_one "$name" "$envs" "$flags" "$target" &
done <<<"$CAMPAIGNS"
run_traces() {  # adapter, peer folder, adapter arguments: the trace replays, when the peer's sources are present
  local adapter=$1 peer=$2; shift 2
  [[ -d .peers/$peer ]] || { echo "traces.$peer skipped: .peers/$peer is absent" >>$OUT/SUMMARY.txt; return; }
  timeout $LIMIT $PY tools/peer/adapters/run_traces.py $adapter "$@" >$OUT/traces.$peer.log 2>&1
  echo "traces.$peer rc=$? $(tail -1 $OUT/traces.$peer.log)" >>$OUT/SUMMARY.txt
}
if [[ "traces" =~ $ONLY ]]; then
  run_traces fla_spec fla --accept-l2norm rsqrt_mul -- --peer-src .peers/fla &
  run_traces vllm_spec_ring vllm -- --peer-src .peers/vllm --act BF16 &
  run_traces tokenspeed_replay tokenspeed --accept-l2norm rsqrt_mul -- --peer-src .peers/tokenspeed &
  run_traces sglang_fold sglang --accept-l2norm rsqrt_mul -- --peer-src .peers/sglang &
  run_traces atom_ring atom -- --peer-src .peers/atom --op kda &  # GDN traces: layout vk, not covered
fi
wait
sort $OUT/SUMMARY.txt -o $OUT/SUMMARY.txt
cat $OUT/device.txt $OUT/SUMMARY.txt
for f in $OUT/self-*.jsonl; do [[ -e $f ]] && { echo "== $f: $(wc -l <$f) findings"; head -5 $f; }; done
ls $OUT/mc/ | head; grep -h -E "ERROR SUMMARY|Invalid" $OUT/mc/*.log 2>/dev/null | sort | uniq -c | head -20
tar czf $DEST/results.tgz -C $OUT --exclude '*.safetensors' . 2>/dev/null
cp $OUT/SUMMARY.txt $OUT/device.txt $DEST/ 2>/dev/null
exit 0
