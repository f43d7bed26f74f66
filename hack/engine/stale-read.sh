#!/usr/bin/env bash
# Reproduces SGLang's stale-L3 read on CPU, outside Kubernetes, with the real server and a real
# Mooncake master and store on loopback: a tiny random-weight Qwen3-shape checkpoint, a server
# with a bf16 KV cache writes L3 under extra_backend_tag t1; a server with a float32 KV cache
# (--dtype float32) under the same tag reads the bf16 objects (stale, wrong output); under a new
# tag t2 (what the operator does on a layout change) it reads nothing stale and its outputs equal
# the uncached ones token for token, also after its own L3 round trip.
#   hack/engine/stale-read.sh [WORKDIR]       (needs hack/sglang-server-venv.sh first)
# ARCH=deepseek-v3 runs the same with the tiny DeepSeek-V3-shape (MLA) checkpoint, TP=2 on two
# ranks (one CPU each). Under t1 it checks the objects' suffixes (MLA: only "__k", no rank in the
# key; GQA: "_<rank>_k" and "_<rank>_v" of every rank) and that the master put each object once.
# At TP 2 on MLA that is what one writer (TP0) gives, but a second writer would mostly look
# before it puts (mooncake_store.py, batch_set_v1) and could not be told apart by the keys.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
V="${ROOT}/bin/sglang-server-venv/bin"
W=${1:-$(mktemp -d)}
ARCH=${ARCH:-qwen3} TP=${TP:-1}
mkdir -p "${W}"
PORT=31000 RPC=50151 ADMIN=59003
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
nice -n 10 "${V}/python" "${ROOT}/hack/sglang/make_tiny_model.py" --arch "${ARCH}" "${W}/${ARCH}" >/dev/null
tpenv=()
# More ranks than NUMA nodes need their cores named (utils/numa_utils.py, init_threads_binding);
# an NCCL library that does not load keeps the CPU groups off PyNccl, which wants a CUDA device
# (device_communicators/pynccl.py: the NCCLLibrary failure path disables it).
if (( TP > 1 )); then tpenv=(SGLANG_CPU_OMP_THREADS_BIND="$(seq -s '|' 0 $((TP - 1)))" SGLANG_NCCL_SO_PATH=/nonexistent/libnccl.so.2); fi
"${V}/mooncake_master" --rpc_address=127.0.0.1 --rpc_port=${RPC} --metrics_host=127.0.0.1 --metrics_port=${ADMIN} --enable_metric_reporting=false >"${W}/master.log" 2>&1 & pids+=($!)
sleep 2
MOONCAKE_MASTER=127.0.0.1:${RPC} MOONCAKE_TE_META_DATA_SERVER=P2PHANDSHAKE MOONCAKE_GLOBAL_SEGMENT_SIZE=268435456 \
  MOONCAKE_LOCAL_BUFFER_SIZE=16777216 MOONCAKE_PROTOCOL=tcp MOONCAKE_LOCAL_HOSTNAME=127.0.0.1 \
  "${V}/python" -m mooncake.mooncake_store_service --port=38080 >"${W}/store.log" 2>&1 & pids+=($!)
