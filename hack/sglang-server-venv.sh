#!/usr/bin/env bash
# Installs the pinned SGLang release's HTTP server for CPU into bin/sglang-server-venv: the pins of
# hack/sglang/requirements.txt, the server's extra packages of hack/sglang/server-requirements.txt
# (both with --no-deps), and hack/sglang/cpu (pure-torch stand-ins for the sgl_kernel CPU ops
# SGLang imports, and an SGLang plugin that gives the HiCache host pools a CPU transfer path).
# docs/compatibility.md ("The SGLang server on CPU") says why each is needed. Run the server with
# SGLANG_USE_CPU_ENGINE=1 --device cpu --attention-backend torch_native, and with HiCache
# --hicache-io-backend direct --hicache-mem-layout page_first_direct.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="${ROOT}/bin/sglang-server-venv"
PYTHON=${PYTHON:-python3}
STAMP="${VENV}/.installed-requirements"
sum() { cat "${ROOT}/hack/sglang/requirements.txt" "${ROOT}/hack/sglang/server-requirements.txt" "${ROOT}"/hack/sglang/cpu/pyproject.toml "${ROOT}"/hack/sglang/cpu/*/*.py | sha256sum | cut -d' ' -f1; }
log() { printf '[sglang-server-venv %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[sglang-server-venv %s] error: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }
# shellcheck source=hack/lib/apt.sh
source "${ROOT}/hack/lib/apt.sh"
# cmd/imagebuild compiles SGLang's page hash for the CPU image with this venv on the host: a C++
# compiler, ninja and OpenSSL's headers (the image itself has no compiler).
apt_ensure_commands g++=g++ ninja=ninja-build /usr/include/openssl/sha.h=libssl-dev
mkdir -p "${ROOT}/bin"
exec 9>"${ROOT}/bin/.sglang-server-venv.lock"
flock 9
if [[ -x "${VENV}/bin/python" && -f "${STAMP}" && "$(cat "${STAMP}")" == "$(sum)" ]]; then
  log "up to date"; exit 0
fi
rm -rf "${VENV}"
"${PYTHON}" -m venv "${VENV}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
log "installing hack/sglang/requirements.txt"
"${VENV}/bin/python" -m pip install -q --no-input --progress-bar off --no-deps --require-hashes --only-binary=:all: -r "${ROOT}/hack/sglang/requirements.txt"
log "installing hack/sglang/server-requirements.txt"
"${VENV}/bin/python" -m pip install -q --no-input --progress-bar off --no-deps --require-hashes --only-binary=:all: -r "${ROOT}/hack/sglang/server-requirements.txt"
log "installing hack/sglang/cpu"
tmp=$(mktemp -d); cp -r "${ROOT}/hack/sglang/cpu/." "${tmp}/"
"${VENV}/bin/python" -m pip install -q --no-input --no-deps --no-build-isolation --no-index "${tmp}"
rm -rf "${tmp}"
SGLANG_USE_CPU_ENGINE=1 "${VENV}/bin/python" -c 'import sglang.srt.entrypoints.http_server, sgl_kernel.kvcacheio' 2>/dev/null ||
  { log "error: the server does not import; run: SGLANG_USE_CPU_ENGINE=1 ${VENV}/bin/python -c 'import sglang.srt.entrypoints.http_server'"; exit 1; }
sum >"${STAMP}"
log "ready: ${VENV#"${ROOT}"/}"
