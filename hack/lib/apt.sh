# shellcheck shell=bash
# Installing Debian packages from hack/ scripts. Source it after defining log and die:
#
#   source "${ROOT}/hack/lib/apt.sh"
#   apt_install pkg...               apt-get install, with one apt-get update per run before it
#   apt_ensure_commands cmd=pkg ...  installs each pkg whose cmd is not on PATH (or at that path)
#
# Runs apt-get through sudo when not root; names what to install by hand when there is no apt-get.

APT_UPDATED=${APT_UPDATED:-0}

apt_install() {
  command -v apt-get >/dev/null 2>&1 ||
    die "missing system packages ($*) and no apt-get here: install them with the system's package manager"
  local sudo=()
  if [[ ${EUID} -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "installing $* needs root: run as root or install sudo"
    sudo=(sudo)
  fi
  local out
  out=$(mktemp)
  if [[ ${APT_UPDATED} -eq 0 ]]; then
    log "apt-get update"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"${out}" 2>&1 ||
      { cat "${out}" >&2; rm -f "${out}"; die "apt-get update failed"; }
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >"${out}" 2>&1 ||
    { cat "${out}" >&2; rm -f "${out}"; die "apt-get install $* failed"; }
  rm -f "${out}"
}

# apt_ensure_commands CMD=PACKAGE...: CMD is a command name looked up on PATH (with /usr/sbin
# and /sbin added) or an absolute path that must exist.
apt_ensure_commands() {
  local pair cmd pkg missing=()
  for pair in "$@"; do
    cmd=${pair%%=*} pkg=${pair#*=}
    if [[ "${cmd}" == /* ]]; then
      [[ -e "${cmd}" ]] && continue
    elif PATH="${PATH}:/usr/sbin:/sbin" command -v "${cmd}" >/dev/null 2>&1; then
      continue
    fi
    missing+=("${pkg}")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  # shellcheck disable=SC2046 # one word per package
  apt_install $(printf '%s\n' "${missing[@]}" | sort -u)
}
