#!/usr/bin/env bash
# Starts the local demo cluster in the background: a real kube-apiserver, etcd,
# kube-controller-manager and kube-scheduler on 127.0.0.1, and kwok playing four nodes with
# eight nvidia.com/gpu each. State and logs go to .local/ (git-ignored); stop it with
# hack/local-down.sh. Running it again while the cluster runs only says so.
#
#   hack/local-up.sh                    four nodes with eight GPUs
#   NODES=2 GPUS=4 hack/local-up.sh     another shape
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE="${ROOT}/.local"
BIN="${ROOT}/bin"
PIDFILE="${STATE}/localcluster.pid"
LOG="${STATE}/localcluster.log"
READY="${STATE}/ready"
KUBECONFIG_PATH="${STATE}/kubeconfig"
NODES=${NODES:-4}
GPUS=${GPUS:-8}
START_TIMEOUT=${START_TIMEOUT:-180}

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
  kubectl --kubeconfig "${KUBECONFIG_PATH}" get nodes -o wide || true
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
"${ROOT}/hack/tools.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kwok
(cd "${ROOT}" && go build -o "${BIN}/localcluster" ./cmd/localcluster)

mkdir -p "${STATE}"
# A killed earlier run may have left its ready file; `up` cleans up the rest of it.
rm -f "${READY}" "${PIDFILE}"
args=(--state-dir "${STATE}" up --nodes "${NODES}" --gpus "${GPUS}")
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
