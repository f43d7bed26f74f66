#!/usr/bin/env bash
# Installs the pinned SGLang release and the packages its HiCache storage code needs on CPU into a
# Python virtual environment at bin/sglang-venv, for the conformance suite (test/conformance),
# which runs SGLang's own Mooncake backend against a real mooncake_master.
#
# The packages are the exact pins of hack/sglang/requirements.txt, installed with --no-deps and
# --require-hashes (every wheel is checked against its SHA-256). A venv installed from the same
# requirements file is left alone, so a second run takes about a second. A cold install downloads
# about 3 GB and builds a 6 GB venv (most of it torch's CUDA libraries, never loaded on CPU).
#
# Afterwards it builds SGLang's page-hash extension (C++, compiled on first use by torch) once,
# into bin/sglang-venv/torch-extensions, so that rank processes started in parallel do not race
# to compile it. Set TORCH_EXTENSIONS_DIR to that directory when running the venv's Python.
#
# On Debian or Ubuntu, missing system packages are installed with apt-get: the shared libraries
# of Mooncake's native client (libibverbs1, librdmacm1, libnuma1) and the compiler the extension
# needs (g++, ninja-build, libssl-dev).
#
#   hack/sglang-venv.sh           install (or confirm) the pinned environment
#   hack/sglang-venv.sh --print   print the venv's Python after installing (for scripts)
#
# Environment: PYTHON picks the interpreter (CPython 3.11, the wheels' tag; default python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="${ROOT}/bin"
VENV="${BIN}/sglang-venv"
REQUIREMENTS="${ROOT}/hack/sglang/requirements.txt"
STAMP="${VENV}/.installed-requirements"
EXTENSIONS="${VENV}/torch-extensions"
PYTHON=${PYTHON:-python3}

log() { printf '[sglang-venv %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[sglang-venv %s] error: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

PRINT=0
for arg in "$@"; do
  case "${arg}" in
    --print) PRINT=1 ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '${arg}' (known: --print)" ;;
  esac
done

# shellcheck source=hack/lib/apt.sh
source "${ROOT}/hack/lib/apt.sh"

# ensure_system_packages installs the Debian packages of the libraries and tools that are missing.
ensure_system_packages() {
  local missing=()
  command -v dpkg-query >/dev/null 2>&1 || return 0 # not Debian: the checks below report what fails
  local pkg
  for pkg in libibverbs1 librdmacm1 libnuma1 g++ ninja-build libssl-dev; do
    dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q 'install ok installed' || missing+=("${pkg}")
  done
  [[ ${#missing[@]} -eq 0 ]] || apt_install "${missing[@]}"
}

ensure_python() {
  command -v "${PYTHON}" >/dev/null 2>&1 || die "no ${PYTHON} on PATH: install CPython 3.11 or set PYTHON"
  "${PYTHON}" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' ||
    die "${PYTHON} is $("${PYTHON}" -V 2>&1); hack/sglang/requirements.txt pins wheels built for CPython 3.11: set PYTHON to a 3.11 interpreter"
  if ! "${PYTHON}" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3.11-venv
  fi
}

requirements_sum() { sha256sum "${REQUIREMENTS}" | cut -d' ' -f1; }

up_to_date() {
  [[ -x "${VENV}/bin/python" && -f "${STAMP}" && "$(cat "${STAMP}")" == "$(requirements_sum)" ]]
}

pin_of() { sed -n "s/^$1==\([^ ]*\).*/\1/p" "${REQUIREMENTS}"; }

install() {
  ensure_python
  local start=${SECONDS}
  rm -rf "${VENV}"
  log "creating ${VENV#"${ROOT}"/} with $("${PYTHON}" -V 2>&1)"
  "${PYTHON}" -m venv "${VENV}"
  local n
  n=$(grep -c '^[A-Za-z0-9].*==' "${REQUIREMENTS}")
  log "installing ${n} pinned packages (sglang $(pin_of sglang), torch $(pin_of torch), $(grep -o '^mooncake[^ ]*' "${REQUIREMENTS}")); a cold install downloads about 3 GB"
  # pip prints one line per package it collects: the progress. Its whole output goes to a log.
  local pip_log="${BIN}/sglang-venv-pip.log" rc=0
  PIP_DISABLE_PIP_VERSION_CHECK=1 "${VENV}/bin/python" -m pip install --no-input --progress-bar off \
    --no-deps --require-hashes --only-binary=:all: -r "${REQUIREMENTS}" 2>&1 |
    tee "${pip_log}" | sed -u -n 's/^\(Collecting\|Successfully installed\)/[sglang-venv] &/p' >&2 ||
    rc=$?
  if [[ ${rc} -ne 0 ]] || ! "${VENV}/bin/python" -c 'import sglang, torch, mooncake.store' 2>/dev/null; then
    tail -n 30 "${pip_log}" >&2
    die "pip could not install hack/sglang/requirements.txt (its log: ${pip_log#"${ROOT}"/}); a hash mismatch means a wheel changed: review it before updating the pin"
  fi
  log "packages installed in $((SECONDS - start))s; building SGLang's page-hash extension (about 40 s)"
  build_extension
  requirements_sum >"${STAMP}"
  log "ready in $((SECONDS - start))s: $(du -sh "${VENV}" | cut -f1) in ${VENV#"${ROOT}"/}"
}

# build_extension compiles the page-hash extension once by hashing one page with SGLang's own
# get_hash_str, and checks that the result is a SHA-256 digest.
build_extension() {
  mkdir -p "${EXTENSIONS}"
  local got
  got=$(TORCH_EXTENSIONS_DIR="${EXTENSIONS}" "${VENV}/bin/python" -c '
import warnings; warnings.filterwarnings("ignore")
from sglang.srt.mem_cache.utils import get_hash_str
print(get_hash_str([0, 1, 2, 3]))' 2>"${VENV}/extension-build.log" | tail -n1) ||
    die "building the page-hash extension failed; see ${VENV#"${ROOT}"/}/extension-build.log"
  [[ "${got}" =~ ^[0-9a-f]{64}$ ]] || die "get_hash_str printed '${got}', not a SHA-256 hex digest"
}

mkdir -p "${BIN}"
exec 9>"${BIN}/.sglang-venv.lock"
flock 9

ensure_system_packages
if up_to_date; then
  log "sglang $(pin_of sglang) environment: up to date"
else
  install
fi
[[ ${PRINT} -eq 0 ]] || echo "${VENV}/bin/python"
