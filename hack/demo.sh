#!/usr/bin/env bash
# make demo: the operator's main job on a local default.
#
#   1. builds what is missing (the control plane, kwok, helm, the Mooncake wheel: cached),
#   2. starts a local control plane with simulated GPU nodes (kwok) and one real node (kubelet,
#      containerd), and a real mooncake_master on 127.0.0.1,
#   3. installs the operator with Helm; kwok nodes run no containers, so the chart's Deployment
#      is scaled to zero and the same manager binary runs on this host with the chart's
#      ServiceAccount token (it acts with exactly the chart's RBAC),
#   4. applies the samples (DeepSeek-V4 TP=16 over two nodes with DSpark, Qwen3 TP=4) against the
#      real master, prints what the operator made of them,
#   5. applies a cache-breaking change (DSpark → MTP: 3 packed draft layers become 1) and shows
#      the namespace rotation and the flush of the stale namespace as they happen.
#
#   hack/demo.sh        run it (again: it picks up where the cluster is)
#   hack/demo.sh down   stop everything it started
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="${ROOT}/bin"
STATE="${ROOT}/.local"
DEMO="${STATE}/demo"
NS=demo
OPERATOR_NS=hicache-system
RPC_PORT=${DEMO_MOONCAKE_RPC_PORT:-50051}
ADMIN_PORT=${DEMO_MOONCAKE_ADMIN_PORT:-9003}
PY="${BIN}/mooncake-venv/bin/python"
export KUBECONFIG="${STATE}/kubeconfig"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
say() { printf '    %s\n' "$*"; }

stop_pid() { # stop_pid FILE: stop the process group recorded in FILE
  local f=$1
  [[ -f "$f" ]] || return 0
  local pid
  pid=$(cat "$f")
  if kill -0 "${pid}" 2>/dev/null; then
    kill -TERM -- "-${pid}" 2>/dev/null || kill -TERM "${pid}" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-${pid}" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  step "Stopping the demo"
  stop_pid "${DEMO}/manager.pid"
  stop_pid "${DEMO}/store.pid"
  stop_pid "${DEMO}/master.pid"
  "${ROOT}/hack/local-down.sh"
  rm -rf "${DEMO}"
  say "stopped"
}

if [[ "${1:-}" == "down" ]]; then
  down
  exit 0
fi

kc() { kubectl "$@"; }

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local timeout=$1 what=$2
  shift 2
  local start=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS - start > timeout )); then
      echo "demo: timed out after ${timeout}s waiting for ${what}" >&2
      return 1
    fi
    sleep 1
  done
}

step "Building what is missing (the first run builds a Kubernetes control plane from source: 10-20 minutes on two cores)"
"${ROOT}/hack/tools.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kwok helm
"${ROOT}/hack/mooncake.sh"
(cd "${ROOT}" && go build -o "${BIN}/manager" ./cmd/manager && go build -o "${BIN}/kubectl-hicache" ./cmd/kubectl-hicache)
export PATH="${BIN}:${PATH}"
mkdir -p "${DEMO}"

step "Starting the local control plane with simulated GPU nodes and a real node"
"${ROOT}/hack/local-up.sh" >/dev/null
kc get nodes -L nvidia.com/gpu.product -L hicache.io/node-role --no-headers | sed 's/^/    /'

step "Starting a real Mooncake master on 127.0.0.1:${RPC_PORT} (admin http://127.0.0.1:${ADMIN_PORT})"
if [[ -f "${DEMO}/master.pid" ]] && kill -0 "$(cat "${DEMO}/master.pid")" 2>/dev/null; then
  say "already running"
else
  setsid "${BIN}/mooncake-venv/bin/mooncake_master" --rpc_address=127.0.0.1 --rpc_port="${RPC_PORT}" \
    --metrics_host=127.0.0.1 --metrics_port="${ADMIN_PORT}" --enable_metric_reporting=true \
    > "${DEMO}/master.log" 2>&1 < /dev/null &
  echo $! > "${DEMO}/master.pid"
  wait_for 30 "the Mooncake master's /health" curl -fsS "http://127.0.0.1:${ADMIN_PORT}/health"
  say "$(curl -fsS "http://127.0.0.1:${ADMIN_PORT}/health")"
fi

step "Installing the operator with Helm (CRDs, RBAC, ServiceAccount)"
if ! helm status hicache-operator -n "${OPERATOR_NS}" >/dev/null 2>&1; then
  helm install hicache-operator "${ROOT}/charts/hicache-operator" -n "${OPERATOR_NS}" --create-namespace \
    --set replicas=0 --set leaderElection=true >/dev/null
fi
helm list -n "${OPERATOR_NS}" | sed 's/^/    /'

step "Running the operator on this host as the chart's ServiceAccount"
if [[ -f "${DEMO}/manager.pid" ]] && kill -0 "$(cat "${DEMO}/manager.pid")" 2>/dev/null; then
  say "already running (log: ${DEMO}/manager.log)"
