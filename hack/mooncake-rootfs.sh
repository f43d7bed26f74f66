#!/usr/bin/env bash
# Builds the root file system of the local Mooncake image (the local counterpart of
# images/mooncake/Dockerfile): Debian minbase with python3, the shared libraries the wheel's
# binaries link, and the pinned mooncake-transfer-engine-non-cuda wheel installed with pip inside
# the chroot. cmd/imagebuild runs it (`make images`) and turns DIR into the image's one layer; it
# reads the pin from hack/mooncake.sh and the mirror from this machine's apt sources.
#
#   hack/mooncake-rootfs.sh DIR MIRROR SUITE PACKAGE==VERSION DEB_PACKAGE...
#
# Needs root (debootstrap, chroot, mount). Installs debootstrap with apt-get when missing
# (hack/node-packages.sh installs it too).
set -euo pipefail

log() { printf '[images %s] mooncake: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[images %s] mooncake: error: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

[[ $# -ge 5 ]] || die "usage: $0 DIR MIRROR SUITE PACKAGE==VERSION DEB_PACKAGE..."
DIR=$1 MIRROR=$2 SUITE=$3 WHEEL=$4
shift 4
DEBS=("$@")
[[ ${EUID} -eq 0 ]] || die "building the Mooncake root file system needs root (debootstrap, chroot, mount): run make images as root"
[[ "${DIR}" == /* && "${DIR}" != / ]] || die "DIR must be an absolute path other than /, got '${DIR}'"

# shellcheck source=hack/lib/apt.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/apt.sh"
apt_ensure_commands debootstrap=debootstrap
export PATH="${PATH}:/usr/sbin:/sbin"

# Nothing may stay mounted under DIR, whether this run fails or a previous one was interrupted
# (debootstrap mounts proc and sys there itself while it runs).
cleanup() {
  local m
  awk -v d="${DIR}" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount "${m}" 2>/dev/null || umount -l "${m}"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup
rm -rf --one-file-system "${DIR}"
mkdir -p "$(dirname "${DIR}")"

include=$(IFS=,; echo "python3,python3-pip,ca-certificates,${DEBS[*]}")
log "debootstrap --variant=minbase ${SUITE} (${include}); about 3-5 minutes on two cores"
start=${SECONDS}
logfile="${DIR}.debootstrap.log"
# debootstrap's stages as progress lines; its whole log only when it fails (pipefail: the
# pipeline fails when debootstrap does).
bootstrap() {
  debootstrap --variant=minbase --include="${include}" "${SUITE}" "${DIR}" "${MIRROR}" 2>&1 | tee "${logfile}" |
    awk '/^I: Retrieving [a-z0-9]/ { if (++n % 40 == 0) { print "retrieved " n " packages"; fflush() } }
         /^I: .*(\.\.\.|successfully\.)$/ && !/^I: (Extracting|Validating|Unpacking|Configuring) [^ ]+\.\.\.$/ { sub(/^I: /, ""); print; fflush() }' |
    while read -r line; do log "debootstrap: ${line} ($((SECONDS - start))s)"; done
}
if ! bootstrap; then
  tail -n 30 "${logfile}" >&2
  die "debootstrap failed (log above; full log in ${logfile})"
fi
rm -f "${logfile}"
log "base system ready in $((SECONDS - start))s"

# pip inside the chroot: the image's own python3 picks the wheel. The host's CA bundle (which may
# hold a proxy's CA) and resolv.conf are lent for the download and removed after.
start=${SECONDS}
log "pip install ${WHEEL} inside the chroot"
mount -t proc proc "${DIR}/proc"
cp /etc/resolv.conf "${DIR}/etc/resolv.conf"
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
pip_env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
         PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore)
if [[ -f "${ca}" ]]; then
  cp "${ca}" "${DIR}/tmp/build-ca.pem"
  pip_env+=(PIP_CERT=/tmp/build-ca.pem)
fi
for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT; do
  [[ -n "${!v:-}" ]] && pip_env+=("${v}=${!v}")
done
chroot "${DIR}" /usr/bin/env -i "${pip_env[@]}" python3 -m pip install -q --no-input "${WHEEL}" ||
  die "pip could not install ${WHEEL} inside the chroot"

# The binaries must find every library they link, and the commands the operator runs must work.
pkg=$(chroot "${DIR}" python3 -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("mooncake").origin))')
missing=$(for f in mooncake_master store.so engine.so; do chroot "${DIR}" ldd "${pkg}/${f}"; done | awk '/=> not found/ {print $1}' | sort -u)
[[ -z "${missing}" ]] || die "the wheel's binaries miss $(echo "${missing}" | tr '\n' ' '): add them to DEB_PACKAGE_OF in hack/mooncake.sh"
version=${WHEEL#*==}
got=$(chroot "${DIR}" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin mooncake_master --version 2>&1 | head -n1)
[[ "${got}" == *"version ${version} "* ]] || die "mooncake_master in the image reports '${got}', expected version ${version}"
chroot "${DIR}" python3 -c 'import importlib.util as u, sys; from mooncake.store import MooncakeDistributedStore; sys.exit(u.find_spec("mooncake.mooncake_store_service") is None)' ||
  die "the image's python3 cannot import mooncake.store or find mooncake.mooncake_store_service"
log "installed in $((SECONDS - start))s: ${got}"

umount "${DIR}/proc"
# Slim: what a runtime image never reads. /dev is the runtime's; resolv.conf, hostname and the
# apt sources are this machine's.
rm -rf "${DIR}"/var/cache/apt/* "${DIR}"/var/lib/apt/lists/* "${DIR}"/var/cache/debconf/*-old \
       "${DIR}"/var/lib/dpkg/*-old "${DIR}"/var/log/* "${DIR}"/root/.cache "${DIR}"/tmp/* "${DIR}"/tmp/.[!.]* \
       "${DIR}"/usr/share/man/* "${DIR}"/usr/share/info/* "${DIR}"/usr/share/locale/* "${DIR}"/dev/* \
       "${DIR}"/etc/resolv.conf "${DIR}"/etc/hostname "${DIR}"/etc/apt/sources.list
find "${DIR}/usr/share/doc" -type f ! -name copyright -delete
find "${DIR}/usr/share/doc" -type l -delete
find "${DIR}/usr/share/doc" -mindepth 1 -type d -empty -delete
log "root file system: $(du -sh "${DIR}" | cut -f1)"
