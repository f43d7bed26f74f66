#!/usr/bin/env bash
# Installs the pinned Mooncake release (master, client and the Python store API) into a Python
# virtual environment at bin/mooncake-venv. Tests and local tooling run the real mooncake_master
# from there. A venv already holding the pinned version is left alone, so a second run takes well
# under two seconds.
#
# On Debian or Ubuntu, shared libraries the wheel's binaries need but do not bundle (libibverbs,
# libnuma, libcurl) and the venv module of the system Python are installed with apt-get when they
# are missing.
#
#   hack/mooncake.sh            install (or confirm) the pinned version
#   hack/mooncake.sh --verify   also start a master on loopback and check its /health endpoint
#
# Environment: PYTHON picks the interpreter for the venv (CPython 3.10-3.13; default python3).
set -euo pipefail

MOONCAKE_PACKAGE=mooncake-transfer-engine-non-cuda

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The version is pinned once, in hack/sglang/requirements.txt (the conformance suite's venv
# installs the same release beside SGLang).
MOONCAKE_VERSION=$(sed -n "s/^${MOONCAKE_PACKAGE}==\([^ ]*\).*/\1/p" "${ROOT}/hack/sglang/requirements.txt")
[[ -n "${MOONCAKE_VERSION}" ]] || { echo "hack/sglang/requirements.txt pins no ${MOONCAKE_PACKAGE}" >&2; exit 1; }
BIN="${ROOT}/bin"
VENV="${BIN}/mooncake-venv"
STAMP="${VENV}/.installed-version"
PYTHON=${PYTHON:-python3}

log() { printf '[mooncake %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[mooncake %s] error: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

# Debian package that ships each shared library the wheel links against without bundling it.
declare -A DEB_PACKAGE_OF=(
  [libibverbs.so.1]=libibverbs1
  [librdmacm.so.1]=librdmacm1
  [libnuma.so.1]=libnuma1
  [libcurl.so.4]=libcurl4
  [libstdc++.so.6]=libstdc++6
  [libgcc_s.so.1]=libgcc-s1
  [libssl.so.3]=libssl3
  [libz.so.1]=zlib1g
)

# shellcheck source=hack/lib/apt.sh
source "${ROOT}/hack/lib/apt.sh"

# elf_files prints the native executables and extension modules of the installed package.
elf_files() {
  local pkg
  pkg=$("${VENV}/bin/python" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("mooncake").origin))')
  printf '%s\n' "${pkg}/mooncake_master" "${pkg}/store.so" "${pkg}/engine.so"
}

# missing_libs prints the shared libraries the dynamic loader cannot find for the package.
missing_libs() {
  local f
  while read -r f; do
    [[ -e "${f}" ]] || die "the installed package has no ${f}; remove ${VENV} and run again"
    ldd "${f}" | awk '/=> not found/ {print $1}'
  done < <(elf_files) | sort -u
}

ensure_libs() {
  local libs pkgs=() unknown=() lib
  libs=$(missing_libs)
  [[ -z "${libs}" ]] && return 0
  for lib in ${libs}; do
    if [[ -n "${DEB_PACKAGE_OF[${lib}]:-}" ]]; then
      pkgs+=("${DEB_PACKAGE_OF[${lib}]}")
    else
      unknown+=("${lib}")
    fi
  done
  [[ ${#unknown[@]} -eq 0 ]] ||
    die "mooncake_master needs ${unknown[*]}, which this script cannot map to a package: install the package that provides it"
  log "shared libraries missing: $(echo "${libs}" | tr '\n' ' ')"
  apt_install $(printf '%s\n' "${pkgs[@]}" | sort -u)
  libs=$(missing_libs)
  [[ -z "${libs}" ]] || die "still missing after installing packages: $(echo "${libs}" | tr '\n' ' ')"
}

ensure_python() {
  command -v "${PYTHON}" >/dev/null 2>&1 || {
    [[ "${PYTHON}" == python3 ]] && apt_install python3 python3-venv
    command -v "${PYTHON}" >/dev/null 2>&1 || die "no ${PYTHON} on PATH: install CPython 3.10-3.13 or set PYTHON"
  }
  "${PYTHON}" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)' ||
    die "${PYTHON} is $("${PYTHON}" -V 2>&1); ${MOONCAKE_PACKAGE} ${MOONCAKE_VERSION} has wheels for CPython 3.10-3.13 only: set PYTHON"
  if ! "${PYTHON}" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    # Debian splits venv/ensurepip out of the interpreter package.
    local v
    v=$("${PYTHON}" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    apt_install "python${v}-venv"
  fi
}

installed_version() {
  [[ -x "${VENV}/bin/python" && -x "${VENV}/bin/mooncake_master" && -f "${STAMP}" ]] && cat "${STAMP}"
}

install() {
  ensure_python
  if [[ ! -x "${VENV}/bin/python" ]]; then
    log "creating ${VENV#"${ROOT}"/} with $("${PYTHON}" -V 2>&1)"
    "${PYTHON}" -m venv "${VENV}"
  fi
  log "installing ${MOONCAKE_PACKAGE}==${MOONCAKE_VERSION} (about 40 MB)"
  rm -f "${STAMP}"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "${VENV}/bin/python" -m pip install -q --no-input \
    "${MOONCAKE_PACKAGE}==${MOONCAKE_VERSION}" ||
    die "pip could not install ${MOONCAKE_PACKAGE}==${MOONCAKE_VERSION}"
  ensure_libs
  local got
  got=$("${VENV}/bin/mooncake_master" --version 2>&1 | head -n1) ||
    die "mooncake_master --version failed: ${got}"
  [[ "${got}" == *"version ${MOONCAKE_VERSION} "* ]] ||
    die "mooncake_master reports '${got}', expected version ${MOONCAKE_VERSION}"
  echo "${MOONCAKE_VERSION}" >"${STAMP}"
  log "installed: ${got}"
}

# verify starts a master on free loopback ports and waits for its /health endpoint.
verify() {
  "${VENV}/bin/python" - "${VENV}/bin/mooncake_master" <<'EOF'
import json, socket, subprocess, sys, time, urllib.request

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

rpc, admin = free_port(), free_port()
proc = subprocess.Popen(
    [sys.argv[1], "--rpc_address=127.0.0.1", f"--rpc_port={rpc}",
     "--metrics_host=127.0.0.1", f"--metrics_port={admin}", "--enable_metric_reporting=false"],
    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
try:
    deadline = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            sys.exit("mooncake_master exited with %d: %s" % (proc.returncode, proc.stderr.read().decode()[-2000:]))
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/health", timeout=2) as r:
                health = json.load(r)
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("mooncake_master did not serve /health within 20s")
            time.sleep(0.1)
    if health.get("status") != "ok" or health.get("service_ready") is not True:
        sys.exit("unexpected /health answer: %r" % health)
    print(f"[mooncake] verified: master on 127.0.0.1:{rpc}, /health on 127.0.0.1:{admin}: {json.dumps(health)}", file=sys.stderr)
finally:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
EOF
}

VERIFY=0
for arg in "$@"; do
  case "${arg}" in
    --verify) VERIFY=1 ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '${arg}' (known: --verify)" ;;
  esac
done

mkdir -p "${BIN}"
# Parallel callers (test packages starting at once) wait for one another here.
exec 9>"${BIN}/.mooncake-venv.lock"
flock 9

if [[ "$(installed_version || true)" == "${MOONCAKE_VERSION}" ]]; then
  ensure_libs
  log "${MOONCAKE_PACKAGE} ${MOONCAKE_VERSION}: up to date"
else
  start=${SECONDS}
  install
  log "${MOONCAKE_PACKAGE} ${MOONCAKE_VERSION}: ready in $((SECONDS - start))s"
fi
[[ ${VERIFY} -eq 0 ]] || verify
