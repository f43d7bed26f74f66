#!/usr/bin/env bash
# Builds the pinned toolchain into bin/ from the Go module proxy: the local control plane
# (kube-apiserver, kube-controller-manager, kube-scheduler, etcd), the real node's kubelet,
# kube-proxy and CoreDNS, kubectl, kwok, helm and controller-gen.
# A tool already built at the pinned version is skipped, so a second run takes seconds.
#
#   hack/tools.sh              build everything
#   hack/tools.sh helm kwok    build only these
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="${ROOT}/bin"
TOOLS="${ROOT}/hack/tools"
mkdir -p "${BIN}/.stamps"

KUBE_VERSION=v1.37.2
KUBE_MINOR=37

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# version_of MODULE_DIR MODULE prints the version the tools module pins for MODULE.
version_of() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

# build NAME MODULE_DIR PACKAGE VERSION [LDFLAGS]
build() {
  local name=$1 dir=$2 pkg=$3 version=$4 ldflags=${5:-}
  local stamp="${BIN}/.stamps/${name}"
  if [[ -x "${BIN}/${name}" && -f "${stamp}" && "$(cat "${stamp}")" == "${version}" ]]; then
    log "${name} ${version}: up to date"
    return
  fi
  case "${name}" in
    kube-*|kubelet|kubectl) log "${name} ${version}: building from source (the first build of the control plane takes 10-20 minutes on two cores; later runs reuse Go's build cache)" ;;
    *) log "${name} ${version}: building" ;;
  esac
  local start=$SECONDS
  (cd "${dir}" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w ${ldflags}" -o "${BIN}/${name}.tmp" "${pkg}")
  mv "${BIN}/${name}.tmp" "${BIN}/${name}"
  echo "${version}" > "${stamp}"
  log "${name} ${version}: built in $((SECONDS - start))s"
}

KUBE_LDFLAGS="-X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${KUBE_MINOR} -X k8s.io/component-base/version.gitTreeState=clean"

tool() {
  case "$1" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl)
      build "$1" "${TOOLS}/kube" "k8s.io/kubernetes/cmd/$1" "${KUBE_VERSION}" "${KUBE_LDFLAGS}" ;;
    coredns)
      # hack/tools/coredns/main.go: CoreDNS with only the plugins the local cluster uses; the
      # stamp also names main.go's content, so a change of the plugin list rebuilds it.
      local v; v=$(version_of "${TOOLS}/coredns" github.com/coredns/coredns)
      build coredns "${TOOLS}/coredns" . "${v}+$(sha256sum "${TOOLS}/coredns/main.go" | cut -c1-12)" ;;
    etcd)
      local v; v=$(version_of "${TOOLS}/etcd" go.etcd.io/etcd/server/v3)
      build etcd "${TOOLS}/etcd" go.etcd.io/etcd/server/v3 "${v}" "-X go.etcd.io/etcd/api/v3/version.GitSHA=${v}" ;;
    kwok)
      build kwok "${TOOLS}/misc" sigs.k8s.io/kwok/cmd/kwok "$(version_of "${TOOLS}/misc" sigs.k8s.io/kwok)" ;;
    helm)
      local v; v=$(version_of "${TOOLS}/misc" helm.sh/helm/v3)
      build helm "${TOOLS}/misc" helm.sh/helm/v3/cmd/helm "${v}" "-X helm.sh/helm/v3/internal/version.version=${v}" ;;
    golangci-lint)
      build golangci-lint "${TOOLS}/lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$(version_of "${TOOLS}/lint" github.com/golangci/golangci-lint/v2)" ;;
    controller-gen)
      build controller-gen "${TOOLS}/misc" sigs.k8s.io/controller-tools/cmd/controller-gen "$(version_of "${TOOLS}/misc" sigs.k8s.io/controller-tools)" ;;
    crd-ref-docs)
      build crd-ref-docs "${TOOLS}/misc" github.com/elastic/crd-ref-docs "$(version_of "${TOOLS}/misc" github.com/elastic/crd-ref-docs)" ;;
    *) echo "hack/tools.sh: unknown tool '$1' (known: ${ALL[*]})" >&2; exit 2 ;;
  esac
}

ALL=(controller-gen golangci-lint crd-ref-docs etcd kwok helm kube-apiserver kube-controller-manager kube-scheduler
     kubelet kube-proxy kubectl coredns)
for t in "${@:-${ALL[@]}}"; do tool "$t"; done