sleep 8
serve() { # serve TAG LOG [args...]: starts a server, waits until it is ready
  local tag=$1 log=$2; shift 2
  local extra='{"master_server_address":"127.0.0.1:'${RPC}'","metadata_server":"P2PHANDSHAKE","global_segment_size":0,"protocol":"tcp","extra_backend_tag":"'${tag}'","master_metrics_port":'${ADMIN}'}'
  env SGLANG_USE_CPU_ENGINE=1 MOONCAKE_LOCAL_HOSTNAME=127.0.0.1 "${tpenv[@]}" nice -n 10 "${V}/python" -m sglang.launch_server \
    --model-path "${W}/${ARCH}" --tp "${TP}" --device cpu --attention-backend torch_native --host 127.0.0.1 --port ${PORT} \
    --max-total-tokens 8192 --disable-cuda-graph --page-size 4 --enable-hierarchical-cache --hicache-size 1 \
    --hicache-io-backend direct --hicache-mem-layout page_first_direct --hicache-storage-backend mooncake \
    --hicache-storage-backend-extra-config "${extra}" "$@" >"${W}/${log}" 2>&1 &
  SERVER=$!
  local start=${SECONDS}
  until grep -q "fired up" "${W}/${log}"; do
    kill -0 "${SERVER}" 2>/dev/null || { tail -20 "${W}/${log}"; exit 1; }
    sleep 2
  done
  echo "server ${tag} $* ready in $((SECONDS - start))s" >&2
}
stop() { kill "${SERVER}"; wait "${SERVER}" 2>/dev/null || true; sleep 3; }
ask() { "${V}/python" "${ROOT}/hack/engine/stale_read.py" --url http://127.0.0.1:${PORT} --words 400 --seed 11 "$@"; }
puts() { curl -s "http://127.0.0.1:${ADMIN}/metrics" | awk '$1 == "master_batch_put_end_items_total" {print $2}'; }
keys() { curl -s "http://127.0.0.1:${ADMIN}/get_all_keys" | tr -s ' \n,' '\n' | grep "^$1_" || true; }
put0=$(puts)
serve t1 a.log;                  ask >"${W}/a1.json"; sleep 10; stop        # bf16 KV writes L3 under t1
put1=$(puts); keys t1 >"${W}/t1.keys"
echo "t1: $(wc -l <"${W}/t1.keys") objects, $((${put1%.*} - ${put0%.*})) put to the master; suffixes: $(sed 's/.*[0-9a-f]\{64\}//' "${W}/t1.keys" | sort | uniq -c | tr -s ' \n' ' ')" >&2
serve t2 base.log --dtype float32; ask >"${W}/base.json"; stop            # float32, nothing in L3: the baseline
serve t1 off.log --dtype float32;  ask >"${W}/off.json"; stop             # operator off: same tag
serve t3 on.log --dtype float32;   ask >"${W}/on1.json"; ask --flush >"${W}/on2.json"; stop  # operator on: own tag
"${V}/python" - "${W}" "${ARCH}" "${TP}" "$((${put1%.*} - ${put0%.*}))" <<'PY'
import json, re, sys
w, arch, tp, put = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
keys = open(f"{w}/t1.keys").read().split()
suffixes = {re.sub(r"^.*[0-9a-f]{64}", "", k) for k in keys}
want = {"__k"} if arch == "deepseek-v3" else {f"_{r}_{kv}" for r in range(tp) for kv in "kv"}
if suffixes != want or put != len(keys):
    print(f"t1: suffixes {sorted(suffixes)}, want {sorted(want)}; {put} objects put for {len(keys)} stored (each put once)")
    sys.exit(1)
r = lambda n: json.load(open(f"{w}/{n}.json"))["results"]
base, off, on1, on2 = r("base"), r("off"), r("on1"), r("on2")
l3 = lambda x: (x["cached_tokens_details"] or {}).get("storage", 0)
bad = 0
for i, (b, o, x, y) in enumerate(zip(base, off, on1, on2)):
    mis = sum(p != q for p, q in zip(b["output_ids"], o["output_ids"]))
    print(f"prompt {i}: off: {l3(o)} L3 tokens, {mis}/{len(b['output_ids'])} tokens differ | on: {l3(x)} L3 tokens, equal={x['output_ids'] == b['output_ids']}; after flush {l3(y)} L3 tokens, equal={y['output_ids'] == b['output_ids']}")
    bad += not (l3(o) > 0 and mis > 0 and l3(x) == 0 and x["output_ids"] == b["output_ids"] and l3(y) > 0 and y["output_ids"] == b["output_ids"])
print("stale read reproduced with the operator off and gone with it on" if not bad else f"{bad} prompt(s) did not behave as expected")
sys.exit(1 if bad else 0)
PY