else
  token=$(kc create token hicache-operator -n "${OPERATOR_NS}" --duration=24h)
  server=$(kc config view --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kc config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  cat > "${DEMO}/operator.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "${server}", certificate-authority-data: "${ca}"}}]
users: [{name: hicache-operator, user: {token: "${token}"}}]
contexts: [{name: operator, context: {cluster: local, user: hicache-operator}}]
current-context: operator
EOF
  chmod 600 "${DEMO}/operator.kubeconfig"
  setsid "${BIN}/manager" --kubeconfig="${DEMO}/operator.kubeconfig" --leader-elect \
    --leader-election-namespace="${OPERATOR_NS}" --metrics-bind-address=127.0.0.1:18443 \
    --health-probe-bind-address=127.0.0.1:18081 --backend-poll-interval=5s \
    --flush-runner=local --flush-python="${PY}" > "${DEMO}/manager.log" 2>&1 < /dev/null &
  echo $! > "${DEMO}/manager.pid"
  wait_for 60 "the operator's readiness probe" curl -fsS http://127.0.0.1:18081/readyz
  say "ready (log: ${DEMO}/manager.log)"
fi

step "Applying a CacheBackend for the real master and the samples (DeepSeek-V4 TP=16 with DSpark, Qwen3 TP=4)"
kc create namespace "${NS}" --dry-run=client -o yaml | kc apply -f - >/dev/null
cat <<EOF | kc apply -n "${NS}" -f - | sed 's/^/    /'
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata:
  name: mooncake
spec:
  type: Mooncake
  mooncake:
    external:
      rpcAddress: 127.0.0.1:${RPC_PORT}
      adminURL: http://127.0.0.1:${ADMIN_PORT}
EOF
kc apply -n "${NS}" -f "${ROOT}/config/samples/hicachedeployment_deepseek_v4.yaml" \
  -f "${ROOT}/config/samples/hicachedeployment_qwen3.yaml" | sed 's/^/    /'
kc wait -n "${NS}" --for=condition=Ready cachebackend/mooncake --timeout=60s >/dev/null
kc wait -n "${NS}" --for=condition=Ready hcd/deepseek-v4 hcd/qwen3 --timeout=120s >/dev/null

step "kubectl get hcd,cb,cflush -n ${NS}"
kc get hcd,cb,cflush -n "${NS}"
echo
kc get pods -n "${NS}" -o wide -L hicache.io/cache-namespace | cut -c1-160

step "kubectl hicache plan: who writes what to L3 (TP0 only on DeepSeek-V4; every rank on Qwen3)"
kubectl-hicache plan -f "${ROOT}/config/samples/hicachedeployment_qwen3.yaml" | sed -n '1,40p'

old_ns=$(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{.status.cache.namespace}')
served=$(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{.spec.model.servedName}')
step "Writing 32 KV pages of DeepSeek-V4 under its namespace ${old_ns}, as SGLang's TP0 would (real Mooncake client)"
stop_pid "${DEMO}/store.pid"
"${PY}" - "${old_ns}" "${served}" > "${DEMO}/keys.txt" <<'EOF'
import hashlib, sys
ns, served = sys.argv[1], sys.argv[2].replace("/", "-")
for i in range(32):
    h = hashlib.sha256(f"demo-page-{i}".encode()).hexdigest()
    for pool in ("swa", "deepseek_v4_c4", "deepseek_v4_c128"):
        print(f"{ns}_{served}_{h}__{pool}")
EOF
setsid "${PY}" "${ROOT}/hack/mooncake/store.py" --master "127.0.0.1:${RPC_PORT}" serve --size 16384 \
  --keys-file "${DEMO}/keys.txt" > "${DEMO}/store.log" 2>&1 < /dev/null &
echo $! > "${DEMO}/store.pid"
wait_for 60 "the pages to be stored" grep -q ready "${DEMO}/store.log"
count() { curl -fsS "http://127.0.0.1:${ADMIN_PORT}/get_all_keys" | grep -c "^$1_" || true; }
say "objects under ${old_ns}: $(count "${old_ns}")"

step "A cache-breaking change: DeepSeek-V4's draft goes from DSpark (3 packed layers) to MTP (1 layer)"
kubectl-hicache diff "${ROOT}/config/samples/hicachedeployment_deepseek_v4.yaml" <(
  sed -e 's/algorithm: DSPARK/algorithm: NEXTN/' -e '/modelPath: deepseek-ai\/DeepSeek-V4-DSpark/d' \
    "${ROOT}/config/samples/hicachedeployment_deepseek_v4.yaml") | sed 's/^/    /' || true
kc patch hcd deepseek-v4 -n "${NS}" --type merge \
  -p '{"spec":{"topology":{"draft":{"algorithm":"NEXTN","modelPath":null}}}}' | sed 's/^/    /'

step "Watching the namespace rotate and the stale one being flushed"
new_ns=""
for _ in $(seq 1 90); do
  new_ns=$(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{.status.cache.namespace}')
  flush=$(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{.status.cache.lastFlush.name}')
  say "$(date +%H:%M:%S) namespace ${new_ns}, stale: $(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{range .status.cache.staleNamespaces[*]}{.namespace} {.flush} {.blockedBy}{end}'), objects under ${old_ns}: $(count "${old_ns}")"
  [[ -n "${flush}" ]] && break
  sleep 1
done
echo
kc get hcd,cflush -n "${NS}" -o wide
echo
kc get events -n "${NS}" --field-selector involvedObject.name=deepseek-v4 \
  -o custom-columns=REASON:.reason,MESSAGE:.message --sort-by=.lastTimestamp 2>/dev/null | tail -n 6 | cut -c1-200

step "Done"
say "The stale namespace ${old_ns} is empty ($(count "${old_ns}") objects); new writes go to ${new_ns}."
say "Look around:  export KUBECONFIG=${KUBECONFIG}; kubectl describe hcd -n ${NS} deepseek-v4"
say "Stop it all:  make demo-down"
