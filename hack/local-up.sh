#!/usr/bin/env bash
# Starts the local demo cluster in the background: a real kube-apiserver, etcd,
# kube-controller-manager and kube-scheduler on 127.0.0.1, kwok playing four nodes with
# eight nvidia.com/gpu each, and one real node (kubelet, containerd, kube-proxy, CoreDNS in a
# network namespace of its own; needs root) that runs the images of bin/images for real.
# State and logs go to .local/ (git-ignored); stop it with hack/local-down.sh. Running it
# again while the cluster runs only says so.
#
#   hack/local-up.sh                    four GPU nodes with eight GPUs, and the real node
#   NODES=2 GPUS=4 hack/local-up.sh     another shape
#   REAL_NODE=0 hack/local-up.sh        the simulated nodes only
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE="${ROOT}/.local"
BIN="${ROOT}/bin"
PIDFILE="${STATE}/localcluster.pid"
LOG="${STATE}/localcluster.log"
READY="${STATE}/ready"
KUBECONFIG_PATH="${STATE}/kubeconfig"
KUBECTL="${BIN}/kubectl"
NODES=${NODES:-4}
GPUS=${GPUS:-8}
REAL_NODE=${REAL_NODE:-1}
# The real node also imports the images and waits for its DNS; a loaded machine needs longer.
if [[ "${REAL_NODE}" == 1 ]]; then START_TIMEOUT=${START_TIMEOUT:-300}; else START_TIMEOUT=${START_TIMEOUT:-180}; fi

say() { printf '[local-up] %s\n' "$*" >&2; }

alive() { # alive PID: a live, non-zombie localcluster process
  local pid=$1
  [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/${pid}/stat" 2>/dev/null)" != "Z" ]] || return 1
  tr '\0' ' ' < "/proc/${pid}/cmdline" 2>/dev/null | grep -q localcluster
}

print_usage_hint() {
  echo
  echo "export KUBECONFIG=${KUBECONFIG_PATH}"
  echo
  "${KUBECTL}" --kubeconfig "${KUBECONFIG_PATH}" get nodes -o wide || true
}

if [[ -f "${PIDFILE}" ]] && alive "$(cat "${PIDFILE}")" && [[ -f "${READY}" ]]; then
  say "the local cluster already runs (pid $(cat "${PIDFILE}")); hack/local-down.sh stops it"
  print_usage_hint
  exit 0
fi
if [[ -f "${PIDFILE}" ]] && alive "$(cat "${PIDFILE}")"; then
  say "the local cluster (pid $(cat "${PIDFILE}")) is still starting; see ${LOG}"
  exit 0
fi

say "building missing tools (cached in bin/)"
tools=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl)
if [[ "${REAL_NODE}" == 1 ]]; then
  "${ROOT}/hack/node-packages.sh"
  tools+=(kubelet kube-proxy coredns)
fi
"${ROOT}/hack/tools.sh" "${tools[@]}"
if [[ "${REAL_NODE}" == 1 ]] && make -C "${ROOT}" -n images >/dev/null 2>&1; then
  say "building the images the real node runs (cached in bin/images)"
  make -C "${ROOT}" -s images
fi
(cd "${ROOT}" && go build -o "${BIN}/localcluster" ./cmd/localcluster)

mkdir -p "${STATE}"
# A killed earlier run may have left its ready file; `up` cleans up the rest of it.
rm -f "${READY}" "${PIDFILE}"
args=(--state-dir "${STATE}" up --nodes "${NODES}" --gpus "${GPUS}")
args+=(--timeout "$((START_TIMEOUT - 10))s")
[[ "${REAL_NODE}" == 1 ]] && args+=(--real-node)
if compgen -G "${ROOT}/config/crd/bases/*.yaml" > /dev/null; then
  args+=(--crd-dir "${ROOT}/config/crd/bases")
fi

say "starting the cluster (log: ${LOG})"
start=$SECONDS
# setsid: its own session, so closing this terminal or Ctrl-C here does not stop it.
setsid "${BIN}/localcluster" "${args[@]}" > "${LOG}" 2>&1 < /dev/null &
pid=$!

while [[ ! -f "${READY}" ]]; do
  if ! kill -0 "${pid}" 2>/dev/null; then
    say "the cluster failed to start; the end of ${LOG}:"
    tail -n 40 "${LOG}" >&2
    exit 1
  fi
  if (( SECONDS - start > START_TIMEOUT )); then
    say "the cluster did not become ready within ${START_TIMEOUT}s; stopping it; the end of ${LOG}:"
    tail -n 40 "${LOG}" >&2
    "${ROOT}/hack/local-down.sh" >&2 || true
    exit 1
  fi
  sleep 0.2
done

say "ready in $((SECONDS - start))s: API server $(cat "${READY}"), pid ${pid}"
print_usage_hint
