#!/usr/bin/env bash
# make demo: the operator's main job on a local default.
#
#   1. builds what is missing (the control plane, the real node's kubelet, kube-proxy and CoreDNS,
#      kwok, helm and the images of bin/images: cached),
#   2. starts a local control plane with simulated GPU nodes (kwok) and one real node (kubelet,
#      containerd, runc) that runs the operator, the Mooncake master, its store pod and the
#      flush Jobs for real, from the locally built images,
#   3. installs the operator with Helm into its own pod on the real node (namespace
#      hicache-system, Pod Security level restricted),
#   4. applies a managed CacheBackend (master and store pod on the real node) and the samples
#      (DeepSeek-V4 TP=16 over two nodes with DSpark, Qwen3 TP=4), whose SGLang ranks kwok
#      simulates on the GPU nodes, and prints what the operator made of them,
#   5. writes KV pages through the master with the real Mooncake client (a Job on the real node),
#      applies a cache-breaking change (DSpark → MTP: 3 packed draft layers become 1) and shows
#      the namespace rotation and the flush of the stale namespace by a Kubernetes Job.
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
export KUBECONFIG="${STATE}/kubeconfig"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
say() { printf '    %s\n' "$*"; }

down() {
  step "Stopping the demo"
  "${ROOT}/hack/local-down.sh"
  rm -rf "${DEMO}"
  say "stopped"
}

if [[ "${1:-}" == "down" ]]; then
  down
  exit 0
fi

kc() { "${BIN}/kubectl" "$@"; }

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

began=$SECONDS
step "Building what is missing (the first run builds a Kubernetes control plane, a kubelet and the images from source: 25-35 minutes on two cores)"
"${ROOT}/hack/tools.sh" helm
(cd "${ROOT}" && go build -o "${BIN}/kubectl-hicache" ./cmd/kubectl-hicache)
export PATH="${BIN}:${PATH}"
mkdir -p "${DEMO}"

step "Starting the local control plane with simulated GPU nodes and a real node"
"${ROOT}/hack/local-up.sh" >/dev/null
kc get nodes -L nvidia.com/gpu.product -L hicache.io/node-role --no-headers | sed 's/^/    /'

# The chart's values for the locally built images (never pulled), and the Mooncake image.
(cd "${ROOT}" && go run ./cmd/imagebuild -values) > "${DEMO}/values-images.yaml"
MOONCAKE_IMAGE=$(sed -n 's/^ *mooncakeImage: *//p' "${DEMO}/values-images.yaml" | tr -d '"')
# Pods meant for the real node select its label and tolerate its taint.
placement='{"nodeSelector":{"hicache.io/node-role":"system"},"tolerations":[{"key":"hicache.io/real-node","operator":"Exists","effect":"NoSchedule"}]}'

step "Installing the operator with Helm: its own pod on the real node, in a namespace enforcing the restricted Pod Security level"
kc create namespace "${OPERATOR_NS}" --dry-run=client -o yaml | kc apply -f - >/dev/null
kc label namespace "${OPERATOR_NS}" pod-security.kubernetes.io/enforce=restricted --overwrite >/dev/null
if ! helm status hicache-operator -n "${OPERATOR_NS}" >/dev/null 2>&1; then
  echo "${placement}" | sed 's/^{/{"backendPollInterval":"5s",/' > "${DEMO}/values-placement.json"
  wait_for 60 "the default ServiceAccount of ${OPERATOR_NS}" kc get serviceaccount default -n "${OPERATOR_NS}"
  helm install hicache-operator "${ROOT}/charts/hicache-operator" -n "${OPERATOR_NS}" \
    -f "${DEMO}/values-images.yaml" -f "${DEMO}/values-placement.json" --wait --timeout 120s >/dev/null
fi
kc get pods -n "${OPERATOR_NS}" -o wide --no-headers | awk '{printf "    %-45s %-8s %s\n", $1, $3, $7}'

step "A managed CacheBackend (master and one store pod on the real node) and the samples (DeepSeek-V4 TP=16 with DSpark, Qwen3 TP=4)"
# SGLang images run as root, and the samples read their weights from a directory of every GPU
# node (a hostPath volume, which the baseline level forbids): the namespace of their ranks
# enforces privileged, and warns at baseline to whoever creates its pods. The ranks run on
# kwok's simulated nodes; the real node runs only the store's pods.
kc create namespace "${NS}" --dry-run=client -o yaml | kc apply -f - >/dev/null
kc label namespace "${NS}" pod-security.kubernetes.io/enforce=privileged \
  pod-security.kubernetes.io/warn=baseline --overwrite >/dev/null
wait_for 60 "the default ServiceAccount of ${NS}" kc get serviceaccount default -n "${NS}"
cat <<EOF | kc apply -n "${NS}" -f - | sed 's/^/    /'
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata:
  name: mooncake
spec:
  type: Mooncake
  placement: ${placement}
  mooncake:
    managed:
      store: {replicas: 1, segmentSize: 256Mi}
EOF
kc apply -n "${NS}" -f "${ROOT}/config/samples/hicachedeployment_deepseek_v4.yaml" \
  -f "${ROOT}/config/samples/hicachedeployment_qwen3.yaml" | sed 's/^/    /'
kc wait -n "${NS}" --for=condition=Ready cachebackend/mooncake --timeout=120s >/dev/null
kc wait -n "${NS}" --for=condition=Ready hcd/deepseek-v4 hcd/qwen3 --timeout=120s >/dev/null

step "kubectl get hcd,cb,cflush -n ${NS}"
kc get hcd,cb,cflush -n "${NS}"
echo
kc get pods -n "${NS}" -o wide -L hicache.io/cache-namespace | cut -c1-160

