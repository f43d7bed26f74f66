#!/usr/bin/env bash
# Installs what the local cluster's real node runs from Debian's packages, when missing:
# containerd, runc, the CNI plugins (bridge, host-local, portmap, loopback in /usr/lib/cni),
# iptables and conntrack for kube-proxy, and debootstrap for the Mooncake image's rootfs.
# Everything present is left alone, so a second run takes well under a second. containerd is
# only installed, never started as a system service: the local cluster runs its own, with a
# private configuration, socket and state (internal/localcluster).
#
#   hack/node-packages.sh          install what is missing
#   hack/node-packages.sh --check  only report what is missing (exit 1 if anything is)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '[node-packages %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[node-packages %s] error: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

# shellcheck source=hack/lib/apt.sh
source "${ROOT}/hack/lib/apt.sh"

# command (or path) = Debian package providing it
NEEDED=(
  containerd=containerd
  ctr=containerd
  containerd-shim-runc-v2=containerd
  runc=runc
  /usr/lib/cni/bridge=containernetworking-plugins
  /usr/lib/cni/host-local=containernetworking-plugins
  /usr/lib/cni/portmap=containernetworking-plugins
  /usr/lib/cni/loopback=containernetworking-plugins
  iptables=iptables
  conntrack=conntrack
  debootstrap=debootstrap
  nsenter=util-linux
  ip=iproute2
)

case "${1:-}" in
  --check)
    missing=()
    for pair in "${NEEDED[@]}"; do
      cmd=${pair%%=*}
      if [[ "${cmd}" == /* ]]; then [[ -e "${cmd}" ]] || missing+=("${pair#*=} (${cmd})"); continue; fi
      PATH="${PATH}:/usr/sbin:/sbin" command -v "${cmd}" >/dev/null 2>&1 || missing+=("${pair#*=} (${cmd})")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
      log "missing: ${missing[*]}; hack/node-packages.sh installs them"
      exit 1
    fi
    log "all present"
    exit 0 ;;
  "") ;;
  -h|--help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (known: --check)" ;;
esac

# Parallel callers wait for one another: apt-get holds its own lock and fails when taken.
mkdir -p "${ROOT}/bin"
exec 9>"${ROOT}/bin/.node-packages.lock"
flock 9

start=${SECONDS}
apt_ensure_commands "${NEEDED[@]}"
if [[ ${APT_UPDATED} -eq 1 ]]; then
  log "installed in $((SECONDS - start))s: $(containerd --version 2>/dev/null | awk '{print $1, $3}'), $(runc --version | head -n1)"
else
  log "containerd, runc, CNI plugins, iptables, conntrack, debootstrap: present"
fi