step "kubectl hicache plan: who writes what to L3 (TP0 only on DeepSeek-V4; every rank on Qwen3)"
kubectl-hicache plan -f "${ROOT}/config/samples/hicachedeployment_qwen3.yaml" | sed -n '1,40p'

old_ns=$(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{.status.cache.namespace}')
served=$(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{.spec.model.servedName}')
step "Writing 32 KV pages of DeepSeek-V4 under its namespace ${old_ns}, as SGLang's TP0 would (the real Mooncake client, in a Job on the real node)"
python3 - "${old_ns}" "${served}" > "${DEMO}/keys.txt" <<'EOF'
import hashlib, sys
ns, served = sys.argv[1], sys.argv[2].replace("/", "-")
for i in range(32):
    h = hashlib.sha256(f"demo-page-{i}".encode()).hexdigest()
    for pool in ("swa", "deepseek_v4_c4", "deepseek_v4_c128"):
        print(f"{ns}_{served}_{h}__{pool}")
EOF
kc delete job demo-put -n "${NS}" --ignore-not-found >/dev/null
kc create configmap demo-put -n "${NS}" --from-file="${ROOT}/hack/mooncake/store.py" --from-file="${DEMO}/keys.txt" \
  --dry-run=client -o yaml | kc apply -f - >/dev/null
cat <<EOF | kc apply -n "${NS}" -f - >/dev/null
apiVersion: batch/v1
kind: Job
metadata: {name: demo-put}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {hicache.io/node-role: system}
      tolerations: [{key: hicache.io/real-node, operator: Exists, effect: NoSchedule}]
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: put
        image: ${MOONCAKE_IMAGE}
        imagePullPolicy: Never
        command: [python3, /scripts/store.py, --master, "mooncake-master.${NS}.svc:50051", put, --size, "16384", --keys-file, /scripts/keys.txt]
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
        volumeMounts: [{name: scripts, mountPath: /scripts}]
      volumes: [{name: scripts, configMap: {name: demo-put}}]
EOF
kc wait -n "${NS}" --for=condition=Complete job/demo-put --timeout=90s >/dev/null
# The admin API answers inside the cluster: ask it from the master's own pod.
count() {
  kc exec -n "${NS}" deploy/mooncake-master -- python3 -c \
    'import sys, urllib.request; print(sum(1 for l in urllib.request.urlopen("http://127.0.0.1:9003/get_all_keys").read().decode().split() if l.startswith(sys.argv[1] + "_")))' \
    "$1" 2>/dev/null || echo "?"
}
say "objects under ${old_ns}: $(count "${old_ns}")"
kc get pods -n "${NS}" -o wide --no-headers -l app.kubernetes.io/name=mooncake | awk '{printf "    %-45s %-10s %s\n", $1, $3, $7}'

step "A cache-breaking change: DeepSeek-V4's draft goes from DSpark (3 packed layers) to MTP (1 layer)"
kubectl-hicache diff "${ROOT}/config/samples/hicachedeployment_deepseek_v4.yaml" <(
  sed -e 's/algorithm: DSPARK/algorithm: EAGLE\n      numSteps: 3\n      eagleTopK: 1\n      numDraftTokens: 4/' -e '/modelPath: deepseek-ai\/DeepSeek-V4-DSpark/d' \
    "${ROOT}/config/samples/hicachedeployment_deepseek_v4.yaml") | sed 's/^/    /' || true
kc patch hcd deepseek-v4 -n "${NS}" --type merge \
  -p '{"spec":{"topology":{"draft":{"algorithm":"EAGLE","modelPath":null,"numSteps":3,"eagleTopK":1,"numDraftTokens":4}}}}' | sed 's/^/    /'

step "Watching the namespace rotate and the stale one being flushed"
new_ns=""
for _ in $(seq 1 90); do
  new_ns=$(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{.status.cache.namespace}')
  flush=$(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{.status.cache.lastFlush.name}')
  say "$(date +%H:%M:%S) namespace ${new_ns}, stale: $(kc get hcd deepseek-v4 -n "${NS}" -o jsonpath='{range .status.cache.staleNamespaces[*]}{.namespace} {.flush} {.blockedBy}{end}'), flush Jobs: $(kc get jobs -n "${NS}" -l hicache.io/flush -o jsonpath='{range .items[*]}{.metadata.name} {end}')"
  [[ -n "${flush}" ]] && [[ "$(kc get cflush "${flush}" -n "${NS}" -o jsonpath='{.status.conditions[?(@.type=="Complete")].status}')" == True ]] && break
  sleep 1
done
echo
kc get hcd,cflush -n "${NS}" -o wide
echo
say "flush ${flush}: method $(kc get cflush "${flush}" -n "${NS}" -o jsonpath='{.status.method}'), removed $(kc get cflush "${flush}" -n "${NS}" -o jsonpath='{.status.removed}') objects"
kc get events -n "${NS}" --field-selector involvedObject.kind=Job \
  -o custom-columns=JOB:.involvedObject.name,REASON:.reason,MESSAGE:.message --sort-by=.lastTimestamp 2>/dev/null | tail -n 4 | sed 's/^/    /' | cut -c1-160
echo
kc get events -n "${NS}" --field-selector involvedObject.name=deepseek-v4 \
  -o custom-columns=REASON:.reason,MESSAGE:.message --sort-by=.lastTimestamp 2>/dev/null | tail -n 6 | cut -c1-200

step "Done"
say "The stale namespace ${old_ns} is empty ($(count "${old_ns}") objects); new writes go to ${new_ns}."
say "Look around:  export KUBECONFIG=${KUBECONFIG}; kubectl describe hcd -n ${NS} deepseek-v4"
say "Stop it all:  make demo-down"
say "The demo took $((SECONDS - began))s."
